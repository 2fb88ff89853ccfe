import { assign, setup } from 'xstate';
import { z } from 'zod';

/** The ask that opened the turn, who asks whom, and when it ends. */
export const turnInputSchema = z.object({
  turnId: z.string(),
  /** The ASK message that opened the turn. */
  askMsgId: z.string(),
  traceId: z.string(),
  /** Who asks (local entity gid) and whom (gid). */
  asker: z.string(),
  recipient: z.string(),
  startedAt: z.number(),
  deadline: z.number(),
});
export type TurnInput = z.infer<typeof turnInputSchema>;

export const turnEventSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('turn.answered'), answerMsgId: z.string() }),
  z.object({ type: z.literal('turn.abandoned'), why: z.string() }),
  z.object({ type: z.literal('actor.rehydrated') }),
]);
export type TurnEvent = z.infer<typeof turnEventSchema>;

export interface TurnContext extends TurnInput {
  /** The answer that ended the turn, or why it ended without one. */
  answerMsgId: string | null;
  why: string | null;
}

/**
 * One asking turn (U2): a caller parked in `bridge_ask` until the answer comes or the
 * deadline passes. The deadline is in the context, so a restarted gateway re-arms it and it
 * fires on time. A turn that is over takes no answer: a late one is `too-late` on its
 * delivery, and the answerer is told.
 *
 *   waiting ──answered──▶ answered
 *      ├──(deadline)───▶ expired
 *      └──abandoned────▶ abandoned   (the caller went away: hung up, or its gateway restarted
 *                                     and an answer came before the caller was back)
 */
export const turnMachine = setup({
  types: {
    context: {} as TurnContext,
    events: {} as TurnEvent,
    input: {} as TurnInput,
  },
  actions: {
    /** Tell the parked caller (if it is still there) how the turn ended. */
    settleCaller: () => {},
  },
  delays: {
    // Pure default for replay; the runtime measures from its clock.
    untilDeadline: ({ context }) => Math.max(0, context.deadline - context.startedAt),
  },
}).createMachine({
  id: 'turn',
  context: ({ input }) => ({ ...input, answerMsgId: null, why: null }),
  initial: 'waiting',
  states: {
    waiting: {
      after: { untilDeadline: { target: 'expired' } },
      on: {
        'turn.answered': {
          target: 'answered',
          actions: assign({ answerMsgId: ({ event }) => event.answerMsgId }),
        },
        'turn.abandoned': { target: 'abandoned', actions: assign({ why: ({ event }) => event.why }) },
        // Re-entered so the deadline timer is armed again from the recorded deadline.
        'actor.rehydrated': { target: 'waiting', reenter: true },
      },
    },
    answered: { type: 'final', entry: 'settleCaller' },
    expired: { type: 'final', entry: 'settleCaller' },
    abandoned: { type: 'final', entry: 'settleCaller' },
  },
});
