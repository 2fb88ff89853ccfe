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
      },
      states: {
        idle: { on: { 'entity.busy': { target: 'busy' } } },
        busy: { on: { 'entity.idle': { target: 'idle' } } },
      },
    },
    gone: { type: 'final' },
  },
});
