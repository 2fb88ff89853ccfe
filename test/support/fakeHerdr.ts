/**
 * A fake herdr server for tests: speaks herdr's socket protocol on a unix socket in a temp
 * dir, as one of a few real herdr releases does (`version`). Its wire shapes are written out
 * here on purpose rather than taken from `src/panes/herdrProtocol.ts`, so a wrong field name
 * there fails the tests instead of being mirrored by the fake.
 *
 * What it follows, read in herdrdev/herdr at master 1c76079f8b9494ec1c971c80fda34c116ecb89dd
 * (0.8.2) and the release tags named below:
 * - one request per connection, answered and closed; `events.subscribe`, `agent.prompt` with
 *   `wait` are answered when done (`src/api/server.rs`); a method the release does not know
 *   fails to parse: `{id:"", error:{code:"invalid_request"}}`.
 * - `ping` → `pong {version, protocol, capabilities:{live_handoff, detached_server_daemon}}`
 *   (`src/api/schema/response.rs`, `server.rs`); protocol 13 / 16 / 19 / 20 for 0.6.10 / 0.7.4
 *   / 0.8.0 / 0.8.2 (`src/protocol/wire.rs` at each tag).
 * - `session.snapshot` from 0.7.2 (`src/app/api/session.rs`).
 * - `agent.prompt {target, text, wait?}` from 0.7.5 (`src/app/api/agents.rs`, `src/api/wait.rs`):
 *   target is an agent name or the pane id hosting a known agent (`agent_not_found`), launched
 *   (`agent_not_ready`); the text is written, `agent_prompted` answered, and Enter pressed
 *   300 ms later (0.8.0 on); on 0.8.2
 *   a blocked agent is refused with `agent_blocked` before anything is written. With `wait`:
 *   first a state change within min(timeout, 5 s) unless already working (`agent_prompt_stalled`,
 *   or `timeout` when timeout_ms <= 5000), then one of `until` (default idle, done, blocked).
 * - `pane.agent_status_changed` subscriptions replay nothing: the current status is pushed once
 *   only when a status filter matches it (`src/api/subscriptions.rs`); lifecycle subscriptions
 *   (`pane.created`, `pane.closed`, `pane.agent_detected` here) replay the buffered events.
 * - `pane.read` / `agent.read` → `pane_read {read:{pane_id, workspace_id, tab_id, source, format,
 *   text, revision, truncated}}`, 80 lines unless asked, at most 1000 (`src/app/api_helpers.rs`).
 *
 * Its panes model an agent's screen: a transcript, and at the bottom an input line `> …`.
 * Typed text waits in the input line; Enter moves it into the transcript (and, for an agent,
 * starts a turn: status `working`) unless the pane swallows Enter. While the pane is `blocked`
 * a dialog is on screen: typed text is dropped and Enter "confirms the dialog"; both are
 * recorded in `dialogKeys`, so a test can assert that never happened. Workspaces hold labelled
 * tabs, one pane each, for `tab.*` / `pane.list` / `pane.close`. Nothing typed is ever run.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';

export const FakeAgentStatus = {
  idle: 'idle',
  done: 'done',
  working: 'working',
  blocked: 'blocked',
  unknown: 'unknown',
} as const;
export type FakeAgentStatus = (typeof FakeAgentStatus)[keyof typeof FakeAgentStatus];

/** The herdr releases the fake can be. */
export type FakeHerdrVersion = '0.6.10' | '0.7.4' | '0.8.0' | '0.8.2';

interface Release {
  readonly protocol: number;
  readonly sessionSnapshot: boolean;
  readonly agentPrompt: boolean;
  /** `agent.prompt` refuses a blocked agent (`agent_blocked`). */
  readonly refusesBlockedPrompt: boolean;
}

const RELEASES: Record<FakeHerdrVersion, Release> = {
  '0.6.10': { protocol: 13, sessionSnapshot: false, agentPrompt: false, refusesBlockedPrompt: false },
  '0.7.4': { protocol: 16, sessionSnapshot: true, agentPrompt: false, refusesBlockedPrompt: false },
  '0.8.0': { protocol: 19, sessionSnapshot: true, agentPrompt: true, refusesBlockedPrompt: false },
  '0.8.2': { protocol: 20, sessionSnapshot: true, agentPrompt: true, refusesBlockedPrompt: true },
};

/** herdr's AGENT_PROMPT_SUBMIT_DELAY. */
const PROMPT_SUBMIT_DELAY_MS = 300;
/** herdr's AGENT_PROMPT_EFFECT_TIMEOUT_MS. */
const PROMPT_EFFECT_TIMEOUT_MS = 5000;
/** How many lifecycle events herdr's event hub keeps for replay. */
const EVENT_HUB_SIZE = 512;
const DIALOG_LINE = 'Allow this action? Enter to confirm · Esc to cancel';

