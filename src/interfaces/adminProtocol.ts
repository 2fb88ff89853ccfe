import { join } from 'node:path';
import { z } from 'zod';
import type { Config } from '../config/schema.js';
import { busyPolicySchema } from '../wire/agentHost.js';
import {
  entityKindSchema,
  entityNameSchema,
  groupNameSchema,
  groupsSchema,
  profileRequestSchema,
  WireKind,
} from '../wire/envelope.js';
import { paneTargetSchema } from '../wire/paneTarget.js';

/** Where a gateway listens for the CLI: `admin.sock` in its home. */
export function adminSocketPath(config: Config): string {
  return join(config.home, 'admin.sock');
}

/** The admin socket's requests: operator commands from the CLI to the running gateway. */
export const registerBody = z.strictObject({
  kind: entityKindSchema,
  name: entityNameSchema,
  groups: groupsSchema.optional(),
  pane: paneTargetSchema.optional(),
});

export const deregisterBody = z.strictObject({ address: z.string().min(1) });

export const sendBody = z.strictObject({
  token: z.string().min(1),
  to: z.string().min(1),
  text: z.string().min(1),
  kind: z.enum([WireKind.send, WireKind.reply]).default(WireKind.send),
  inReplyTo: z.string().uuid().optional(),
  idempotencyKey: z.string().min(1).max(200).optional(),
  waitMs: z.number().int().min(0).optional(),
  waitFor: z.enum(['queued', 'submitted']).optional(),
  busy: busyPolicySchema.optional(),
});

/** Where a message sent from this gateway is (R-RC1); the operator may ask about any. */
export const messageStatusBody = z.strictObject({ msgId: z.string().uuid() });

export const drainBody = z.strictObject({
  token: z.string().min(1),
  max: z.number().int().min(1).optional(),
  /** A long poll: with nothing held, wait up to this long for a message (at most limits.maxWaitMs). */
  waitMs: z.number().int().min(0).optional(),
});

export const broadcastBody = z.strictObject({
  token: z.string().min(1),
  text: z.string().min(1),
  group: groupNameSchema.optional(),
  idempotencyKey: z.string().min(1).max(200).optional(),
});

export const spawnBody = z.strictObject({
  token: z.string().min(1),
  host: z.string().min(1),
  profile: profileRequestSchema,
  brief: z.string(),
  name: entityNameSchema.optional(),
  groups: groupsSchema.optional(),
  waitMs: z.number().int().min(0).optional(),
  idempotencyKey: z.string().min(1).max(200).optional(),
});

export const stopBody = z.strictObject({
  token: z.string().min(1),
  gid: z.string().uuid(),
  waitMs: z.number().int().min(0).optional(),
});

export const dlqListBody = z.strictObject({ max: z.number().int().min(1).max(10_000).optional() });
export const dlqRequeueBody = z.strictObject({
  msgId: z.string().min(1).optional(),
  /** Also letters refused on arrival (bad-signature, rejected), which are left in the DLQ without it. */
  force: z.boolean().optional(),
});

/** `agentbridge console`: a one-time login URL for the operator of this name (registered if new). */
/** approve|deny WORKER: the owner's answer to a permission request of the worker's agent. */
export const ownerAnswerBody = z.strictObject({
  worker: z.string().min(1).max(300),
  decision: z.enum(['allow', 'deny']),
  request: z.number().int().positive().optional(),
  /** Who answers, as the CLI's user names itself (recorded with the answer). */
  by: z.string().min(1).max(100),
  /**
   * A spawned worker on another host is answered as the entity that spawned it: its token, and
   * how long to wait for the worker's host to answer.
   */
  token: z.string().min(1).max(512).optional(),
  waitMs: z.number().int().min(0).optional(),
});

export const consoleLoginBody = z.strictObject({ name: entityNameSchema.default('operator') });

export const adminReply = z.union([
  z.object({ ok: z.literal(true), result: z.unknown() }),
  z.object({
    ok: z.literal(false),
    error: z.object({ code: z.string(), message: z.string(), retryable: z.boolean().optional() }),
  }),
]);
export type AdminReply = z.infer<typeof adminReply>;

export const adminRoutes = {
  status: '/v1/status',
  messageStatus: '/v1/message-status',
  roster: '/v1/roster',
  register: '/v1/register',
  deregister: '/v1/deregister',
  send: '/v1/send',
  drain: '/v1/drain',
  broadcast: '/v1/broadcast',
  spawn: '/v1/spawn',
  stop: '/v1/stop',
  dlqList: '/v1/dlq/list',
  dlqRequeue: '/v1/dlq/requeue',
  consoleLogin: '/v1/console/login',
  ownerAnswer: '/v1/owner-answer',
} as const;
