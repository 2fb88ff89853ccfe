import { assign, setup } from 'xstate';
import { z } from 'zod';
import type { PaneTarget } from '../wire/paneTarget.js';
import { paneTargetSchema } from '../wire/paneTarget.js';

/** The spawn request as it arrived, with who asked for it. */
export const spawnInputSchema = z.object({
  requestId: z.string(),
  traceId: z.string(),
  /** The SPAWN message, and who sent it (the result goes back to that inbox). */
  msgId: z.string(),
  requester: z.object({ gid: z.string(), name: z.string(), host: z.string(), kind: z.string() }),
  profile: z.string(),
  name: z.string().optional(),
  groups: z.array(z.string()),
  /** Digest and size of the brief: the log never holds its text (R-H2). */
  digest: z.string(),
  size: z.number().int(),
});
export type SpawnInput = z.infer<typeof spawnInputSchema>;

export const spawnEventSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('spawn.launching'), gid: z.string(), name: z.string() }),
  z.object({
    type: z.literal('spawn.launched'),
    pane: paneTargetSchema.nullable(),
    /** An agent behind an agent host that a person can attach to: the command (Codex's TUI). */
    attach: z.string().max(4096).optional(),
  }),
  z.object({ type: z.literal('spawn.launchFailed'), code: z.string(), message: z.string() }),
  z.object({ type: z.literal('spawn.refused'), code: z.string(), message: z.string() }),
  z.object({ type: z.literal('spawn.answered') }),
  z.object({ type: z.literal('spawn.stopped'), by: z.string() }),
  /**
   * An owner's answer from another host (OWNER_ANSWER `requestId`), recorded before its agent
   * is asked: a redelivered request finds it and never answers a second permission request.
   */
  z.object({ type: z.literal('spawn.ownerAnswering'), requestId: z.string(), by: z.string() }),
  /** The agent took it: which of its requests, and how. */
  z.object({
    type: z.literal('spawn.ownerAnswered'),
    requestId: z.string(),
    request: z.number().int(),
    decision: z.enum(['allow', 'deny']),
  }),
  /**
   * The agent host refused it (nothing open to answer, or no such request): nothing was taken,
   * and a redelivered request gets the same refusal.
   */
  z.object({
    type: z.literal('spawn.ownerAnswerFailed'),
    requestId: z.string(),
    code: z.string(),
    message: z.string(),
  }),
  z.object({ type: z.literal('actor.rehydrated') }),
]);
export type SpawnEvent = z.infer<typeof spawnEventSchema>;

export interface SpawnContext extends SpawnInput {
  gid: string | null;
  entityName: string | null;
  pane: PaneTarget | null;
  /** The command that attaches a person to the agent's session, where its host printed one. */
  attach: string | null;
  error: { code: string; message: string } | null;
  answered: boolean;
  /** The latest owner's answers from another host (at most `keptOwnerAnswers`), oldest first. */
  ownerAnswers: OwnerAnswerMark[];
}

/**
 * An owner's answer from another host: asked of the agent (nothing else set: whether it took it
 * is not known until it says), taken (`request`, `decision`), or refused (`failure`).
 */
export interface OwnerAnswerMark {
  requestId: string;
  request: number | null;
  decision: 'allow' | 'deny' | null;
  failure: { code: string; message: string } | null;
}

/** How many owner's answers a spawn keeps for a redelivered request to find. */
export const keptOwnerAnswers = 16;

const markOwnerAnswers = assign<
  SpawnContext,
  Extract<SpawnEvent, { type: 'spawn.ownerAnswering' | 'spawn.ownerAnswered' | 'spawn.ownerAnswerFailed' }>,
  undefined,
  SpawnEvent,
  never
