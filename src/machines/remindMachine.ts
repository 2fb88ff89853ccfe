import { assign, setup } from 'xstate';
import { z } from 'zod';

/** Whom the reminders are for and their first and longest interval. */
export const remindInputSchema = z.object({
  entity: z.string(),
  firstMs: z.number().int().min(1),
  maxMs: z.number().int().min(1),
});
export type RemindInput = z.infer<typeof remindInputSchema>;

export const remindEventSchema = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('remind.held'),
    at: z.number(),
    count: z.number().int(),
    /** The intervals configured now: each round uses the current config. */
    firstMs: z.number().int().min(1).optional(),
    maxMs: z.number().int().min(1).optional(),
  }),
  z.object({ type: z.literal('remind.nudged'), at: z.number() }),
  z.object({ type: z.literal('remind.drained'), at: z.number() }),
  z.object({ type: z.literal('remind.ended') }),
  z.object({ type: z.literal('actor.rehydrated') }),
]);
export type RemindEvent = z.infer<typeof remindEventSchema>;

export interface RemindContext extends RemindInput {
  /** Nudges sent in this round. */
  nudges: number;
  /** When the next nudge is due, and when the last event happened (ms since epoch). */
  dueAt: number;
  lastAt: number;
}

/** The wait before nudge number `n + 1` of a round: first, then doubling, capped. */
export function remindInterval(context: Pick<RemindContext, 'firstMs' | 'maxMs'>, nudges: number): number {
  return Math.min(context.maxMs, context.firstMs * 2 ** nudges);
}

/**
 * Reminders for one entity that pulls its messages (U3, R-DL3): while messages wait for it,
 * it is nudged after `firstMs`, then at growing intervals (doubling, capped at `maxMs`),
 * until a drain (or an open send) takes them. The next due time is in the context and every
 * event carries the time it happened, so a restart re-arms the reminder where it was.
 *
 *   quiet ──held──▶ waiting ──(due)──▶ nudging ──nudged──▶ waiting …
 *     ▲                │                  │
 *     └────drained─────┴──────────────────┘
 */
export const remindMachine = setup({
  types: {
    context: {} as RemindContext,
    events: {} as RemindEvent,
    input: {} as RemindInput,
  },
  actions: {
    /** Remind the entity that messages wait; answers `remind.nudged`. */
    nudge: () => {},
  },
  delays: {
    untilDue: ({ context }) => Math.max(0, context.dueAt - context.lastAt),
  },
}).createMachine({
  id: 'remind',
  context: ({ input }) => ({ ...input, nudges: 0, dueAt: 0, lastAt: 0 }),
  initial: 'quiet',
  // The entity was deregistered: nothing more to remind.
  on: { 'remind.ended': { target: '.ended' } },
  states: {
    quiet: {
      on: {
        'remind.held': {
          target: 'waiting',
          actions: assign({
            nudges: 0,
            firstMs: ({ context, event }) => event.firstMs ?? context.firstMs,
            maxMs: ({ context, event }) => event.maxMs ?? context.maxMs,
            lastAt: ({ event }) => event.at,
            dueAt: ({ context, event }) =>
              event.at +
              remindInterval(
                { firstMs: event.firstMs ?? context.firstMs, maxMs: event.maxMs ?? context.maxMs },
                0,
              ),
          }),
        },
      },
    },
    waiting: {
      after: { untilDue: { target: 'nudging' } },
      on: {
        'remind.drained': { target: 'quiet', actions: assign({ lastAt: ({ event }) => event.at }) },
        'actor.rehydrated': { target: 'waiting', reenter: true },
      },
    },
    nudging: {
      entry: 'nudge',
      on: {
        'remind.nudged': {
          target: 'waiting',
          actions: assign({
            nudges: ({ context }) => context.nudges + 1,
            lastAt: ({ event }) => event.at,
            dueAt: ({ context, event }) => event.at + remindInterval(context, context.nudges + 1),
          }),
        },
        'remind.drained': { target: 'quiet', actions: assign({ lastAt: ({ event }) => event.at }) },
        // Died before the nudge went out: send it now.
        'actor.rehydrated': { target: 'nudging', reenter: true },
      },
    },
    ended: { type: 'final' },
  },
});
