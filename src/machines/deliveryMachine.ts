import { assign, setup } from 'xstate';
import { z } from 'zod';

/**
 * One inbound message for one recipient (R-DL1, R-DL5). Pure: effects are named here and
 * supplied by the runtime; time comes in through `deadline` in the context and the delays.
 *
 *   pending ──inject──▶ injecting ──injected──▶ injected ──acked──▶ acked
 *      │                  │  ▲ failed                                ▲
 *      │                  ▼  │                                       │
 *      │               backoff (retry) ─▶ pending                     │
 *      └──hold──▶ held ──handedOver──▶ handed-over ────acked─────────┘
 *                   ▲                       │ returned (the response never got there)
 *                   └───────────────────────┘
 *   side exits: dead-lettered {reason}; a restart in `injecting` goes through `verifying`;
 *   an ANSWER whose turn is over goes from pending or held to too-late (U2).
 */
export const DeadLetterReason = {
  rejected: 'rejected',
  expired: 'expired',
  maxlen: 'maxlen',
  badSignature: 'bad-signature',
  unknownSender: 'unknown-sender',
  newerMajor: 'newer-major',
  deliveryLimit: 'delivery-limit',
  recipientGone: 'recipient-gone',
} as const;
export type DeadLetterReason = (typeof DeadLetterReason)[keyof typeof DeadLetterReason];
const deadLetterReasons = Object.values(DeadLetterReason) as [DeadLetterReason, ...DeadLetterReason[]];

export const DeliveryMode = { inject: 'inject', hold: 'hold' } as const;
export type DeliveryMode = (typeof DeliveryMode)[keyof typeof DeliveryMode];

export const deliveryInputSchema = z.object({
  msgId: z.string(),
  traceId: z.string(),
  recipient: z.string(),
  sender: z.string(),
  mode: z.enum([DeliveryMode.inject, DeliveryMode.hold]),
  /** When it was accepted and when it expires (ms since epoch). */
  acceptedAt: z.number(),
  deadline: z.number(),
  maxAttempts: z.number().int().min(1),
  retryBaseMs: z.number().int().min(1),
  /** Digest and size of the body: the log never holds the text (R-H2). */
  digest: z.string(),
  size: z.number().int(),
  /** The wire kind (SEND, ASK, …) and, for ASK/ANSWER, the asking turn. */
  kind: z.string().optional(),
  turnId: z.string().optional(),
});
export type DeliveryInput = z.infer<typeof deliveryInputSchema>;

export const deliveryEventSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('delivery.inject') }),
  z.object({ type: z.literal('delivery.hold') }),
  z.object({ type: z.literal('delivery.injected'), recovered: z.boolean().optional() }),
  z.object({ type: z.literal('delivery.injectFailed'), error: z.string() }),
  z.object({ type: z.literal('delivery.found') }),
  z.object({ type: z.literal('delivery.absent') }),
  z.object({ type: z.literal('delivery.handedOver'), via: z.enum(['drain', 'open-send', 'ask']) }),
  z.object({ type: z.literal('delivery.returned') }),
  z.object({
    type: z.literal('delivery.acked'),
    via: z.enum(['pane', 'drain', 'open-send', 'ask', 'broker']),
  }),
  /** An answer whose turn is over (expired, answered, its caller gone): injected nowhere. */
  z.object({ type: z.literal('delivery.tooLate'), turnId: z.string(), why: z.string() }),
  z.object({
    type: z.literal('delivery.deadLettered'),
    reason: z.enum(deadLetterReasons),
    detail: z.string().optional(),
  }),
  z.object({ type: z.literal('actor.rehydrated') }),
]);
export type DeliveryEvent = z.infer<typeof deliveryEventSchema>;

export interface DeliveryContext extends DeliveryInput {
  attempts: number;
  lastError: string | null;
  reason: DeadLetterReason | null;
}

const retryCapMs = 60_000;

/** Any live delivery can be dead-lettered on request (bad input, recipient gone); a finished one cannot. */
const deadLetterOnRequest = {
  target: 'dead-lettered',
  actions: assign<
    DeliveryContext,
    Extract<DeliveryEvent, { type: 'delivery.deadLettered' }>,
    undefined,
    DeliveryEvent,
    never
  >({
    reason: ({ event }) => event.reason,
    lastError: ({ event }) => event.detail ?? null,
  }),
} as const;

