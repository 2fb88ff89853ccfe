/**
 * The herdr socket protocol as the pane injector and the herdr launcher use it: pure
 * encode/decode helpers and the zod schemas every inbound line goes through. No sockets here
 * (those live in `herdrRequest.ts` and `herdrInjector.ts`).
 *
 * Shapes follow herdr's SOCKET_API.md and its `src/api/schema` types (ogulcancelik/herdr):
 * one JSON object per line; a request is `{id, method, params}`; a reply is `{id, result:{type,…}}`
 * or `{id, error:{code, message}}`; a subscription connection then carries `{event, data}` lines.
 * herdr answers exactly one request per connection and closes it, except `events.subscribe`,
 * whose connection stays open and streams events after the `subscription_started` ack.
 */
import { z } from 'zod';
import { PaneStatus } from './paneInjector.js';

/** The socket methods the injector and the launcher call. */
export const HerdrMethod = {
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
  invalidRequest: 'invalid_request',
  timeout: 'timeout',
} as const;

/** Parameterised subscriptions keep their dotted name in the pushed `event` field. */
export const HERDR_AGENT_STATUS_CHANGED = 'pane.agent_status_changed';

/** herdr caps `pane.read` at this many lines. */
export const HERDR_MAX_READ_LINES = 1000;

export type HerdrReadSource = 'visible' | 'recent' | 'recent_unwrapped';

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
  workspace_id: z.string().optional(),
  agent: z.string().optional(),
  agent_status: herdrAgentStatusSchema,
});

/** A pane as `pane.list` reports it: which tab it is in matters there. */
const listedPaneSchema = paneInfoSchema.extend({ tab_id: z.string() });

const tabInfoSchema = z.object({ tab_id: z.string(), workspace_id: z.string(), label: z.string() });

const resultSchemas = {
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

/** Splits a byte stream (already decoded to text) into lines. */
export interface LineSplitter {
  /** Adds a chunk; returns the complete lines it finished, without their newline. */
  push(chunk: string): string[];
  /** True when a line longer than the limit was dropped since the last call; resets it. */
  takeOverflow(): boolean;
}

/**
 * A newline splitter with a cap on line length, so a peer that never sends a newline cannot
 * grow our buffer without bound. An over-long line is dropped, up to its newline.
 */
export function createLineSplitter(maxLineChars = 16 * 1024 * 1024): LineSplitter {
  let buffer = '';
  let discarding = false;
  let overflowed = false;
  return {
    push(chunk) {
      const lines: string[] = [];
      let rest = chunk;
      for (;;) {
        const newline = rest.indexOf('\n');
        if (newline === -1) break;
        const piece = rest.slice(0, newline);
        rest = rest.slice(newline + 1);
        if (discarding) {
          discarding = false;
          buffer = '';
          continue;
        }
        const line = (buffer + piece).replace(/\r$/, '');
        buffer = '';
        if (line.length > maxLineChars) {
          overflowed = true;
          continue;
        }
        if (line.trim() !== '') lines.push(line);
      }
      if (!discarding) {
        buffer += rest;
        if (buffer.length > maxLineChars) {
          buffer = '';
          discarding = true;
          overflowed = true;
        }
      }
      return lines;
    },
    takeOverflow() {
      const was = overflowed;
      overflowed = false;
      return was;
    },
  };
}
