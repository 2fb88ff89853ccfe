/**
 * The herdr socket protocol as the pane injector and the herdr launcher use it: pure
 * encode/decode helpers and the zod schemas every inbound line goes through. What a server's
 * `ping` says it can do is read in `herdrFeatures.ts`; lines are cut from the byte stream in
 * `text/lineSplitter.ts`. No sockets here (those live in `herdrRequest.ts` and `herdrStatusWatch.ts`).
 *
 * One JSON object per line; a request is `{id, method, params}`; a reply is `{id, result:{type,…}}`
 * or `{id, error:{code, message}}`; a subscription connection then carries `{event, data}` lines.
 * herdr answers exactly one request per connection and closes it, except `events.subscribe`,
 * whose connection stays open and streams events after the `subscription_started` ack.
 *
 * Read in herdrdev/herdr (formerly ogulcancelik/herdr) at master 1c76079f8b9494ec1c971c80fda34c116ecb89dd
 * (2026-08-22; Cargo.toml says 0.8.2, CHANGELOG "Unreleased" is empty: there is no herdr 0.9):
 * - `src/api/schema.rs` `Method`: every method name below; an unknown method fails to parse as
 *   a whole, and `src/api/server.rs` answers `{id:"", error:{code:"invalid_request"}}`.
 * - `src/api/schema/response.rs` `ResponseResult` (tag `type`, snake_case): `pong {version,
 *   protocol, capabilities?}`, `session_snapshot {snapshot}`, `agent_prompted {agent}`,
 *   `pane_info`, `pane_read`, `subscription_started`, `ok`, ….
 * - `src/api/schema/server.rs` `ServerCapabilities {live_handoff, detached_server_daemon}`: the
 *   only capabilities `ping` reports. There is no capability handshake and no method list, so
 *   what a server can do is read from its `version` (below), and a method it turns out not to
 *   know (`invalid_request`) is dropped from the cached features.
 * - `src/api/schema/agents.rs` `AgentPromptParams {target, text, wait?:{until?, timeout_ms?}}`,
 *   `AgentReadParams {target, source, lines?, format, strip_ansi}`, `AgentInfo {terminal_id,
 *   pane_id, agent_status, agent?, name?, state_change_seq, …}`.
 * - `src/app/api/agents.rs` `handle_agent_prompt`: refuses a blocked agent with `agent_blocked`
 *   before writing anything; otherwise writes the text, answers, and presses Enter
 *   `AGENT_PROMPT_SUBMIT_DELAY` (300 ms) later. `agent_not_found` / `agent_not_ready` (the pane
 *   hosts no recognised agent) are also answered before anything is written.
 * - `src/api/wait.rs` `prompt_agent`: with `wait`, first an observed state change within 5 s
 *   (`agent_prompt_stalled`; `timeout` when `timeout_ms` <= 5000), then one of `until`;
 *   `agent_not_running` when the pane's occupant changed meanwhile (same `terminal_id`, name
 *   and agent label is what herdr calls the same occupant; there is no `agent_instance_id`).
 * - `src/api/subscriptions.rs`: a `pane.agent_status_changed` subscription starts at the event
 *   hub's current sequence (no old events replayed; since 0.6.x at least) and pushes the current
 *   status once only when a status filter matches it; lifecycle subscriptions (`pane.created`,
 *   `pane.agent_detected`, …) start at sequence 0 and do replay up to 512 buffered events.
 * - `src/api/schema/session.rs` `SessionSnapshot {version, protocol, workspaces, tabs, panes,
 *   layouts, agents, focused_*}`; `docs/next/website/src/content/docs/socket-api.mdx`.
 * - By release tag: `pane.read`, `pane.send_input`, `events.subscribe`, `ping {version,
 *   protocol}` in v0.5.9; `agent.read` in v0.6.0; `session.snapshot` in v0.7.2 (199c2760,
 *   protocol 16); `agent.prompt` in v0.7.5 (ef4c23f5, protocol 17); the pause before Enter in
 *   v0.8.0 (346411fa, protocol 19, CHANGELOG #1878); `agent_blocked` in v0.8.2 (9eb52145,
 *   protocol 20, CHANGELOG #2788). Before 0.8.2 `agent.prompt` types into a blocked agent's
 *   dialog, so this code uses it only from 0.8.2 on.
 */