/** One write into a pane (`pane.send_input` / `send_text` / `send_keys` / `agent.prompt`) as herdr received it. */
export interface FakeHerdrInput {
  readonly method: string;
  readonly text: string | undefined;
  /** For `agent.prompt`: `['Enter']` once herdr pressed it, after its pause. */
  readonly keys: readonly string[];
}

export interface FakeHerdrOptions {
  /** Where to listen; default `herdr.sock` in a fresh temp dir (removed by `close`). */
  readonly socketPath?: string;
  /** The herdr release to be. Default 0.8.2. */
  readonly version?: FakeHerdrVersion;
  /** The active workspace, where `tab.create` without `workspace_id` goes. Default `w0fake0000001`. */
  readonly activeWorkspace?: string;
  /**
   * How `tab.create` answers: `tab_info` (default, as this project's tests first assumed), or
   * `tab_created` with the tab's `root_pane`, which is what every herdr release read answers.
   */
  readonly tabCreateResult?: 'tab_info' | 'tab_created';
}

/** A tab as the fake keeps it. */
export interface FakeHerdrTab {
  readonly tabId: string;
  readonly workspaceId: string;
  readonly label: string;
  /** Its panes' ids. */
  readonly panes: readonly string[];
  /** The `cwd` it was created with, if any. */
  readonly cwd: string | undefined;
}

export interface FakePaneOptions {
  status?: FakeAgentStatus;
  /** The agent herdr detected in the pane; default `claude`. `null`: a plain shell. */
  agent?: string | null;
  /** Other ids requests may use for it, like herdr's positional `1-1`; replies use the id. */
  aliases?: readonly string[];
  /** Whether Enter on a non-empty input starts a turn (status `working`). Default true for an agent. */
  startsTurn?: boolean;
  /** false: the agent is still launching, and `agent.prompt` answers `agent_not_ready`. */
  launched?: boolean;
}

export interface FakeHerdr {
  readonly socketPath: string;
  /** The release it is now. */
  readonly version: FakeHerdrVersion;
  /** Adds a pane (id like `w1-1`; the part before the last `-` is its workspace). */
  addPane(id: string, options?: FakePaneOptions): void;
  /** Removes a pane: later requests for it get `pane_not_found`. */
  removePane(id: string): void;
  /** Every tab, in creation order (a pane added with `addPane` is in tab `<workspace>:1`). */
  tabs(): FakeHerdrTab[];
  /** Sets the agent status; on a change, pushes `pane.agent_status_changed` to subscribers. */
  setStatus(id: string, status: FakeAgentStatus): void;
  status(id: string): FakeAgentStatus;
  /** Another agent now runs in the pane (same terminal): `pane.agent_detected`, then its status. */
  setAgent(id: string, agent: string, status?: FakeAgentStatus): void;
  /** Appends agent output to the pane's transcript. */
  print(id: string, text: string): void;
  /** Types into the input line as a user at the keyboard would (not recorded as an input). */
  userTypes(id: string, text: string): void;
  /**
   * While on, Enter does nothing to the input line (it is still recorded); a number swallows
   * that many Enters and then takes them again.
   */
  setSwallowEnter(id: string, on: boolean | number): void;
  /** The text of every input typed into the pane, in order. */
  typed(id: string): string[];
  /** Every input with its keys, in order. */
  inputs(id: string): FakeHerdrInput[];
  /** Text and keys that reached a dialog while the pane was blocked: a test wants this empty. */
  dialogKeys(id: string): FakeHerdrInput[];
  /** What the input line holds. */
  inputLine(id: string): string;
  /** The transcript: output and submitted input, above the input line. */
  transcript(id: string): string;
  /** The pane's whole screen text, as `pane.read` sees it. */
  screen(id: string): string;
  /** Open `events.subscribe` connections, across all panes. */
  subscriberCount(): number;
  /** Methods received, in order (subscriptions included). */
  methods(): string[];
  /** Writes a raw line to every open subscription connection. */
  sendRaw(line: string): void;
  /**
   * Runs `hook` when a request for `method` arrives, before herdr handles it (to stage a
   * dialog that comes up between a client's check and its write); `undefined` removes it.
   */
  before(method: string, hook: (() => void) | undefined): void;
  /** Writes these raw lines before the answer on every later request connection. */
  setResponsePrefix(lines: readonly string[]): void;
  /**
   * Never answer this method (to test timeouts); `undefined` answers everything again. With
   * `act`, the request still takes effect, only its answer is lost.
   */
  mute(method: string | undefined, options?: { act?: boolean }): void;
  /** herdr goes away: stops listening, drops every connection, removes the socket file. */
  stop(): Promise<void>;
  /** herdr comes back on the same socket path with the same panes, perhaps as another release. */
  restart(options?: { version?: FakeHerdrVersion }): Promise<void>;
  /** Stops and removes the temp dir. */
  close(): Promise<void>;
}

