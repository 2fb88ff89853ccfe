import { assign, setup } from 'xstate';
import { z } from 'zod';
import { ReceiptStage, receiptStages, stagesAfter } from '../wire/receipt.js';

/** The message as it was accepted from the sender. */
export const sendInputSchema = z.object({
  msgId: z.string(),
  traceId: z.string(),
  kind: z.string(),
  sender: z.string(),
  recipient: z.string(),
  digest: z.string(),
  size: z.number().int(),
  /** The recipient's host, when the roster (or this host) knew it: receipts must come from it. */
  recipientHost: z.string().optional(),
});
export type SendInput = z.infer<typeof sendInputSchema>;

const receiptEventSchema = z.object({
  type: z.literal('send.receipt'),
  stage: z.enum(receiptStages),
  /** The recipient gid the receipt is for: only the send's own recipient counts. */
  recipient: z.string(),
  reason: z.string().optional(),
  detail: z.string().optional(),
  /** When the recipient's gateway recorded the stage (its clock). */
  at: z.number(),
});
export type SendReceiptEvent = z.infer<typeof receiptEventSchema>;

export const sendEventSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('send.routedLocal') }),
  z.object({ type: z.literal('send.published') }),
  z.object({ type: z.literal('send.confirmed') }),
  z.object({ type: z.literal('send.failed'), code: z.string(), detail: z.string().optional() }),
  receiptEventSchema,
  z.object({ type: z.literal('actor.rehydrated') }),
]);
export type SendEvent = z.infer<typeof sendEventSchema>;

/** A stage as the sender recorded it (what `bridge_status` lists). */
export interface StageRecord {
  stage: ReceiptStage;
  at: number;
  reason?: string;
  detail?: string;
}

export interface SendContext extends SendInput {
  failure: string | null;
  /** The stages receipts reported, in the order they were recorded. */
  stages: StageRecord[];
}

/** States in which the send never got its confirm (nor a receipt): a keyed retry publishes again. */
export const unconfirmedSendStates: readonly string[] = ['accepted', 'published', 'failed'];

/** States whose call is still under way: a receipt waits until the send has left them. */
export const inFlightSendStates: readonly string[] = ['accepted', 'published'];

/**
 * One outbound message, from the sender's side: accepted, then either delivered by this
 * gateway (routed-local, invariant 3) or published to the broker and confirmed by it. A send
 * that failed (broker unreachable, inbox full) can be published again under the same msgId.
 * Then the recipient's gateway reports how far the delivery got (receipts, R-RC1):
 *
 *   accepted ──routedLocal──▶ routed-local ──┐
 *      │ published                           │
 *      ▼                                     │ receipt
 *   published ──confirmed──▶ confirmed ──────┤
 *      │ failed   ▲ published                │
 *      ▼          │                          ▼
 *   failed ───────┴─────────receipt──▶ queued ──▶ typed ──▶ submitted | handed-over |
 *                                                         dead-lettered | too-late   (final)
 *
 * A receipt moves the send forward only, and may skip stages (confirmed → submitted); one for
 * an earlier or the same stage, or for another recipient, is no transition at all. Failed takes
 * receipts too: a publish reported failed (the connection dropped before the confirm) may still
 * have got through. A receipt that overtakes the broker's confirm waits in the runtime until the
 * send has left `published` (so the log always reads published → confirmed → a stage).
 * Broadcasts get no receipts (their recipient is a routing key): they stay in confirmed or
 * routed-local.
 */
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
    recordStage: assign({
      stages: ({ context, event }) => {
        if (event.type !== 'send.receipt') return context.stages;
        const record: StageRecord = {
          stage: event.stage,
          at: event.at,
          ...(event.reason === undefined ? {} : { reason: event.reason }),
          ...(event.detail === undefined ? {} : { detail: event.detail }),
        };
        return [...context.stages, record];
      },
    }),
  },
  guards: {
    isReceipt: ({ context, event }, params: { stage: ReceiptStage }) =>
      event.type === 'send.receipt' && event.stage === params.stage && event.recipient === context.recipient,
  },
}).createMachine({
  id: 'send',
  context: ({ input }) => ({ ...input, failure: null, stages: [] }),
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
    'routed-local': { on: { 'send.receipt': receiptTransitions(null) } },
    confirmed: { on: { 'send.receipt': receiptTransitions(null) } },
    // Not final: a retry with the same idempotency key publishes the same msgId again, and
    // the receiver's dedup makes that safe.
    failed: {
      on: {
        'send.published': { target: 'published', actions: assign({ failure: null }) },
        'send.receipt': receiptTransitions(null),
      },
    },
    queued: { on: { 'send.receipt': receiptTransitions(ReceiptStage.queued) } },
    typed: { on: { 'send.receipt': receiptTransitions(ReceiptStage.typed) } },
    submitted: { type: 'final' },
    'handed-over': { type: 'final' },
    'dead-lettered': { type: 'final' },
    'too-late': { type: 'final' },
  },
});

/** The receipts a state takes: one transition per later stage, to the state of that name. */
function receiptTransitions(after: ReceiptStage | null) {
  return stagesAfter(after).map((stage) => ({
    guard: { type: 'isReceipt' as const, params: { stage } },
    target: stage,
    actions: 'recordStage' as const,
  }));
}