import { z } from 'zod';
import { PaneStatus } from './paneInjector.js';

/** The socket methods the injector and the launcher call. */
export const HerdrMethod = {
  ping: 'ping',
  sessionSnapshot: 'session.snapshot',
  agentPrompt: 'agent.prompt',
  paneGet: 'pane.get',
  paneRead: 'pane.read',
  paneSendInput: 'pane.send_input',
  eventsSubscribe: 'events.subscribe',
  paneList: 'pane.list',
  paneClose: 'pane.close',
  tabCreate: 'tab.create',
  tabRename: 'tab.rename',
  tabList: 'tab.list',
  tabClose: 'tab.close',
} as const;
export type HerdrMethod = (typeof HerdrMethod)[keyof typeof HerdrMethod];

/** Error codes herdr puts in `error.code` that the injector and the launcher treat specially. */
export const HerdrErrorCode = {
  paneNotFound: 'pane_not_found',
  tabNotFound: 'tab_not_found',
  workspaceNotFound: 'workspace_not_found',
  /** `tab.close` of a workspace's last tab, which herdr refuses. */
  tabCloseFailed: 'tab_close_failed',
  /** Also what herdr answers, with an empty id, for a method it does not know. */
  invalidRequest: 'invalid_request',
  timeout: 'timeout',
  /** `agent.prompt`: the agent waits at a dialog; nothing was written. herdr 0.8.2. */
  agentBlocked: 'agent_blocked',
  /** `agent.prompt`: the pane hosts no agent herdr knows; nothing was written. */
  agentNotFound: 'agent_not_found',
  /** `agent.prompt`: the agent is not a ready, known agent; nothing was written. */
  agentNotReady: 'agent_not_ready',
  /** `agent.prompt` with `wait`: typed and Enter pressed, but no state change within 5 s. */
  agentPromptStalled: 'agent_prompt_stalled',
  /** `agent.prompt` with `wait`: the pane's occupant changed after the prompt was written. */
  agentNotRunning: 'agent_not_running',
} as const;

/** Parameterised subscriptions keep their dotted name in the pushed `event` field. */
export const HERDR_AGENT_STATUS_CHANGED = 'pane.agent_status_changed';

/** herdr caps `pane.read` at this many lines. */
export const HERDR_MAX_READ_LINES = 1000;

export type HerdrReadSource = 'visible' | 'recent' | 'recent_unwrapped';

/** `ping` and `session.snapshot` take no params. */
export type EmptyParams = Record<string, never>;

export interface AgentPromptParams {
  /** A live agent's name, or the id of the pane hosting it. */
  readonly target: string;
  readonly text: string;
  /** Wait, in the same request, for the agent to react (`until`), at most `timeout_ms`. */
  readonly wait?: { readonly until?: readonly PaneStatus[]; readonly timeout_ms?: number };
}

export interface PaneGetParams {
  readonly pane_id: string;
}

export interface PaneReadParams {
  readonly pane_id: string;
  readonly source: HerdrReadSource;
  readonly lines?: number;
  readonly format?: 'text' | 'ansi';
  readonly strip_ansi?: boolean;
}

export interface PaneSendInputParams {
  readonly pane_id: string;
  readonly text?: string;
  readonly keys?: readonly string[];
}

export interface AgentStatusSubscription {
  readonly type: typeof HERDR_AGENT_STATUS_CHANGED;
  readonly pane_id: string;
  readonly agent_status?: PaneStatus;
}

export interface EventsSubscribeParams {
  readonly subscriptions: readonly AgentStatusSubscription[];
}

/** `pane.list` and `tab.list`: everything, or one workspace's. */
export interface WorkspaceFilterParams {
  readonly workspace_id?: string;
}

export interface TabCreateParams {
  /** Default: herdr's active workspace. */
  readonly workspace_id?: string;
  readonly cwd?: string;
  /** Default false: the new tab does not take the user's focus. */
  readonly focus?: boolean;
}

export interface TabTargetParams {
  readonly tab_id: string;
}

export interface TabRenameParams {
  readonly tab_id: string;
  readonly label: string;
}

