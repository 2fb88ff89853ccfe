import { assign, setup } from 'xstate';
import { z } from 'zod';
import { DeadLetterReason } from '../wire/deadLetterReason.js';

const deadLetterReasons = Object.values(DeadLetterReason) as [DeadLetterReason, ...DeadLetterReason[]];

export const DeliveryMode = { inject: 'inject', hold: 'hold' } as const;
export type DeliveryMode = (typeof DeliveryMode)[keyof typeof DeliveryMode];

export const deliveryInputSchema = z.object({
  msgId: z.string(),
  traceId: z.string(),
  recipient: z.string(),
  sender: z.string(),
  /** The sender's host: where a flow view draws the message from before that host's export is added. */
  senderHost: z.string().optional(),
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
  /** How often a pane that cannot take the message (a dialog, half-typed input) is looked at again. */
  recheckMs: z.number().int().min(1).optional(),
});
export type DeliveryInput = z.infer<typeof deliveryInputSchema>;

export const deliveryEventSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('delivery.inject') }),
  z.object({ type: z.literal('delivery.hold') }),
  /** In the pane's input area, not submitted yet. */
  z.object({ type: z.literal('delivery.typed') }),
  /** The agent took it: verified by reading the pane back (R-DL6). */
  z.object({ type: z.literal('delivery.submitted'), how: z.string().optional() }),
  /** Enter was pressed and the text is still in the input area. */
  z.object({ type: z.literal('delivery.notSubmitted'), detail: z.string() }),
  /** The pane cannot take it now (a dialog, half-typed input, a busy agent): nothing was typed. */
  z.object({ type: z.literal('delivery.deferred'), reason: z.string(), detail: z.string() }),
  /** The pane that deferred it can take it now. */
  z.object({ type: z.literal('delivery.paneReady') }),
  z.object({ type: z.literal('delivery.injectFailed'), error: z.string() }),
  /** Where crash recovery found it (R-DL5). */
  z.object({ type: z.literal('delivery.located'), where: z.enum(['absent', 'typed', 'submitted']) }),
  /** Recorded by gateways before verified submission: `injected` meant typed with Enter. */
  z.object({ type: z.literal('delivery.injected'), recovered: z.boolean().optional() }),
  z.object({ type: z.literal('delivery.found') }),
  z.object({ type: z.literal('delivery.absent') }),
  z.object({
    type: z.literal('delivery.handedOver'),
    via: z.enum(['drain', 'open-send', 'ask', 'console']),
    /** `console`: the operator (gid) who took it at the operator console, to answer it. */
    by: z.string().optional(),
  }),
  z.object({ type: z.literal('delivery.returned') }),
  z.object({
    type: z.literal('delivery.acked'),
    via: z.enum(['pane', 'drain', 'open-send', 'ask', 'broker', 'console']),
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

/** A failed typing: retried after a backoff, dead-lettered as delivery-limit once attempts are used up. */
const injectFailed = [
  { guard: 'canRetry', target: 'backoff', actions: 'countAttempt' },
  { target: 'dead-lettered', actions: ['countAttempt', 'deliveryLimitReached'] },
] as const;

/**
 * One inbound message for one recipient (R-DL1, R-DL5, R-DL6). Pure: effects are named here
 * and supplied by the runtime; time comes in through `deadline` in the context and the delays.
 *
 *   pending ──inject──▶ injecting ──typed──▶ typed ──submitted──▶ submitted ──acked──▶ acked
 *    ▲  │                │  │ deferred      │ ▲  │ not submitted                      ▲
 *    │  │                │  ▼               │ │  ▼                                  │
 *    │  │  pane ready  waiting-pane ◀───────┘ └─ unsubmitted (retry: Enter only)     │
 *    ├──┼───────────────────┘                                                       │
 *    │  │  failed (from injecting or typed) ──▶ backoff ──(retry)──┐                 │
 *    └──┼──────────────────────────────────────────────────────────┘                 │
 *       └──hold──▶ held ──handedOver──▶ handed-over ──────────acked──────────────────┘
 *                   ▲                       │ returned (the response never got there)
 *                   └───────────────────────┘
 *   side exits: dead-lettered {reason} (not-submitted once the Enters are used up); a restart
 *   in `injecting`, `typed` or `unsubmitted` goes through `verifying`, which reads the pane
 *   before anything is typed again; an ANSWER whose turn is over goes from pending or held to
 *   too-late (U2).
 */
export const deliveryMachine = setup({
  types: {
    context: {} as DeliveryContext,
    events: {} as DeliveryEvent,
    input: {} as DeliveryInput,
  },
  actions: {
    /** One more attempt spent, and what went wrong with it. */
    countAttempt: assign({
      attempts: ({ context }) => context.attempts + 1,
      lastError: ({ event }) => {
        if (event.type === 'delivery.injectFailed') return event.error;
        if (event.type === 'delivery.notSubmitted') return event.detail;
        return null;
      },
    }),
    deliveryLimitReached: assign({ reason: DeadLetterReason.deliveryLimit }),
    neverSubmitted: assign({ reason: DeadLetterReason.notSubmitted }),
    /** Why the pane held it, for status and receipts. */
    recordDeferral: assign({
      lastError: ({ event }) => (event.type === 'delivery.deferred' ? event.detail : null),
    }),
    /** Type the message into the recipient's pane; answers typed, submitted, deferred or injectFailed. */
    typeIntoPane: () => {},
    /** Press Enter and read the pane back; answers submitted, notSubmitted, deferred or injectFailed. */
    submitTyped: () => {},
    /** Watch a pane that cannot take the message until it can; answers paneReady. */
    watchPane: () => {},
    /** Look for the message in the pane (R-DL5); answers located or injectFailed. */
    verifyInjection: () => {},
    /** Record the dead letter where an operator can see it; keeps the body. */
    deadLetter: () => {},
    /** Tell the answerer its answer came too late (a TOO_LATE notice). */
    noticeTooLate: () => {},
  },
  guards: {
    canRetry: ({ context }) => context.attempts + 1 < context.maxAttempts,
    isInjectMode: ({ context }) => context.mode === DeliveryMode.inject,
    foundSubmitted: ({ event }) => event.type === 'delivery.located' && event.where === 'submitted',
    foundTyped: ({ event }) => event.type === 'delivery.located' && event.where === 'typed',
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
        'delivery.typed': { target: 'typed' },
        'delivery.submitted': { target: 'submitted' },
        'delivery.deferred': { target: 'waiting-pane', actions: 'recordDeferral' },
        'delivery.injected': { target: 'submitted' },
        'delivery.injectFailed': injectFailed,
        // The gateway died mid-typing: look before typing again (R-DL5).
        'actor.rehydrated': { target: 'verifying' },
      },
    },
    // In the input area; Enter is pressed and the pane read back.
    typed: {
      entry: 'submitTyped',
      on: {
        'delivery.deadLettered': deadLetterOnRequest,
        'delivery.submitted': { target: 'submitted' },
        // Enter did not take: pressed again after a backoff; dead-lettered once attempts are used up.
        'delivery.notSubmitted': [
          { guard: 'canRetry', target: 'unsubmitted', actions: 'countAttempt' },
          { target: 'dead-lettered', actions: ['countAttempt', 'neverSubmitted'] },
        ],
        // A dialog came up before Enter: nothing pressed; typing resumes once it is gone
        // (the text, if still there, is found in the input and not typed again).
        'delivery.deferred': { target: 'waiting-pane', actions: 'recordDeferral' },
        'delivery.injectFailed': injectFailed,
        'actor.rehydrated': { target: 'verifying' },
      },
    },
    // Typed, and Enter did not take: wait, then press Enter again (never type it again).
    unsubmitted: {
      after: { retryDelay: { target: 'typed' } },
      on: {
        'delivery.deadLettered': deadLetterOnRequest,
        'actor.rehydrated': { target: 'verifying' },
      },
    },
    // The pane cannot take it (a dialog, someone's half-typed input, a busy agent): nothing is
    // typed until it can. Attempts are not spent here; the deadline still is.
    'waiting-pane': {
      entry: 'watchPane',
      after: {
        untilDeadline: { target: 'dead-lettered', actions: assign({ reason: DeadLetterReason.expired }) },
      },
      on: {
        'delivery.deadLettered': deadLetterOnRequest,
        'delivery.paneReady': { target: 'pending' },
        'actor.rehydrated': { target: 'waiting-pane', reenter: true },
      },
    },
    verifying: {
      entry: 'verifyInjection',
      on: {
        'delivery.deadLettered': deadLetterOnRequest,
        'delivery.located': [
          { guard: 'foundSubmitted', target: 'submitted' },
          { guard: 'foundTyped', target: 'typed' },
          // Not typed yet: back in line, so the pane decides when (R-DL2).
          { target: 'pending' },
        ],
        'delivery.found': { target: 'submitted' },
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
    // The agent took it (R-DL6); acked once that is on disk.
    submitted: {
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
