import { z } from 'zod';

/**
 * What a gateway and an agent host say to each other (issue 33's native delivery paths). An
 * agent host (`agentbridge agent-host`) runs a coding agent behind the agent's own protocol (ACP,
 * Claude's stream-json, Codex's app-server) in a process of its own, in a terminal pane that mirrors the session, and listens on a
 * unix socket: one request per connection, one JSON line each way. The host outlives the
 * gateway (a gateway restart neither ends the agent nor loses what was handed to it), so what
 * it was handed is asked of it, by marker, after a restart (R-DL5).
 *
 * Here, in the base, because both ends read it: the gateway's injector (panes/) and the host
 * (agents/).
 */

/** The delivery paths a worker can have: typed into a terminal, or handed over a protocol. */
export const DeliveryPath = {
  terminal: 'terminal',
  acp: 'acp',
  /** Claude Code's `--input-format stream-json` (user messages as JSON lines on its stdin). */
  claudeStream: 'claude-stream',
  /** Codex CLI's app-server (JSON-RPC: thread/start, turn/start, turn/steer). */
  codexAppServer: 'codex-app-server',
} as const;
export type DeliveryPath = (typeof DeliveryPath)[keyof typeof DeliveryPath];
/** The paths an agent host serves: an agent's own protocol. */
export type NativePath = Exclude<DeliveryPath, typeof DeliveryPath.terminal>;
export const nativePathSchema = z.enum([
  DeliveryPath.acp,
  DeliveryPath.claudeStream,
  DeliveryPath.codexAppServer,
]);

/** Where a message the host was given is: not given, handed to the agent, or taken by it. */
export const HandoverState = {
  absent: 'absent',
  /** Written to the agent's protocol (ACP `session/prompt` sent); not acknowledged yet. */
  handed: 'handed',
  /** The agent acknowledged the prompt: it started the turn (a session update) or ended it. */
  acknowledged: 'acknowledged',
} as const;
export type HandoverState = (typeof HandoverState)[keyof typeof HandoverState];

/** Whether the agent can take a prompt now. */
export const AgentHostStatus = {
  idle: 'idle',
  /** A turn is running: over ACP a new prompt waits for it to end; Claude's stream takes it into the turn. */
  working: 'working',
  /** The agent asked its owner for a permission; nothing is handed until it is answered. */
  blocked: 'blocked',
  /** The agent process has exited; the host says why. */
  gone: 'gone',
} as const;
export type AgentHostStatus = (typeof AgentHostStatus)[keyof typeof AgentHostStatus];

/**
 * What a message for an agent in a turn does, where the agent can take one mid-turn (Claude's
 * stream, Codex's `turn/steer`): `steer`, handed now into the running turn; `queue`, held until
 * the turn ends and handed as a turn of its own. ACP takes one turn at a time: always `queue`.
 * The gateway's `delivery.busy`, a worker's own (`register --busy`), then the message's.
 */
export const BusyPolicy = { steer: 'steer', queue: 'queue' } as const;
export type BusyPolicy = (typeof BusyPolicy)[keyof typeof BusyPolicy];
export const busyPolicySchema = z.enum([BusyPolicy.steer, BusyPolicy.queue]);

/**
 * Whether a message is handed to the agent now: an idle agent takes it; one in a turn takes it
 * into that turn where it can (`midTurn`) and the message may steer. The one rule, read by the
 * host before it hands a message over and by the gateway before it asks it to.
 */
export function takesMessage(
  status: AgentHostStatus,
  midTurn: boolean,
  busy: BusyPolicy = BusyPolicy.steer,
): boolean {
  return (
    status === AgentHostStatus.idle ||
    (status === AgentHostStatus.working && midTurn && busy === BusyPolicy.steer)
  );
}

/** How a person is told the command that attaches them to an agent's session (Codex's TUI). */
export function attachLine(command: string): string {
  return `to watch and take part: ${command}`;
}

/** Most characters of a permission request's title that a roster, presence or console shows. */
export const maxPermissionTitle = 200;