/** Request params by method, so `encodeRequest` cannot pair a method with the wrong params. */
export interface HerdrParams {
  [HerdrMethod.ping]: EmptyParams;
  [HerdrMethod.sessionSnapshot]: EmptyParams;
  [HerdrMethod.agentPrompt]: AgentPromptParams;
  [HerdrMethod.paneGet]: PaneGetParams;
  [HerdrMethod.paneRead]: PaneReadParams;
  [HerdrMethod.paneSendInput]: PaneSendInputParams;
  [HerdrMethod.eventsSubscribe]: EventsSubscribeParams;
  [HerdrMethod.paneList]: WorkspaceFilterParams;
  [HerdrMethod.paneClose]: PaneGetParams;
  [HerdrMethod.tabCreate]: TabCreateParams;
  [HerdrMethod.tabRename]: TabRenameParams;
  [HerdrMethod.tabList]: WorkspaceFilterParams;
  [HerdrMethod.tabClose]: TabTargetParams;
}

/** One request line, newline included. */
export function encodeRequest<M extends HerdrMethod>(id: string, method: M, params: HerdrParams[M]): string {
  return `${JSON.stringify({ id, method, params })}\n`;
}

const paneStatuses: ReadonlySet<string> = new Set(Object.values(PaneStatus));

/**
 * herdr's `agent_status`. A status this code does not know yet reads as `unknown`, which is
 * never ready, so a newer herdr can only make us hold a message, never type into a busy pane.
 */
export const herdrAgentStatusSchema = z
  .string()
  .transform((value): PaneStatus => (paneStatuses.has(value) ? (value as PaneStatus) : PaneStatus.unknown));

// Objects are zod's default (non-strict) objects: unknown fields are accepted and dropped, as
// herdr keeps adding fields (title, display_agent, state_labels, …).
const errorBodySchema = z.object({ code: z.string(), message: z.string().catch('') });
const resultBodySchema = z.looseObject({ type: z.string() });

const responseSchema = z.union([
  z.object({ id: z.string(), error: errorBodySchema }),
  z.object({ id: z.string(), result: resultBodySchema }),
]);

const eventSchema = z.object({ event: z.string(), data: z.looseObject({}) });

const agentStatusChangedDataSchema = z.object({
  pane_id: z.string(),
  workspace_id: z.string().optional(),
  agent_status: herdrAgentStatusSchema,
  agent: z.string().optional(),
});

export type HerdrErrorBody = z.infer<typeof errorBodySchema>;
export type HerdrResultBody = z.infer<typeof resultBodySchema>;

/** What one inbound line turned out to be. */
export type HerdrInbound =
  | { readonly kind: 'result'; readonly id: string; readonly result: HerdrResultBody }
  | { readonly kind: 'error'; readonly id: string; readonly error: HerdrErrorBody }
  | {
      readonly kind: 'statusChanged';
      readonly paneId: string;
      readonly status: PaneStatus;
      readonly agent: string | undefined;
    }
  | { readonly kind: 'otherEvent'; readonly event: string }
  | { readonly kind: 'invalid'; readonly reason: string };

/**
 * Decodes one line from herdr. Never throws: a line that is not JSON or not a known envelope
 * comes back as `invalid` so one bad line cannot take a connection down. A reply's `result`
 * is checked only as far as `{type}` here; `decodeResult` checks it against the method asked.
 */
export function decodeLine(line: string): HerdrInbound {
  let json: unknown;
  try {
    json = JSON.parse(line);
  } catch (err) {
    return { kind: 'invalid', reason: `not JSON: ${err instanceof Error ? err.message : String(err)}` };
  }
  if (typeof json === 'object' && json !== null && 'event' in json) {
    const event = eventSchema.safeParse(json);
    if (!event.success) return { kind: 'invalid', reason: `bad event: ${z.prettifyError(event.error)}` };
    if (event.data.event !== HERDR_AGENT_STATUS_CHANGED)
      return { kind: 'otherEvent', event: event.data.event };
    const data = agentStatusChangedDataSchema.safeParse(event.data.data);
    if (!data.success) {
      return {
        kind: 'invalid',
        reason: `bad ${HERDR_AGENT_STATUS_CHANGED} event: ${z.prettifyError(data.error)}`,
      };
    }
    return {
      kind: 'statusChanged',
      paneId: data.data.pane_id,
      status: data.data.agent_status,
      agent: data.data.agent,
    };
  }
  const response = responseSchema.safeParse(json);
  if (!response.success)
    return { kind: 'invalid', reason: `bad response: ${z.prettifyError(response.error)}` };
  if ('error' in response.data) return { kind: 'error', id: response.data.id, error: response.data.error };
  return { kind: 'result', id: response.data.id, result: response.data.result };
}

