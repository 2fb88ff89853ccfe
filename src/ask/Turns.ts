import type { AnswerClaim, AnswerClaims, Handover } from '../deliver/handover.js';
import { BridgeError, ErrorCode } from '../errors.js';
import { ActorCell, type RuntimeDeps } from '../kernel/ActorCell.js';
import { readActorInput } from '../kernel/readActorInput.js';
import { resumeOrReport } from '../kernel/resumeOrReport.js';
import type { ActorKind } from '../machines/index.js';
import { judgeAnswer, type TurnView } from '../machines/judgeAnswer.js';
import { type TurnInput, turnMachine } from '../machines/turnMachine.js';
import { readActorHead, readLiveActors } from '../store/actorHeads.js';
import { readActorEvents } from '../store/readEvents.js';
import type { Envelope } from '../wire/envelope.js';

export const turnKind = 'turn' satisfies ActorKind;

/** How an ask ended, for the caller parked on it. */
export type TurnOutcome =
  | { state: 'answered'; handover: Handover }
  | { state: 'expired' | 'abandoned'; why: string };

type TurnCell = ActorCell<typeof turnMachine>;

interface LiveTurn {
  readonly cell: TurnCell;
  /** The parked tool call, while there is one. */
  caller: ((outcome: TurnOutcome) => void) | undefined;
  /** The answer that ended the turn, handed to the caller when `answered` is on disk. */
  answer: Handover | undefined;
}

/**
 * The asking turns of this gateway's entities (U2): one turn actor per `bridge_ask`, waiting
 * for its answer until its deadline. The caller's tool call is attached while it is open; a
 * restart leaves the turn waiting with its deadline re-armed and no caller, until the caller
 * asks again with the same idempotency key. An answer for a turn that is over, or whose caller
 * is gone, is claimed by nobody: its delivery goes `too-late` and the answerer is told.
 */
export class Turns implements AnswerClaims {
  private readonly live = new Map<string, LiveTurn>();
  private readonly machine;

  constructor(private readonly deps: RuntimeDeps) {
    this.machine = turnMachine.provide({
      actions: { settleCaller: ({ context }) => this.settle(context.turnId) },
      delays: { untilDeadline: ({ context }) => Math.max(0, context.deadline - deps.clock.now()) },
    });
  }

  /** Rebuilds the waiting turns after a restart: deadlines re-armed, nobody attached yet. */
  rehydrate(): number {
    for (const head of readLiveActors(this.deps.store, turnKind)) {
      resumeOrReport(this.deps.logger, { actor: turnKind, id: head.actorId, traceId: head.traceId }, () => {
        const rows = readActorEvents(this.deps.store, turnKind, head.actorId);
        const cell = ActorCell.rehydrate(
          this.machine,
          rows,
          {
            kind: turnKind,
            id: head.actorId,
            traceId: head.traceId,
            msgId: rows[0]?.msgId ?? null,
            owner: head.owner,
          },
          this.deps,
        );
        this.live.set(head.actorId, { cell, caller: undefined, answer: undefined });
        cell.send({ type: 'actor.rehydrated' });
      });
    }
    return this.live.size;
  }

  /** Opens a turn; attach the caller before the ASK goes out. */
  open(input: TurnInput): void {
    const cell = ActorCell.create(
      this.machine,
      input,
      { kind: turnKind, id: input.turnId, traceId: input.traceId, msgId: input.askMsgId, owner: input.asker },
      this.deps,
    );
    this.live.set(input.turnId, { cell, caller: undefined, answer: undefined });
  }

  /** A turn's state: waiting (live), a final state from the log, or undefined if none. */
  stateOf(turnId: string): { state: string; context: TurnInput | undefined } | undefined {
    const live = this.live.get(turnId);
    if (live) return { state: live.cell.state, context: live.cell.context };
    const head = readActorHead(this.deps.store, turnKind, turnId);
    if (!head) return undefined;
    return { state: head.state, context: readActorInput(this.deps.store, turnKind, turnId) };
  }

  /**
   * Parks the caller on a waiting turn until it ends. `signal` aborts when the caller hangs
   * up: the turn is then abandoned (an answer after that is too late).
   */
  attach(turnId: string, signal?: AbortSignal): Promise<TurnOutcome> {
    const live = this.live.get(turnId);
    if (!live || live.cell.done) {
      return Promise.reject(new BridgeError(ErrorCode.internal, `turn ${turnId} is not waiting`));
    }
    if (live.caller) live.caller({ state: 'abandoned', why: 'the same ask was attached again by a retry' });
    return new Promise<TurnOutcome>((resolve) => {
      const onAbort = (): void => this.abandon(turnId, 'the caller hung up before the answer came');
      const caller = (outcome: TurnOutcome): void => {
        signal?.removeEventListener('abort', onAbort);
        resolve(outcome);
      };
      live.caller = caller;
      if (signal?.aborted) onAbort();
      else signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Ends a waiting turn without an answer (the ASK could not be sent, the caller left). */
  abandon(turnId: string, why: string): void {
    const live = this.live.get(turnId);
    if (live?.cell.state !== 'waiting') return;
    live.cell.send({ type: 'turn.abandoned', why });
  }

  /** Whether `answer` resumes its turn (`judgeAnswer`); a turn whose caller is gone ends. */
  claim(recipient: string, answer: Envelope): AnswerClaim {
    const turnId = answer.turnId;
    const live = turnId === undefined ? undefined : this.live.get(turnId);
    const verdict = judgeAnswer(
      { turnId, recipient, answerer: answer.from.gid },
      live ? this.viewOf(live) : this.endedView(turnId),
    );
    if (verdict.verdict === 'resume' && live) {
      return {
        ok: true,
        resume: (handover) => {
          live.answer = handover;
          live.cell.send({ type: 'turn.answered', answerMsgId: answer.msgId });
        },
      };
    }
    if (verdict.verdict === 'too-late' && verdict.abandon !== undefined && turnId !== undefined) {
      this.abandon(turnId, verdict.abandon);
    }
    return { ok: false, why: verdict.verdict === 'too-late' ? verdict.why : 'the turn is gone' };
  }

  private viewOf(live: LiveTurn): TurnView {
    const { cell } = live;
    return {
      known: 'live',
      state: cell.state,
      asker: cell.context.asker,
      recipient: cell.context.recipient,
      callerAttached: live.caller !== undefined,
    };
  }

  private endedView(turnId: string | undefined): TurnView {
    const known = turnId === undefined ? undefined : this.stateOf(turnId);
    return known ? { known: 'ended', state: known.state } : { known: 'none' };
  }

  /** The turn ended and that is on disk: tell the caller, if there is still one. */
  private settle(turnId: string): void {
    const live = this.live.get(turnId);
    if (!live) return;
    this.live.delete(turnId);
    const { cell, caller, answer } = live;
    if (cell.state === 'answered' && answer) {
      if (caller) caller({ state: 'answered', handover: answer });
      else answer.giveBack();
      return;
    }
    const why =
      cell.state === 'expired'
        ? `no answer within ${Math.round((cell.context.deadline - cell.context.startedAt) / 1000)} s`
        : (cell.context.why ?? 'the ask ended');
    caller?.({ state: cell.state === 'expired' ? 'expired' : 'abandoned', why });
  }

  stop(): void {
    for (const live of this.live.values()) live.cell.stop();
  }
}
