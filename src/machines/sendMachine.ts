import { assign, setup } from 'xstate';
import { z } from 'zod';

/**
 * One outbound message, from the sender's side: accepted, then either delivered by this
 * gateway (routed-local, invariant 3) or published to the broker and confirmed by it. A send
 * that failed (broker unreachable, inbox full) can be published again under the same msgId.
 */
export const sendInputSchema = z.object({
  msgId: z.string(),
  traceId: z.string(),
  kind: z.string(),
  sender: z.string(),
  recipient: z.string(),
  digest: z.string(),
  size: z.number().int(),
});
export type SendInput = z.infer<typeof sendInputSchema>;

export const sendEventSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('send.routedLocal') }),
  z.object({ type: z.literal('send.published') }),
  z.object({ type: z.literal('send.confirmed') }),
  z.object({ type: z.literal('send.failed'), code: z.string(), detail: z.string().optional() }),
  z.object({ type: z.literal('actor.rehydrated') }),
]);
export type SendEvent = z.infer<typeof sendEventSchema>;

export interface SendContext extends SendInput {
  failure: string | null;
}

export const sendMachine = setup({
  types: {
    context: {} as SendContext,
    events: {} as SendEvent,
    input: {} as SendInput,
  },
  actions: {
    recordFailure: assign({
      failure: ({ event }) => {
        if (event.type !== 'send.failed') return null;
        return event.detail ? `${event.code}: ${event.detail}` : event.code;
      },
    }),
  },
}).createMachine({
  id: 'send',
  context: ({ input }) => ({ ...input, failure: null }),
  initial: 'accepted',
  states: {
    accepted: {
      on: {
        'send.routedLocal': { target: 'routed-local' },
        'send.published': { target: 'published' },
        'send.failed': { target: 'failed', actions: 'recordFailure' },
      },
    },
    published: {
      on: {
        'send.confirmed': { target: 'confirmed' },
        'send.failed': { target: 'failed', actions: 'recordFailure' },
      },
    },
    'routed-local': { type: 'final' },
    confirmed: { type: 'final' },
    // Not final: a retry with the same idempotency key publishes the same msgId again, and
    // the receiver's dedup makes that safe.
    failed: {
      on: { 'send.published': { target: 'published', actions: assign({ failure: null }) } },
    },
  },
});
