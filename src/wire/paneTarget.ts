import { z } from 'zod';
import { type BusyPolicy, busyPolicySchema } from './agentHost.js';

/**
 * The pane an entity is typed into: a tmux target (on the default server or a socket's) or a
 * herdr pane; or, for an agent that takes its prompts over its own protocol, the socket of the
 * agent host that runs it (wire/agentHost.ts). Here, in the base, rather than with the injectors (panes/), so that what records
 * one (an entity's row, the spawn machine) stays clear of them.
 */
export type PaneTarget =
  | { readonly type: 'tmux'; readonly target: string; readonly socket?: string | undefined }
  | { readonly type: 'herdr'; readonly paneId: string; readonly socketPath?: string | undefined }
  | {
      readonly type: 'agent';
      readonly socketPath: string;
      /** This worker's policy for a message while its agent is in a turn (else the gateway's). */
      readonly busy?: BusyPolicy | undefined;
    };

/** A `PaneTarget` as it is stored (an entity's row, a spawn's log) or sent to the admin socket. */
export const paneTargetSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('tmux'), target: z.string().min(1), socket: z.string().min(1).optional() }),
  z.object({ type: z.literal('herdr'), paneId: z.string().min(1), socketPath: z.string().min(1).optional() }),
  z.object({ type: z.literal('agent'), socketPath: z.string().min(1), busy: busyPolicySchema.optional() }),
]);
