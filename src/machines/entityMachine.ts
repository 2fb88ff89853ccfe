import { setup } from 'xstate';
import { z } from 'zod';
import { entityKindSchema } from '../wire/envelope.js';

/** Who the entity is and how it gets its messages, as it was registered. */
export const entityInputSchema = z.object({
  gid: z.string(),
  name: z.string(),
  kind: entityKindSchema,
  host: z.string(),
  groups: z.array(z.string()),
  /** Workers in panes get messages typed in; everyone else pulls them (R-DL3). */
  mode: z.enum(['inject', 'hold']),
});
export type EntityInput = z.infer<typeof entityInputSchema>;

export const busyStatuses = ['working', 'blocked', 'unknown'] as const;

export const entityEventSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('entity.activated') }),
  z.object({ type: z.literal('entity.busy'), status: z.enum(busyStatuses) }),
  z.object({ type: z.literal('entity.idle') }),
  z.object({ type: z.literal('entity.deregistered') }),
  /**
   * Its owner answered a permission request of its agent (issue 33): which request, how, and who
   * answered, recorded once the agent host took the answer.
   */
  z.object({
    type: z.literal('entity.ownerAnswered'),
    request: z.number().int().positive(),
    decision: z.enum(['allow', 'deny']),
    by: z.string().max(200),
  }),
  z.object({ type: z.literal('actor.rehydrated') }),
]);
export type EntityEvent = z.infer<typeof entityEventSchema>;

/**
 * One local entity (worker, main or orchestrator): registered, then active, where it is idle
 * (its pane can take input) or busy (its agent is working or showing a prompt, R-DL2), until
 * it is deregistered.
 */
export const entityMachine = setup({
  types: {
    context: {} as EntityInput,
    events: {} as EntityEvent,
    input: {} as EntityInput,
  },
  actions: {
    /** Its owner's answer is on disk (the agent host took it before it was sent here). */
    ownerAnswered: () => {},
  },
}).createMachine({
  id: 'entity',
  context: ({ input }) => input,
  initial: 'registered',
  on: { 'entity.deregistered': { target: '.gone' } },
  states: {
    registered: {
      on: { 'entity.activated': { target: 'active' } },
    },
    active: {
      initial: 'idle',
      on: {
        // After a restart the pane's status is unknown until its injector reports again.
        'actor.rehydrated': { target: 'registered' },
        // Recorded, as every answer an owner gives, with who gave it; nothing else changes.
        'entity.ownerAnswered': { actions: 'ownerAnswered' },
      },
      states: {
        idle: { on: { 'entity.busy': { target: 'busy' } } },
        busy: { on: { 'entity.idle': { target: 'idle' } } },
      },
    },
    gone: { type: 'final' },
  },
});