/** A permission request an agent behind an agent host has open: its number, and the tool call as the agent named it. */
export const openPermissionSchema = z.object({
  request: z.number().int().positive(),
  title: z.string().max(maxPermissionTitle),
});
export type OpenPermission = z.infer<typeof openPermissionSchema>;

/** An owner's answer to an agent's permission request: allow it once, or deny it. */
export const ownerDecisionSchema = z.enum(['allow', 'deny']);
export type OwnerDecision = z.infer<typeof ownerDecisionSchema>;

/** An owner's answer as its agent took it, in words: "helper@b: request 2 allowed once". */
export function answeredText(worker: string, request: number, decision: OwnerDecision): string {
  return `${worker}: request ${request} ${decision === 'allow' ? 'allowed once' : 'denied'}`;
}

/** The longest request or answer line either side reads: a message body is at most 1 MiB. */
export const agentHostMaxLine = 4 * 1024 * 1024;

const marker = z.string().min(1).max(200);

export const agentHostRequestSchema = z.discriminatedUnion('op', [
  /** Who the host is and how its agent is now. */
  z.object({ op: z.literal('hello') }),
  /**
   * Hands a message to the agent if it can take one now (with `busy: queue`, only an agent out
   * of a turn); answers where the message is.
   */
  z.object({
    op: z.literal('deliver'),
    marker,
    text: z.string().max(2 * 1024 * 1024),
    busy: busyPolicySchema.optional(),
  }),
  /** Waits (up to `timeoutMs`) until the message is acknowledged; answers where it is. */
  z.object({ op: z.literal('await'), marker, timeoutMs: z.number().int().min(0).max(600_000) }),
  /** Where the message is, without waiting. */
  z.object({ op: z.literal('locate'), marker }),
  /**
   * The owner's answer to the oldest open permission request (or the one numbered `id`): allow
   * picks the agent's allow-once option, deny its reject-once option (else cancels the request).
   */
  z.object({
    op: z.literal('answer'),
    decision: ownerDecisionSchema,
    id: z.number().int().positive().optional(),
  }),
]);
export type AgentHostRequest = z.infer<typeof agentHostRequestSchema>;

export const agentHostHelloSchema = z.object({
  path: nativePathSchema,
  /** The agent as it named itself (ACP `agentInfo`), else the command. */
  agent: z.string(),
  status: z.enum(['idle', 'working', 'blocked', 'gone']),
  /**
   * Whether the agent takes a message into a running turn (Claude's stream, Codex's steer); with
   * the status, what `takesMessage` decides. A host that does not say takes none.
   */
  midTurn: z.boolean().default(false),
  /** Why it is blocked or gone, in words for the roster and the delivery's hold. */
  detail: z.string().optional(),
  /** The command a person runs to watch the agent's session and take part (Codex's TUI, attached). */
  attach: z.string().max(4096).optional(),
  /**
   * While blocked: the oldest open permission request, the one an answer without a number
   * takes, so that whoever answers knows what they allow; the roster and presence carry it as
   * it is (presence cuts and checks its title).
   */
  permission: openPermissionSchema.optional(),
});
export type AgentHostHello = z.infer<typeof agentHostHelloSchema>;

export const hostHandoverSchema = z.object({
  state: z.enum(['absent', 'handed', 'acknowledged']),
  /** The agent as it named itself, and its path, for what the gateway records of the step. */
  agent: z.string(),
  path: nativePathSchema,
  /** With `deliver` and state absent: why the agent cannot take it now. */
  held: z.object({ status: z.enum(['working', 'blocked', 'gone']), detail: z.string() }).optional(),
});
export type HostHandover = z.infer<typeof hostHandoverSchema>;

/** An answer line: the result of the request, or why it failed. */
export const agentHostAnswerSchema = z.union([
  z.object({ ok: z.literal(true), result: z.unknown() }),
  z.object({ ok: z.literal(false), error: z.string() }),
]);
export type AgentHostAnswer = z.infer<typeof agentHostAnswerSchema>;