interface FakePane {
  readonly id: string;
  readonly workspaceId: string;
  readonly tabId: string;
  readonly cwd: string;
  readonly terminalId: string;
  agent: string | undefined;
  status: FakeAgentStatus;
  stateChangeSeq: number;
  transcript: string;
  input: string;
  revision: number;
  /** Enters still to swallow; Infinity while swallowing is on. */
  swallowEnter: number;
  startsTurn: boolean;
  launched: boolean;
  readonly inputs: FakeHerdrInput[];
  readonly dialogKeys: FakeHerdrInput[];
}

interface FakeTab {
  readonly id: string;
  readonly workspaceId: string;
  readonly number: number;
  label: string;
  readonly cwd: string | undefined;
}

interface StatusSubscriber {
  readonly socket: Socket;
  readonly paneId: string;
  readonly filter: FakeAgentStatus | undefined;
}

interface LifecycleSubscriber {
  readonly socket: Socket;
  readonly event: string;
}

const statusSchema = z.enum(['idle', 'done', 'working', 'blocked', 'unknown']);
const requestSchema = z.object({
  id: z.string(),
  method: z.string(),
  params: z.record(z.string(), z.unknown()).default({}),
});
const paneTargetSchema = z.object({ pane_id: z.string() });
const tabTargetSchema = z.object({ tab_id: z.string() });
const workspaceFilterSchema = z.object({ workspace_id: z.string().optional() });
const tabCreateSchema = z.object({
  workspace_id: z.string().optional(),
  cwd: z.string().optional(),
  focus: z.boolean().optional(),
});
const tabRenameSchema = z.object({ tab_id: z.string(), label: z.string() });
const readFields = {
  source: z.enum(['visible', 'recent', 'recent_unwrapped']),
  lines: z.number().int().positive().optional(),
  format: z.enum(['text', 'ansi']).optional(),
  strip_ansi: z.boolean().optional(),
};
const paneReadSchema = z.object({ pane_id: z.string(), ...readFields });
const agentReadSchema = z.object({ target: z.string(), ...readFields });
const sendInputSchema = z.object({
  pane_id: z.string(),
  text: z.string().optional(),
  keys: z.array(z.string()).optional(),
});
const sendTextSchema = z.object({ pane_id: z.string(), text: z.string() });
const sendKeysSchema = z.object({ pane_id: z.string(), keys: z.array(z.string()) });
const agentPromptSchema = z.object({
  target: z.string(),
  text: z.string(),
  wait: z
    .object({
      until: z.array(statusSchema).optional(),
      timeout_ms: z.number().int().nonnegative().optional(),
    })
    .optional(),
});
const subscribeSchema = z.object({
  subscriptions: z.array(
    z.looseObject({
      type: z.string(),
      pane_id: z.string().optional(),
      agent_status: statusSchema.optional(),
    }),
  ),
});
const lifecycleSubscriptions = new Set([
  'workspace.created',
  'workspace.closed',
  'workspace.focused',
  'tab.created',
  'tab.closed',
  'tab.focused',
  'tab.renamed',
  'pane.created',
  'pane.closed',
  'pane.focused',
  'pane.exited',
  'pane.agent_detected',
]);

/** Methods every release here knows, besides the ones a release adds. */
const baseMethods = new Set([
  'ping',
  'pane.get',
  'pane.list',
  'pane.close',
  'pane.read',
  'pane.send_input',
  'pane.send_text',
  'pane.send_keys',
  'agent.read',
  'tab.list',
  'tab.create',
  'tab.rename',
  'tab.close',
  'events.subscribe',
]);

type Reply = { result: Record<string, unknown> } | { error: { code: string; message: string } };

class RequestError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

function line(value: unknown): string {
  return `${JSON.stringify(value)}\n`;
}

/** Text as the input line shows it: a prompt glyph, continuation lines indented. */
function promptLines(input: string): string {
  return `> ${input.split('\n').join('\n  ')}`;
}

