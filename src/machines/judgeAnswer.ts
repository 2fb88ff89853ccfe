// The too-late decision (U2, STYLE "Decide, then do"): whether an ANSWER that reached its
// asker's gateway resumes the turn that asked, or comes too late and its answerer is told.
// Turns gathers what it knows of the turn and executes the verdict.

/** What the asker's gateway knows of the turn an answer names. */
export type TurnView =
  /** A turn of this gateway still in memory: waiting, or just ended. */
  | {
      known: 'live';
      state: string;
      asker: string;
      recipient: string;
      /** Whether the asking tool call is still attached (a restart detaches it). */
      callerAttached: boolean;
    }
  /** A turn that ended before: its final state from the log. */
  | { known: 'ended'; state: string }
  | { known: 'none' };

export interface AnswerArrival {
  turnId: string | undefined;
  /** The entity the answer is for (the asker). */
  recipient: string;
  /** The entity that answered. */
  answerer: string;
}

export type AnswerVerdict =
  | { verdict: 'resume' }
  /** Too late: `why` goes to the answerer; `abandon` ends a waiting turn whose caller is gone. */
  | { verdict: 'too-late'; why: string; abandon?: string };

/**
 * An answer resumes its turn only if the turn waits, was asked of this answerer by this
 * recipient, and its caller is still there to take it; any other answer comes too late.
 */
export function judgeAnswer(arrival: AnswerArrival, turn: TurnView): AnswerVerdict {
  if (arrival.turnId === undefined) return { verdict: 'too-late', why: 'the answer names no turn' };
  if (turn.known === 'none') {
    return { verdict: 'too-late', why: `no ask of this gateway has turn ${arrival.turnId}` };
  }
  if (turn.known === 'ended') return { verdict: 'too-late', why: `the ask was already ${turn.state}` };
  if (turn.asker !== arrival.recipient || turn.recipient !== arrival.answerer) {
    return { verdict: 'too-late', why: 'the answer does not come from the entity that was asked' };
  }
  if (turn.state !== 'waiting') return { verdict: 'too-late', why: `the ask was already ${turn.state}` };
  if (!turn.callerAttached) {
    return {
      verdict: 'too-late',
      why: 'the asking call was gone when the answer came',
      abandon: 'the caller was gone (its gateway restarted) when the answer came',
    };
  }
  return { verdict: 'resume' };
}

export type AnswerSendVerdict = { verdict: 'send' } | { verdict: 'too-late'; expiredAt: number };

/**
 * The answerer's side: an answer to an ASK whose deadline has passed is not sent, since no turn
 * can take it any more; its asker's gateway judges the rest (`judgeAnswer`).
 */
export function judgeAnswerSend(ask: { deadline: number }, now: number): AnswerSendVerdict {
  return now > ask.deadline ? { verdict: 'too-late', expiredAt: ask.deadline } : { verdict: 'send' };
}