const paneInfoSchema = z.object({
  pane_id: z.string(),
  /** The terminal (PTY) in the pane: with the agent label, what herdr calls its occupant. */
  terminal_id: z.string().optional(),
  workspace_id: z.string().optional(),
  agent: z.string().optional(),
  agent_status: herdrAgentStatusSchema,
});

const agentInfoSchema = z.object({
  terminal_id: z.string(),
  pane_id: z.string(),
  agent: z.string().optional(),
  name: z.string().optional(),
  agent_status: herdrAgentStatusSchema,
  state_change_seq: z.number().optional(),
});

/** A pane as `pane.list` reports it: which tab it is in matters there. */
const listedPaneSchema = paneInfoSchema.extend({ tab_id: z.string() });

const tabInfoSchema = z.object({ tab_id: z.string(), workspace_id: z.string(), label: z.string() });

const resultSchemas = {
  [HerdrMethod.ping]: z.object({
    type: z.literal('pong'),
    version: z.string(),
    protocol: z.number(),
    capabilities: z.looseObject({}).nullish(),
  }),
  [HerdrMethod.sessionSnapshot]: z.object({
    type: z.literal('session_snapshot'),
    snapshot: z.object({
      version: z.string(),
      protocol: z.number(),
      panes: z.array(paneInfoSchema),
      agents: z.array(agentInfoSchema),
    }),
  }),
  [HerdrMethod.agentPrompt]: z.object({ type: z.literal('agent_prompted'), agent: agentInfoSchema }),
  [HerdrMethod.paneGet]: z.object({ type: z.literal('pane_info'), pane: paneInfoSchema }),
  [HerdrMethod.paneRead]: z.object({
    type: z.literal('pane_read'),
    read: z.object({ pane_id: z.string(), text: z.string(), truncated: z.boolean().optional() }),
  }),
  [HerdrMethod.paneSendInput]: z.object({ type: z.literal('ok') }),
  [HerdrMethod.eventsSubscribe]: z.object({ type: z.literal('subscription_started') }),
  [HerdrMethod.paneList]: z.object({ type: z.literal('pane_list'), panes: z.array(listedPaneSchema) }),
  [HerdrMethod.paneClose]: z.object({ type: z.literal('ok') }),
  // SOCKET_API.md documents `tab_info`; newer herdr answers `tab_created` with the root pane too.
  [HerdrMethod.tabCreate]: z.object({
    type: z.enum(['tab_info', 'tab_created']),
    tab: tabInfoSchema,
    root_pane: listedPaneSchema.optional(),
  }),
  [HerdrMethod.tabRename]: z.object({ type: z.literal('tab_info'), tab: tabInfoSchema }),
  [HerdrMethod.tabList]: z.object({ type: z.literal('tab_list'), tabs: z.array(tabInfoSchema) }),
  [HerdrMethod.tabClose]: z.object({ type: z.literal('ok') }),
} as const;

/** The parsed success result of each method. */
export type HerdrResults = { [M in HerdrMethod]: z.infer<(typeof resultSchemas)[M]> };

export type DecodedResult<M extends HerdrMethod> =
  | { readonly ok: true; readonly value: HerdrResults[M] }
  | { readonly ok: false; readonly reason: string };

/** Checks a reply's `result` against the shape `method` returns. */
export function decodeResult<M extends HerdrMethod>(method: M, result: HerdrResultBody): DecodedResult<M> {
  const parsed = resultSchemas[method].safeParse(result);
  if (parsed.success) return { ok: true, value: parsed.data as HerdrResults[M] };
  return { ok: false, reason: `unexpected ${method} result: ${z.prettifyError(parsed.error)}` };
}
