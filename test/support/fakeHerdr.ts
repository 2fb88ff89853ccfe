/**
 * A fake herdr server for tests: speaks herdr's socket protocol (SOCKET_API.md in
 * ogulcancelik/herdr) on a unix socket in a temp dir. It keeps panes with an input log, a
 * settable agent status that is pushed to `pane.agent_status_changed` subscribers, and a
 * screen that echoes typed input for `pane.read`; and workspaces of labelled tabs, one pane
 * each, for `tab.create` / `tab.rename` / `tab.list` / `tab.close` / `pane.list` / `pane.close`.
 * Nothing typed is ever run.
 *
 * Like herdr it answers one request per connection and then closes it; only `events.subscribe`
 * keeps its connection open. Its wire shapes are written out here on purpose rather than taken
 * from `src/inject/herdrProtocol.ts`, so a wrong field name there fails the tests instead of
 * being mirrored by the fake.
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

/** One `pane.send_input` / `send_text` / `send_keys` as herdr received it. */
export interface FakeHerdrInput {
  readonly method: string;
  readonly text: string | undefined;
  readonly keys: readonly string[];
}

export interface FakeHerdrOptions {
  /** Where to listen; default `herdr.sock` in a fresh temp dir (removed by `close`). */
  readonly socketPath?: string;
  /** The active workspace, where `tab.create` without `workspace_id` goes. Default `w0fake0000001`. */
  readonly activeWorkspace?: string;
  /**
   * How `tab.create` answers: `tab_info` as SOCKET_API.md documents (default), or newer herdr's
   * `tab_created`, which also carries the tab's `root_pane`.
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

export interface FakeHerdr {
  readonly socketPath: string;
  /**
   * Adds a pane (id like `w1-1`; the part before the last `-` is its workspace). `aliases` are
   * other ids requests may use for it, like herdr's positional `1-1`; replies use `id`.
   */
  addPane(
    id: string,
    options?: { status?: FakeAgentStatus; agent?: string; aliases?: readonly string[] },
  ): void;
  /** Removes a pane: later requests for it get `pane_not_found`. */
  removePane(id: string): void;
  /** Every tab, in creation order (a pane added with `addPane` is in tab `<workspace>:1`). */
  tabs(): FakeHerdrTab[];
  /** Sets the agent status; on a change, pushes `pane.agent_status_changed` to subscribers. */
  setStatus(id: string, status: FakeAgentStatus): void;
  status(id: string): FakeAgentStatus;
  /** Appends agent output to the pane's screen. */
  print(id: string, text: string): void;
  /** The text of every input typed into the pane, in order. */
  typed(id: string): string[];
  /** Every input with its keys, in order. */
  inputs(id: string): FakeHerdrInput[];
  /** The pane's whole screen text. */
  screen(id: string): string;
  /** Open `events.subscribe` connections, across all panes. */
  subscriberCount(): number;
  /** Methods received, in order (subscriptions included). */
  methods(): string[];
  /** Writes a raw line to every open subscription connection. */
  sendRaw(line: string): void;
  /** Writes these raw lines before the answer on every later request connection. */
  setResponsePrefix(lines: readonly string[]): void;
  /** Never answer this method (to test timeouts); `undefined` answers everything again. */
  mute(method: string | undefined): void;
  /** herdr goes away: stops listening, drops every connection, removes the socket file. */
  stop(): Promise<void>;
  /** herdr comes back on the same socket path with the same panes. */
  restart(): Promise<void>;
  /** Stops and removes the temp dir. */
  close(): Promise<void>;
}

interface FakePane {
  readonly id: string;
  readonly workspaceId: string;
  readonly tabId: string;
  readonly cwd: string;
  readonly agent: string | undefined;
  status: FakeAgentStatus;
  screen: string;
  revision: number;
  readonly inputs: FakeHerdrInput[];
}

interface FakeTab {
  readonly id: string;
  readonly workspaceId: string;
  readonly number: number;
  label: string;
  readonly cwd: string | undefined;
}

interface Subscriber {
  readonly socket: Socket;
  readonly paneId: string;
  readonly filter: FakeAgentStatus | undefined;
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
const readSchema = z.object({
  pane_id: z.string(),
  source: z.enum(['visible', 'recent', 'recent_unwrapped']),
  lines: z.number().int().positive().optional(),
  format: z.enum(['text', 'ansi']).optional(),
  strip_ansi: z.boolean().optional(),
});
const sendInputSchema = z.object({
  pane_id: z.string(),
  text: z.string().optional(),
  keys: z.array(z.string()).optional(),
});
const sendTextSchema = z.object({ pane_id: z.string(), text: z.string() });
const sendKeysSchema = z.object({ pane_id: z.string(), keys: z.array(z.string()) });
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

/** Starts a fake herdr listening on a fresh socket. Call `close()` when done. */
export async function startFakeHerdr(options: FakeHerdrOptions = {}): Promise<FakeHerdr> {
  const dir = options.socketPath === undefined ? await mkdtemp(join(tmpdir(), 'fake-herdr-')) : undefined;
  const socketPath = options.socketPath ?? join(dir as string, 'herdr.sock');
  const panes = new Map<string, FakePane>();
  const aliases = new Map<string, string>();
  const tabs = new Map<string, FakeTab>();
  const workspaces = new Set<string>();
  const activeWorkspace = options.activeWorkspace ?? 'w0fake0000001';
  workspaces.add(activeWorkspace);
  const subscribers = new Set<Subscriber>();
  const connections = new Set<Socket>();
  const methodLog: string[] = [];
  let responsePrefix: readonly string[] = [];
  let muted: string | undefined;
  let server: Server | undefined;

  function pane(id: string): FakePane {
    const found = panes.get(aliases.get(id) ?? id);
    if (found === undefined) throw new RequestError('pane_not_found', `pane ${id} not found`);
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
      agent,
      status: FakeAgentStatus.idle,
      screen: '',
      revision: 0,
      inputs: [],
    };
    panes.set(id, created);
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
    panes.delete(id);
    for (const [alias, target] of aliases) if (target === id) aliases.delete(alias);
  }