>({
  ownerAnswers: ({ context, event }) => {
    const others = context.ownerAnswers.filter((mark) => mark.requestId !== event.requestId);
    const mark: OwnerAnswerMark = {
      requestId: event.requestId,
      request: null,
      decision: null,
      failure: null,
    };
    if (event.type === 'spawn.ownerAnswered')
      Object.assign(mark, { request: event.request, decision: event.decision });
    if (event.type === 'spawn.ownerAnswerFailed') mark.failure = { code: event.code, message: event.message };
    return [...others, mark].slice(-keptOwnerAnswers);
  },
});

const recordError = assign<
  SpawnContext,
  Extract<SpawnEvent, { type: 'spawn.refused' | 'spawn.launchFailed' }>,
  undefined,
  SpawnEvent,
  never
>({ error: ({ event }) => ({ code: event.code, message: event.message }) });

/**
 * One spawn request on the host that runs it (U4). The request id is the actor id, so a SPAWN
 * that comes again (redelivery, a retried call, a restart) finds this actor and launches
 * nothing twice. The gid is chosen and recorded before the launch: a gateway that dies while
 * launching finds out on restart whether that entity got registered, and launches only if not.
 *
 *   requested ──launching──▶ launching ──launched──▶ running ──stopped──▶ stopped
 *       │                        │ launchFailed
 *       └──refused───────────────┴──────────────▶ refused ──answered──▶ closed
 *   `running` and `refused` answer the requester (SPAWN_RESULT) until `answered` is recorded.
 *   While `running`, an owner's answer from another host is marked `ownerAnswering` before the
 *   agent is asked and `ownerAnswered` (or `ownerAnswerFailed`, refused) after: a request that
 *   comes again is answered from its mark, never given to the agent twice.
 */
export const spawnMachine = setup({
  types: {
    context: {} as SpawnContext,
    events: {} as SpawnEvent,
    input: {} as SpawnInput,
  },
  actions: {
    /** Check the profile and pick the gid and name; answers launching or refused. */
    begin: () => {},
    /** Provision and start the agent, register it; answers launched or launchFailed. */
    launch: () => {},
    /** Send SPAWN_RESULT to the requester; answers `answered` once the broker took it. */
    answer: () => {},
  },
}).createMachine({
  id: 'spawn',
  context: ({ input }) => ({
    ...input,
    gid: null,
    entityName: null,
    pane: null,
    attach: null,
    error: null,
    answered: false,
    ownerAnswers: [],
  }),
  initial: 'requested',
  states: {
    requested: {
      entry: 'begin',
      on: {
        'spawn.launching': {
          target: 'launching',
          actions: assign({ gid: ({ event }) => event.gid, entityName: ({ event }) => event.name }),
        },
        'spawn.refused': { target: 'refused', actions: recordError },
        'actor.rehydrated': { target: 'requested', reenter: true },
      },
    },
    launching: {
      entry: 'launch',
      on: {
        'spawn.launched': {
          target: 'running',
          actions: assign({ pane: ({ event }) => event.pane, attach: ({ event }) => event.attach ?? null }),
        },
        'spawn.launchFailed': { target: 'refused', actions: recordError },
        // Died mid-launch: `launch` looks for what the first attempt left before starting again.
        'actor.rehydrated': { target: 'launching', reenter: true },
      },
    },
    running: {
      entry: 'answer',
      on: {
        'spawn.answered': { actions: assign({ answered: true }) },
        'spawn.stopped': { target: 'stopped' },
        'spawn.ownerAnswering': { actions: markOwnerAnswers },
        'spawn.ownerAnswered': { actions: markOwnerAnswers },
        'spawn.ownerAnswerFailed': { actions: markOwnerAnswers },
        'actor.rehydrated': { target: 'running', reenter: true },
      },
    },
    refused: {
      entry: 'answer',
      on: {
        'spawn.answered': { target: 'closed', actions: assign({ answered: true }) },
        'actor.rehydrated': { target: 'refused', reenter: true },
      },
    },
    stopped: { type: 'final' },
    closed: { type: 'final' },
  },
});
