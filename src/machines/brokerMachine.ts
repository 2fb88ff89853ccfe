import { assign, setup } from 'xstate';
import { z } from 'zod';

/** What the connection starts from: the host it is for and the bounds of its reconnect backoff. */
export const brokerInputSchema = z.object({
  hostId: z.string(),
  retryBaseMs: z.number().int().min(1),
  retryMaxMs: z.number().int().min(1),
});
export type BrokerInput = z.infer<typeof brokerInputSchema>;

export const brokerEventSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('broker.connect') }),
  /** `node`: which broker node, without its password (R-TOP3; absent in logs before it). */
  z.object({ type: z.literal('broker.connected'), node: z.string().optional() }),
  /** `retryInMs`: when the next node is free to try (absent: the backoff by attempts). */
  z.object({
    type: z.literal('broker.lost'),
    error: z.string(),
    retryInMs: z.number().int().min(0).optional(),
  }),
  z.object({ type: z.literal('broker.blocked'), reason: z.string() }),
  z.object({ type: z.literal('broker.unblocked') }),
  z.object({ type: z.literal('broker.stop') }),
]);
export type BrokerEvent = z.infer<typeof brokerEventSchema>;

export interface BrokerContext extends BrokerInput {
  attempts: number;
  lastError: string | null;
  /** The node connected to, or last connected to. */
  node: string | null;
  retryInMs: number | null;
}

/**
 * The gateway's broker connection (R-H5). Pure: `openConnection` is named here and performed
 * by the broker actor, which answers with `broker.connected` or `broker.lost`. While it is not
 * `connected`, remote sends fail fast; nothing is buffered on the broker's behalf.
 *
 *   idle ─connect─▶ connecting ─connected─▶ connected ⇄ blocked
 *                      ▲   │ lost               │ lost
 *                      │   ▼                    ▼
 *                      └─ backoff ◀─────────────┘        (any) ─stop─▶ stopped
 */
export const brokerMachine = setup({
  types: { context: {} as BrokerContext, events: {} as BrokerEvent, input: {} as BrokerInput },
  actions: {
    /** Connect, declare the whole topology and re-open every consumer. */
    openConnection: () => {},
    /** Close the connection, if any. */
    closeConnection: () => {},
  },
  delays: {
    retryDelay: ({ context }) =>
      context.retryInMs ??
      Math.min(context.retryMaxMs, context.retryBaseMs * 2 ** Math.max(0, context.attempts - 1)),
  },
}).createMachine({
  id: 'broker',
  context: ({ input }) => ({ ...input, attempts: 0, lastError: null, node: null, retryInMs: null }),
  initial: 'idle',
  states: {
    idle: { on: { 'broker.connect': { target: 'connecting' }, 'broker.stop': { target: 'stopped' } } },
    connecting: {
      entry: 'openConnection',
      on: {
        'broker.stop': { target: 'stopped' },
        'broker.connected': {
          target: 'connected',
          actions: assign({ attempts: 0, lastError: null, node: ({ event }) => event.node ?? null }),
        },
        'broker.lost': {
          target: 'backoff',
          actions: assign({
            attempts: ({ context }) => context.attempts + 1,
            lastError: ({ event }) => event.error,
            retryInMs: ({ event }) => event.retryInMs ?? null,
          }),
        },
      },
    },
    connected: {
      on: {
        'broker.stop': { target: 'stopped' },
        'broker.blocked': { target: 'blocked', actions: assign({ lastError: ({ event }) => event.reason }) },
        'broker.lost': {
          target: 'backoff',
          actions: assign({
            attempts: 1,
            lastError: ({ event }) => event.error,
            retryInMs: ({ event }) => event.retryInMs ?? null,
          }),
        },
      },
    },
    blocked: {
      on: {
        'broker.stop': { target: 'stopped' },
        'broker.unblocked': { target: 'connected', actions: assign({ lastError: null }) },
        'broker.lost': {
          target: 'backoff',
          actions: assign({
            attempts: 1,
            lastError: ({ event }) => event.error,
            retryInMs: ({ event }) => event.retryInMs ?? null,
          }),
        },
      },
    },
    backoff: {
      after: { retryDelay: { target: 'connecting' } },
      on: { 'broker.stop': { target: 'stopped' } },
    },
    stopped: { type: 'final', entry: 'closeConnection' },
  },
});
