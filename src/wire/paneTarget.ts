import { z } from 'zod';

/**
 * A `PaneTarget` (inject/paneInjector.ts) as it is stored (an entity's row, a spawn's log) or
 * sent to the admin socket. Here rather than beside the type so that the spawn machine, which
 * records one, stays clear of the injectors.
 */
export const paneTargetSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('tmux'), target: z.string().min(1), socket: z.string().min(1).optional() }),
  z.object({ type: z.literal('herdr'), paneId: z.string().min(1), socketPath: z.string().min(1).optional() }),
]);