export const deliveryMachine = setup({
  types: {
    context: {} as DeliveryContext,
    events: {} as DeliveryEvent,
    input: {} as DeliveryInput,
  },
  actions: {
    /** Type the message into the recipient's pane; answers injected or injectFailed. */
    typeIntoPane: () => {},
    /** Look for the msg id in the pane's recent output; answers found, absent or injectFailed. */
    verifyInjection: () => {},
    /** Record the dead letter where an operator can see it; keeps the body. */
    deadLetter: () => {},
    /** Tell the answerer its answer came too late (a TOO_LATE notice). */
    noticeTooLate: () => {},
  },
  guards: {
    canRetry: ({ context }) => context.attempts + 1 < context.maxAttempts,
    isInjectMode: ({ context }) => context.mode === DeliveryMode.inject,
  },
  delays: {
    // Pure defaults so replay computes the same actions; the runtime supplies wall-clock ones.
    untilDeadline: ({ context }) => Math.max(0, context.deadline - context.acceptedAt),
    retryDelay: ({ context }) =>
      Math.min(retryCapMs, context.retryBaseMs * 2 ** Math.max(0, context.attempts - 1)),
  },
}).createMachine({
  id: 'delivery',
  context: ({ input }) => ({ ...input, attempts: 0, lastError: null, reason: null }),
  initial: 'pending',
  states: {
    pending: {
      after: {
        untilDeadline: { target: 'dead-lettered', actions: assign({ reason: DeadLetterReason.expired }) },
      },
      on: {
        'delivery.deadLettered': deadLetterOnRequest,
        'delivery.inject': { guard: 'isInjectMode', target: 'injecting' },
        'delivery.hold': { target: 'held' },
        'delivery.tooLate': { target: 'too-late', actions: assign({ lastError: ({ event }) => event.why }) },
        'actor.rehydrated': { target: 'pending', reenter: true },
      },
    },
    injecting: {
      entry: 'typeIntoPane',
      on: {
        'delivery.deadLettered': deadLetterOnRequest,
        'delivery.injected': { target: 'injected' },
        'delivery.injectFailed': [
          {
            guard: 'canRetry',
            target: 'backoff',
            actions: assign({
              attempts: ({ context }) => context.attempts + 1,
              lastError: ({ event }) => event.error,
            }),
          },
          {
            target: 'dead-lettered',
            actions: assign({
              attempts: ({ context }) => context.attempts + 1,
              lastError: ({ event }) => event.error,
              reason: DeadLetterReason.deliveryLimit,
            }),
          },
        ],
        // The gateway died mid-typing: look before typing again (R-DL5).
        'actor.rehydrated': { target: 'verifying' },
      },
    },
    verifying: {
      entry: 'verifyInjection',
      on: {
        'delivery.deadLettered': deadLetterOnRequest,
        'delivery.found': { target: 'injected' },
        // Not typed yet: back in line, so the pane's status decides when (R-DL2).
        'delivery.absent': { target: 'pending' },
        'delivery.injectFailed': {
          target: 'backoff',
          actions: assign({ lastError: ({ event }) => event.error }),
        },
        'actor.rehydrated': { target: 'verifying', reenter: true },
      },
    },
    backoff: {
      after: { retryDelay: { target: 'pending' } },
      on: {
        'delivery.deadLettered': deadLetterOnRequest,
        'actor.rehydrated': { target: 'backoff', reenter: true },
      },
    },
    injected: {
      on: {
        'delivery.deadLettered': deadLetterOnRequest,
        'delivery.acked': { target: 'acked' },
      },
    },
    held: {
      after: {
        untilDeadline: { target: 'dead-lettered', actions: assign({ reason: DeadLetterReason.expired }) },
      },
      on: {
        'delivery.deadLettered': deadLetterOnRequest,
        'delivery.handedOver': { target: 'handed-over' },
        'delivery.tooLate': { target: 'too-late', actions: assign({ lastError: ({ event }) => event.why }) },
        'actor.rehydrated': { target: 'held', reenter: true },
      },
    },
    // In a tool result on its way to the main: acked once the response is out, held again if
    // it never got there (connection gone, gateway restarted), so it is offered again.
    'handed-over': {
      on: {
        'delivery.deadLettered': deadLetterOnRequest,
        'delivery.acked': { target: 'acked' },
        'delivery.returned': { target: 'held' },
        'actor.rehydrated': { target: 'held' },
      },
    },
    acked: { type: 'final' },
    'dead-lettered': { type: 'final', entry: 'deadLetter' },
    'too-late': { type: 'final', entry: 'noticeTooLate' },
  },
});