  function paneInfo(p: FakePane): Record<string, unknown> {
    return {
      pane_id: p.id,
      workspace_id: p.workspaceId,
      tab_id: p.tabId,
      focused: false,
      cwd: p.cwd,
      ...(p.agent === undefined ? {} : { agent: p.agent }),
      agent_status: p.status,
      revision: p.revision,
    };
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

  function write(p: FakePane, text: string): void {
    p.screen += text;
    p.revision++;
  }

  function parse<T>(schema: z.ZodType<T>, params: unknown): T {
    const parsed = schema.safeParse(params);
    if (!parsed.success)
      throw new RequestError('invalid_request', `invalid params: ${z.prettifyError(parsed.error)}`);
    return parsed.data;
  }

  function typeInto(p: FakePane, method: string, text: string | undefined, keys: readonly string[]): void {
    p.inputs.push({ method, text, keys });
    if (text !== undefined) write(p, text);
    for (const key of keys) if (key === 'Enter') write(p, '\n');
  }

  function handle(method: string, params: Record<string, unknown>): Reply {
    switch (method) {
      case 'ping':
        return { result: { type: 'pong', version: '0.0.0-fake', protocol: 2 } };
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
        const read = parse(readSchema, params);
        const p = pane(read.pane_id);
        const lines = p.screen.split('\n');
        const count = Math.min(read.lines ?? 80, 1000);
        const text = lines.slice(-count).join('\n');
        return {
          result: {
            type: 'pane_read',
            read: {
              pane_id: p.id,
              workspace_id: p.workspaceId,
              tab_id: p.tabId,
              source: read.source,
              format: read.format ?? 'text',
              text,
              revision: p.revision,
              truncated: lines.length > count,
            },
          },
        };
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
        // herdr's request enum has no such variant, so the whole request fails to parse.
        throw new RequestError('invalid_request', `invalid request: unknown method ${method}`);
    }
  }

  function subscribe(socket: Socket, id: string, params: Record<string, unknown>): void {
    const added: Subscriber[] = [];
    const initial: string[] = [];
    for (const sub of parse(subscribeSchema, params).subscriptions) {
      if (sub.type === 'pane.agent_status_changed') {
        if (sub.pane_id === undefined)
          throw new RequestError('invalid_request', 'invalid request: missing pane_id');
        // herdr probes the pane with pane.get before acknowledging.
        const p = pane(sub.pane_id);
        added.push({ socket, paneId: p.id, filter: sub.agent_status });
        if (sub.agent_status !== undefined && sub.agent_status === p.status) initial.push(statusEvent(p));
      } else if (!lifecycleSubscriptions.has(sub.type) && sub.type !== 'pane.output_matched') {
        throw new RequestError('invalid_request', `invalid request: unknown subscription ${sub.type}`);
      }
    }
    for (const sub of added) subscribers.add(sub);
    socket.on('close', () => {
      for (const sub of added) subscribers.delete(sub);
    });
    socket.write(line({ id, result: { type: 'subscription_started' } }));
    for (const event of initial) socket.write(event);
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
      if (method === muted) return;
      for (const prefix of responsePrefix) socket.write(`${prefix}\n`);
      try {
        if (method === 'events.subscribe') {
          subscribe(socket, id, params);
          return;
        }
        socket.end(line({ id, ...handle(method, params) }));
      } catch (err) {
        if (!(err instanceof RequestError)) throw err;
        // herdr reports unparseable requests with an empty id.
        const replyId = err.code === 'invalid_request' ? '' : id;
        socket.end(line({ id: replyId, error: { code: err.code, message: err.message } }));
      }
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
    subscribers.clear();
    if (current !== undefined) await new Promise<void>((resolve) => current.close(() => resolve()));
    await rm(socketPath, { force: true });
  }

  await listen();

  return {
    socketPath,
    addPane(id, paneOptions = {}) {
      const dash = id.lastIndexOf('-');
      const workspaceId = dash > 0 ? id.slice(0, dash) : id;
      const tabId = `${workspaceId}:1`;
      if (!tabs.has(tabId)) addTab(workspaceId, undefined, 1);
      const added = newPane(id, workspaceId, tabId, '/tmp', paneOptions.agent ?? 'claude');
      added.status = paneOptions.status ?? FakeAgentStatus.idle;
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
      const p = pane(id);
      if (p.status === status) return;
      p.status = status;
      const event = statusEvent(p);
      for (const sub of subscribers) {
        if (sub.paneId !== id || (sub.filter !== undefined && sub.filter !== status)) continue;
        sub.socket.write(event);
      }
    },
    status: (id) => pane(id).status,
    print(id, text) {
      write(pane(id), text);
    },
    typed: (id) => pane(id).inputs.flatMap((input) => (input.text === undefined ? [] : [input.text])),
    inputs: (id) => [...pane(id).inputs],
    screen: (id) => pane(id).screen,
    subscriberCount: () => new Set([...subscribers].map((sub) => sub.socket)).size,
    methods: () => [...methodLog],
    sendRaw(raw) {
      for (const socket of new Set([...subscribers].map((sub) => sub.socket))) socket.write(`${raw}\n`);
    },
    setResponsePrefix(lines) {
      responsePrefix = [...lines];
    },
    mute(method) {
      muted = method;
    },
    stop,
    async restart() {
      if (server !== undefined) return;
      await listen();
    },
    async close() {
      await stop();
      if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    },
  };
}