function endLine(text: string): string {
  return text === '' || text.endsWith('\n') ? text : `${text}\n`;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Starts a fake herdr listening on a fresh socket. Call `close()` when done. */
export async function startFakeHerdr(options: FakeHerdrOptions = {}): Promise<FakeHerdr> {
  const dir = options.socketPath === undefined ? await mkdtemp(join(tmpdir(), 'fake-herdr-')) : undefined;
  const socketPath = options.socketPath ?? join(dir as string, 'herdr.sock');
  let version: FakeHerdrVersion = options.version ?? '0.8.2';
  let release = RELEASES[version];
  const panes = new Map<string, FakePane>();
  const aliases = new Map<string, string>();
  const tabs = new Map<string, FakeTab>();
  const workspaces = new Set<string>();
  const activeWorkspace = options.activeWorkspace ?? 'w0fake0000001';
  workspaces.add(activeWorkspace);
  const statusSubscribers = new Set<StatusSubscriber>();
  const lifecycleSubscribers = new Set<LifecycleSubscriber>();
  const lifecycleEvents: { readonly event: string; readonly line: string }[] = [];
  const connections = new Set<Socket>();
  const methodLog: string[] = [];
  const timers = new Set<NodeJS.Timeout>();
  let terminals = 0;
  let responsePrefix: readonly string[] = [];
  let muted: { method: string; act: boolean } | undefined;
  const hooks = new Map<string, () => void>();
  let server: Server | undefined;

  function pane(id: string): FakePane {
    const found = panes.get(aliases.get(id) ?? id);
    if (found === undefined) throw new RequestError('pane_not_found', 'pane not found');
    return found;
  }

  /** An agent target: the id of a pane hosting a known agent. */
  function agentPane(target: string): FakePane {
    const found = panes.get(aliases.get(target) ?? target);
    if (found === undefined || found.agent === undefined) {
      throw new RequestError('agent_not_found', `agent target ${target} not found`);
    }
    return found;
  }

  function tab(id: string): FakeTab {
    const found = tabs.get(id);
    if (found === undefined) throw new RequestError('tab_not_found', `tab ${id} not found`);
    return found;
  }

  function workspace(id: string): string {
    if (!workspaces.has(id)) throw new RequestError('workspace_not_found', `workspace ${id} not found`);
    return id;
  }

  function panesOf(t: FakeTab): FakePane[] {
    return [...panes.values()].filter((p) => p.tabId === t.id);
  }

  /** Tab `<workspace>:<n>`, with n one more than the workspace's highest. */
  function addTab(workspaceId: string, cwd: string | undefined, number?: number): FakeTab {
    workspaces.add(workspaceId);
    const numbers = [...tabs.values()].filter((t) => t.workspaceId === workspaceId).map((t) => t.number);
    const n = number ?? Math.max(0, ...numbers) + 1;
    const created: FakeTab = { id: `${workspaceId}:${n}`, workspaceId, number: n, label: String(n), cwd };
    tabs.set(created.id, created);
    return created;
  }

  /** Pane `<workspace>-<n>`, with n one more than the workspace's highest. */
  function nextPaneId(workspaceId: string): string {
    const numbers = [...panes.values()]
      .filter((p) => p.workspaceId === workspaceId)
      .map((p) => Number(p.id.slice(p.id.lastIndexOf('-') + 1)))
      .filter(Number.isInteger);
    return `${workspaceId}-${Math.max(0, ...numbers) + 1}`;
  }

  function newPane(id: string, workspaceId: string, tabId: string, cwd: string, agent: string | undefined) {
    const created: FakePane = {
      id,
      workspaceId,
      tabId,
      cwd,
      terminalId: `term_${++terminals}`,
      agent,
      status: FakeAgentStatus.idle,
      stateChangeSeq: 0,
      transcript: '',
      input: '',
      revision: 0,
      swallowEnter: 0,
      launched: true,
      startsTurn: agent !== undefined,
      inputs: [],
      dialogKeys: [],
    };
    panes.set(id, created);
    publish('pane.created', { type: 'pane_created', pane: paneInfo(created) });
    if (agent !== undefined) agentDetected(created);
    return created;
  }

  function tabInfo(t: FakeTab): Record<string, unknown> {
    return {
      tab_id: t.id,
      workspace_id: t.workspaceId,
      number: t.number,
      label: t.label,
      focused: false,
      pane_count: panesOf(t).length,
      agent_status: 'unknown',
    };
  }

  function removeTab(t: FakeTab): void {
    for (const p of panesOf(t)) removePane(p.id);
    tabs.delete(t.id);
  }

  function removePane(id: string): void {
    const p = panes.get(id);
    if (p === undefined) return;
    panes.delete(id);
    for (const [alias, target] of aliases) if (target === id) aliases.delete(alias);
    publish('pane.closed', { type: 'pane_closed', pane_id: p.id, workspace_id: p.workspaceId });
  }

  function paneInfo(p: FakePane): Record<string, unknown> {
    return {
      pane_id: p.id,
      terminal_id: p.terminalId,
      workspace_id: p.workspaceId,
      tab_id: p.tabId,
      focused: false,
      cwd: p.cwd,
      ...(p.agent === undefined ? {} : { agent: p.agent }),
      agent_status: p.status,
      revision: p.revision,
    };
  }

  function agentInfo(p: FakePane): Record<string, unknown> {
    return {
      terminal_id: p.terminalId,
      ...(p.agent === undefined ? {} : { agent: p.agent }),
      agent_status: p.status,
      workspace_id: p.workspaceId,
      tab_id: p.tabId,
      pane_id: p.id,
      focused: false,
      state_change_seq: p.stateChangeSeq,
      revision: p.revision,
    };
  }

  /** A lifecycle event: kept for replay, as herdr's event hub does, and sent to subscribers. */
  function publish(event: string, data: Record<string, unknown>): void {
    // herdr's EventKind is snake_case on the wire; only subscription events keep the dotted name.
    const encoded = line({ event: event.replace('.', '_'), data });
    lifecycleEvents.push({ event, line: encoded });
    if (lifecycleEvents.length > EVENT_HUB_SIZE) lifecycleEvents.shift();
    for (const sub of lifecycleSubscribers) if (sub.event === event) sub.socket.write(encoded);
  }

  function agentDetected(p: FakePane): void {
    publish('pane.agent_detected', {
      type: 'pane_agent_detected',
      pane_id: p.id,
      workspace_id: p.workspaceId,
      ...(p.agent === undefined ? {} : { agent: p.agent }),
    });
  }

  function statusEvent(p: FakePane): string {
    return line({
      event: 'pane.agent_status_changed',
      data: {
        pane_id: p.id,
        workspace_id: p.workspaceId,
        agent_status: p.status,
        ...(p.agent === undefined ? {} : { agent: p.agent }),
      },
    });
  }

  function setStatus(p: FakePane, status: FakeAgentStatus): void {
    if (p.status === status) return;
    p.status = status;
    p.stateChangeSeq++;
    const event = statusEvent(p);
    for (const sub of statusSubscribers) {
      if (sub.paneId !== p.id || (sub.filter !== undefined && sub.filter !== status)) continue;
      sub.socket.write(event);
    }
  }

  /** The screen: transcript, the dialog while blocked, and the input line at the bottom. */
  function render(p: FakePane): string {
    const dialog = p.status === FakeAgentStatus.blocked ? `${DIALOG_LINE}\n` : '';
    return `${endLine(p.transcript)}${dialog}${promptLines(p.input)}`;
  }

  function parse<T>(schema: z.ZodType<T>, params: unknown): T {
    const parsed = schema.safeParse(params);
    if (!parsed.success)
      throw new RequestError('invalid_request', `invalid params: ${z.prettifyError(parsed.error)}`);
    return parsed.data;
  }

  /** Text and keys reaching the pane's terminal. */
  function keyboard(p: FakePane, text: string | undefined, keys: readonly string[], record: FakeHerdrInput) {
    if (p.status === FakeAgentStatus.blocked) {
      if (text !== undefined || keys.length > 0) p.dialogKeys.push(record);
      return;
    }
    if (text !== undefined && text !== '') {
      p.input += text;
      p.revision++;
    }
    for (const key of keys) {
      if (key.toLowerCase() !== 'enter') continue;
      if (p.swallowEnter > 0) {
        p.swallowEnter--;
        continue;
      }
      if (p.input === '') continue;
      // The agent echoes the submitted input into its transcript, as agent TUIs do.
      p.transcript = `${endLine(p.transcript)}${promptLines(p.input)}\n`;
      p.input = '';
      p.revision++;
      if (p.startsTurn) setStatus(p, FakeAgentStatus.working);
    }
  }

  function typeInto(p: FakePane, method: string, text: string | undefined, keys: readonly string[]): void {
    const record: FakeHerdrInput = { method, text, keys };
    p.inputs.push(record);
    keyboard(p, text, keys, record);
  }

  function readResult(
    p: FakePane,
    read: { source: string; lines?: number | undefined; format?: string | undefined },
  ) {
    const lines = render(p).split('\n');
    const count = Math.min(read.lines ?? 80, 1000);
    return {
      result: {
        type: 'pane_read',
        read: {
          pane_id: p.id,
          workspace_id: p.workspaceId,
          tab_id: p.tabId,
          source: read.source,
          format: read.format ?? 'text',
          text: lines.slice(-count).join('\n'),
          revision: p.revision,
          truncated: lines.length > count,
        },
      },
    };
  }

  function knows(method: string): boolean {
    if (baseMethods.has(method)) return true;
    if (method === 'session.snapshot') return release.sessionSnapshot;
    if (method === 'agent.prompt') return release.agentPrompt;
    return false;
  }

  function later(ms: number, fn: () => void): void {
    const timer = setTimeout(() => {
      timers.delete(timer);
      fn();
    }, ms);
    timers.add(timer);
  }

  async function until(check: () => boolean, ms: number): Promise<boolean> {
    const deadline = Date.now() + ms;
    for (;;) {
      if (check()) return true;
      if (Date.now() >= deadline) return false;
      await sleep(10);
    }
  }

  async function prompt(params: Record<string, unknown>): Promise<Reply> {
    const request = parse(agentPromptSchema, params);
    if (request.text === '') throw new RequestError('empty_agent_prompt', 'agent prompt must not be empty');
    const p = agentPane(request.target);
    if (release.refusesBlockedPrompt && p.status === FakeAgentStatus.blocked) {
      throw new RequestError(
        'agent_blocked',
        `agent ${request.target} is blocked and requires interactive input`,
      );
    }
    if (!p.launched)
      throw new RequestError('agent_not_ready', `agent ${request.target} is not an active named agent`);
    const baseline = p.stateChangeSeq;
    const record = { method: 'agent.prompt', text: request.text, keys: [] as string[] };
    p.inputs.push(record);
    keyboard(p, request.text, [], record);
    later(PROMPT_SUBMIT_DELAY_MS, () => {
      if (!panes.has(p.id)) return;
      record.keys = ['Enter'];
      keyboard(p, undefined, ['Enter'], record);
    });
    if (request.wait === undefined) return { result: { type: 'agent_prompted', agent: agentInfo(p) } };

    const started = Date.now();
    const timeout = request.wait.timeout_ms;
    const occupant = { terminalId: p.terminalId, agent: p.agent };
    const stillThere = () => panes.get(p.id) === p && p.agent === occupant.agent;
    if (p.status !== FakeAgentStatus.working) {
      const effect = Math.min(timeout ?? PROMPT_EFFECT_TIMEOUT_MS, PROMPT_EFFECT_TIMEOUT_MS);
      const changed = await until(() => !stillThere() || p.stateChangeSeq > baseline, effect);
      if (!stillThere())
        throw new RequestError('agent_not_running', 'agent is no longer running in the target pane');
      if (!changed) {
        if (timeout !== undefined && timeout <= PROMPT_EFFECT_TIMEOUT_MS) {
          throw new RequestError('timeout', 'timed out waiting for agent status');
        }
        throw new RequestError(
          'agent_prompt_stalled',
          `agent prompt produced no observed state change within ${effect} ms; status is ${p.status} and state_change_seq remained ${baseline}`,
        );
      }
    }
    const wanted: readonly FakeAgentStatus[] =
      request.wait.until === undefined || request.wait.until.length === 0
        ? ['idle', 'done', 'blocked']
        : request.wait.until;
    const remaining = timeout === undefined ? Number.POSITIVE_INFINITY : timeout - (Date.now() - started);
    const matched = await until(() => !stillThere() || wanted.includes(p.status), Math.max(0, remaining));
    if (!stillThere())
      throw new RequestError('agent_not_running', 'agent is no longer running in the target pane');
    if (!matched) throw new RequestError('timeout', 'timed out waiting for agent status');
    return { result: { type: 'agent_prompted', agent: agentInfo(p) } };
  }

  function handle(method: string, params: Record<string, unknown>): Reply | Promise<Reply> {
    if (!knows(method)) {
      // herdr's request enum has no such variant, so the whole request fails to parse.
      throw new RequestError('invalid_request', `invalid request: unknown variant \`${method}\``);
    }
    switch (method) {
      case 'ping':
        return {
          result: {
            type: 'pong',
            version,
            protocol: release.protocol,
            capabilities: { live_handoff: true, detached_server_daemon: true },
          },
        };
      case 'session.snapshot':
        return {
          result: {
            type: 'session_snapshot',
            snapshot: {
              version,
              protocol: release.protocol,
              focused_workspace_id: activeWorkspace,
              workspaces: [...workspaces].map((id) => ({ workspace_id: id, label: id })),
              tabs: [...tabs.values()].map(tabInfo),
              panes: [...panes.values()].map(paneInfo),
              layouts: [],
              agents: [...panes.values()].filter((p) => p.agent !== undefined).map(agentInfo),
            },
          },
        };
      case 'agent.prompt':
        return prompt(params);
      case 'pane.get':
        return {
          result: { type: 'pane_info', pane: paneInfo(pane(parse(paneTargetSchema, params).pane_id)) },
        };
      case 'pane.list': {
        const filter = parse(workspaceFilterSchema, params).workspace_id;
        if (filter !== undefined) workspace(filter);
        const listed = [...panes.values()].filter((p) => filter === undefined || p.workspaceId === filter);
        return { result: { type: 'pane_list', panes: listed.map(paneInfo) } };
      }
      case 'pane.close': {
        const p = pane(parse(paneTargetSchema, params).pane_id);
        removePane(p.id);
        // herdr closes a tab with its last pane.
        const t = tabs.get(p.tabId);
        if (t !== undefined && panesOf(t).length === 0) tabs.delete(t.id);
        return { result: { type: 'ok' } };
      }
      case 'tab.list': {
        const filter = parse(workspaceFilterSchema, params).workspace_id;
        if (filter !== undefined) workspace(filter);
        const listed = [...tabs.values()].filter((t) => filter === undefined || t.workspaceId === filter);
        return { result: { type: 'tab_list', tabs: listed.map(tabInfo) } };
      }
      case 'tab.create': {
        const create = parse(tabCreateSchema, params);
        const workspaceId = workspace(create.workspace_id ?? activeWorkspace);
        const created = addTab(workspaceId, create.cwd);
        const root = newPane(nextPaneId(workspaceId), workspaceId, created.id, create.cwd ?? '/', undefined);
        if (options.tabCreateResult === 'tab_created') {
          return { result: { type: 'tab_created', tab: tabInfo(created), root_pane: paneInfo(root) } };
        }
        return { result: { type: 'tab_info', tab: tabInfo(created) } };
      }
      case 'tab.rename': {
        const rename = parse(tabRenameSchema, params);
        const t = tab(rename.tab_id);
        t.label = rename.label;
        return { result: { type: 'tab_info', tab: tabInfo(t) } };
      }
      case 'tab.close': {
        const t = tab(parse(tabTargetSchema, params).tab_id);
        if ([...tabs.values()].filter((other) => other.workspaceId === t.workspaceId).length <= 1) {
          throw new RequestError('tab_close_failed', 'cannot close the last tab in a workspace');
        }
        removeTab(t);
        return { result: { type: 'ok' } };
      }
      case 'pane.read': {
        const read = parse(paneReadSchema, params);
        return readResult(pane(read.pane_id), read);
      }
      case 'agent.read': {
        const read = parse(agentReadSchema, params);
        return readResult(agentPane(read.target), read);
      }
      case 'pane.send_input': {
        const input = parse(sendInputSchema, params);
        typeInto(pane(input.pane_id), method, input.text, input.keys ?? []);
        return { result: { type: 'ok' } };
      }
      case 'pane.send_text': {
        const input = parse(sendTextSchema, params);
        typeInto(pane(input.pane_id), method, input.text, []);
        return { result: { type: 'ok' } };
      }
      case 'pane.send_keys': {
        const input = parse(sendKeysSchema, params);
        typeInto(pane(input.pane_id), method, undefined, input.keys);
        return { result: { type: 'ok' } };
      }
      default:
        throw new RequestError('invalid_request', `invalid request: unknown variant \`${method}\``);
    }
  }

  function subscribe(socket: Socket, id: string, params: Record<string, unknown>): void {
    const addedStatus: StatusSubscriber[] = [];
    const addedLifecycle: LifecycleSubscriber[] = [];
    const initial: string[] = [];
    for (const sub of parse(subscribeSchema, params).subscriptions) {
      if (sub.type === 'pane.agent_status_changed') {
        if (sub.pane_id === undefined)
          throw new RequestError('invalid_request', 'invalid request: missing field `pane_id`');
        // herdr probes the pane with pane.get before acknowledging.
        const p = pane(sub.pane_id);
        addedStatus.push({ socket, paneId: p.id, filter: sub.agent_status });
        if (sub.agent_status !== undefined && sub.agent_status === p.status) initial.push(statusEvent(p));
      } else if (lifecycleSubscriptions.has(sub.type)) {
        addedLifecycle.push({ socket, event: sub.type });
        // Lifecycle subscriptions start at the hub's first buffered event: old ones are replayed.
        for (const past of lifecycleEvents) if (past.event === sub.type) initial.push(past.line);
      } else if (sub.type !== 'pane.output_matched') {
        throw new RequestError('invalid_request', `invalid request: unknown variant \`${sub.type}\``);
      }
    }
    for (const sub of addedStatus) statusSubscribers.add(sub);
    for (const sub of addedLifecycle) lifecycleSubscribers.add(sub);
    socket.on('close', () => {
      for (const sub of addedStatus) statusSubscribers.delete(sub);
      for (const sub of addedLifecycle) lifecycleSubscribers.delete(sub);
    });
    socket.write(line({ id, result: { type: 'subscription_started' } }));
    for (const event of initial) socket.write(event);
  }

  async function answer(socket: Socket, id: string, method: string, params: Record<string, unknown>) {
    const mutedNow = muted?.method === method ? muted : undefined;
    if (mutedNow !== undefined && !mutedNow.act) return;
    for (const prefix of responsePrefix) socket.write(`${prefix}\n`);
    let reply: Reply;
    try {
      if (method === 'events.subscribe' && knows(method)) {
        subscribe(socket, id, params);
        return;
      }
      reply = await handle(method, params);
    } catch (err) {
      if (!(err instanceof RequestError)) throw err;
      // herdr reports requests it cannot parse (unknown method, bad params) with an empty id.
      const replyId = err.code === 'invalid_request' ? '' : id;
      reply = { error: { code: err.code, message: err.message } };
      if (mutedNow === undefined && !socket.destroyed) socket.end(line({ id: replyId, ...reply }));
      return;
    }
    if (mutedNow === undefined && !socket.destroyed) socket.end(line({ id, ...reply }));
  }

  function onConnection(socket: Socket): void {
    connections.add(socket);
    socket.on('close', () => connections.delete(socket));
    socket.on('error', () => socket.destroy());
    socket.setEncoding('utf8');
    let buffer = '';
    let handled = false;
    socket.on('data', (chunk: string) => {
      if (handled) return; // herdr reads only the first line of a connection
      buffer += chunk;
      const newline = buffer.indexOf('\n');
      if (newline === -1) return;
      handled = true;
      const raw = buffer.slice(0, newline).trim();
      let json: unknown;
      try {
        json = JSON.parse(raw);
      } catch {
        socket.end(
          line({ id: '', error: { code: 'invalid_request', message: 'invalid request: not JSON' } }),
        );
        return;
      }
      const request = requestSchema.safeParse(json);
      if (!request.success) {
        socket.end(line({ id: '', error: { code: 'invalid_request', message: 'invalid request' } }));
        return;
      }
      const { id, method, params } = request.data;
      methodLog.push(method);
      hooks.get(method)?.();
      void answer(socket, id, method, params);
    });
  }

  async function listen(): Promise<void> {
    const next = createServer(onConnection);
    await new Promise<void>((resolve, reject) => {
      next.once('error', reject);
      next.listen(socketPath, () => {
        next.off('error', reject);
        resolve();
      });
    });
    server = next;
  }

  async function stop(): Promise<void> {
    const current = server;
    server = undefined;
    for (const socket of connections) socket.destroy();
    statusSubscribers.clear();
    lifecycleSubscribers.clear();
    if (current !== undefined) await new Promise<void>((resolve) => current.close(() => resolve()));
    await rm(socketPath, { force: true });
  }

  await listen();

  return {
    socketPath,
    get version() {
      return version;
    },
    addPane(id, paneOptions = {}) {
      const dash = id.lastIndexOf('-');
      const workspaceId = dash > 0 ? id.slice(0, dash) : id;
      const tabId = `${workspaceId}:1`;
      if (!tabs.has(tabId)) addTab(workspaceId, undefined, 1);
      const agent = paneOptions.agent === null ? undefined : (paneOptions.agent ?? 'claude');
      const added = newPane(id, workspaceId, tabId, '/tmp', agent);
      added.status = paneOptions.status ?? FakeAgentStatus.idle;
      if (paneOptions.startsTurn !== undefined) added.startsTurn = paneOptions.startsTurn;
      if (paneOptions.launched !== undefined) added.launched = paneOptions.launched;
      for (const alias of paneOptions.aliases ?? []) aliases.set(alias, id);
    },
    removePane,
    tabs: () =>
      [...tabs.values()].map((t) => ({
        tabId: t.id,
        workspaceId: t.workspaceId,
        label: t.label,
        panes: panesOf(t).map((p) => p.id),
        cwd: t.cwd,
      })),
    setStatus(id, status) {
      setStatus(pane(id), status);
    },
    status: (id) => pane(id).status,
    setAgent(id, agent, status) {
      const p = pane(id);
      p.agent = agent;
      p.startsTurn = true;
      agentDetected(p);
      // A fresh agent announces its status even when it equals the last one's.
      const next = status ?? FakeAgentStatus.idle;
      if (p.status === next) {
        p.stateChangeSeq++;
        for (const sub of statusSubscribers) if (sub.paneId === p.id) sub.socket.write(statusEvent(p));
      } else {
        setStatus(p, next);
      }
    },
    print(id, text) {
      const p = pane(id);
      p.transcript += text;
      p.revision++;
    },
    userTypes(id, text) {
      const p = pane(id);
      p.input += text;
      p.revision++;
    },
    setSwallowEnter(id, on) {
      pane(id).swallowEnter = on === true ? Number.POSITIVE_INFINITY : on === false ? 0 : on;
    },
    typed: (id) => pane(id).inputs.flatMap((input) => (input.text === undefined ? [] : [input.text])),
    inputs: (id) => pane(id).inputs.map((input) => ({ ...input, keys: [...input.keys] })),
    dialogKeys: (id) => [...pane(id).dialogKeys],
    inputLine: (id) => pane(id).input,
    transcript: (id) => pane(id).transcript,
    screen: (id) => render(pane(id)),
    subscriberCount: () =>
      new Set([...statusSubscribers, ...lifecycleSubscribers].map((sub) => sub.socket)).size,
    methods: () => [...methodLog],
    sendRaw(raw) {
      for (const socket of new Set([...statusSubscribers].map((sub) => sub.socket))) socket.write(`${raw}\n`);
    },
    before(method, hook) {
      if (hook === undefined) hooks.delete(method);
      else hooks.set(method, hook);
    },
    setResponsePrefix(lines) {
      responsePrefix = [...lines];
    },
    mute(method, muteOptions = {}) {
      muted = method === undefined ? undefined : { method, act: muteOptions.act ?? false };
    },
    stop,
    async restart(restartOptions = {}) {
      if (server !== undefined) return;
      if (restartOptions.version !== undefined) {
        version = restartOptions.version;
        release = RELEASES[version];
      }
      await listen();
    },
    async close() {
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      await stop();
      if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    },
  };
}
