/**
 * A coding agent over the Agent Client Protocol (agentclientprotocol.com; Gemini CLI's
 * `gemini --acp`, OpenCode's `opencode acp`): we are the client, the agent a child process
 * speaking JSON-RPC on its stdio.
 *
 *   initialize {protocolVersion: 1, clientCapabilities}   → {protocolVersion, agentInfo?, …}
 *   session/new {cwd, mcpServers}                          → {sessionId}
 *   session/prompt {sessionId, prompt: [{type: text}]}     → {stopReason}, when the turn ends
 *   ← session/update {sessionId, update}                    streamed while the turn runs
 *   ← session/request_permission {sessionId, toolCall, options}
 *                                                          answered by the owner, never by a message
 *
 * The client offers no file system and no terminal (`clientCapabilities`), so the agent uses
 * its own tools, and asks before those that need a permission. A session runs one prompt turn
 * at a time (protocol/prompt-turn): a prompt for a busy agent waits for the turn to end.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createJsonRpcPeer, type JsonRpcPeer } from './jsonRpcPeer.js';

export const acpProtocolVersion = 1;

/** What the agent reports, for the host's mirror and its status. */
export type AcpEvent =
  | { readonly kind: 'started'; readonly agent: string; readonly sessionId: string }
  /** A session update (agentclientprotocol.com/protocol/prompt-turn#3-agent-reports-output). */
  | { readonly kind: 'update'; readonly update: Record<string, unknown> }
  | { readonly kind: 'permission'; readonly request: PermissionRequest }
  | { readonly kind: 'permission-answered'; readonly id: number; readonly outcome: string }
  | { readonly kind: 'turn-ended'; readonly stopReason: string }
  | { readonly kind: 'stderr'; readonly text: string }
  | { readonly kind: 'bad-line'; readonly reason: string }
  | { readonly kind: 'exited'; readonly why: string };

/** A permission the agent asked for and its owner has not answered yet. */
export interface PermissionRequest {
  /** Ours: the order in which they came. */
  readonly id: number;
  /** The tool call's title as the agent gave it. */
  readonly title: string;
  readonly options: ReadonlyArray<{ optionId: string; name: string; kind: string }>;
}

export interface AcpAgentOptions {
  readonly command: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly env?: NodeJS.ProcessEnv;
  readonly onEvent: (event: AcpEvent) => void;
}

export interface AcpAgent {
  /** Starts the process, initializes and opens a session; rejects if the agent will not. */
  start(): Promise<void>;
  /** The agent as it named itself. */
  readonly name: string;
  /**
   * Sends one prompt. `onAcknowledged` is called once the agent has taken it (its first session
   * update for the turn, or the turn's end); the promise settles when the turn ends.
   */
  prompt(text: string, onAcknowledged: () => void): Promise<string>;
  /** The permissions asked and not answered, oldest first. */
  openPermissions(): PermissionRequest[];
  /** Answers an open permission with one of its options, or cancels it. */
  answerPermission(id: number, optionId: string | undefined): boolean;
  stop(): void;
}

function asRecord(value: unknown): Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};
}

export function createAcpAgent(options: AcpAgentOptions): AcpAgent {
  const { onEvent } = options;
  let child: ChildProcess | undefined;
  let peer: JsonRpcPeer | undefined;
  let sessionId = '';
  let name = options.command;
  /** Called at the next session update of the running turn. */
  let acknowledge: (() => void) | undefined;
  let nextPermission = 1;
  const permissions = new Map<
    number,
    { request: PermissionRequest; answer: (outcome: Record<string, unknown>) => void }
  >();

  const onRequest = (method: string, params: unknown): Promise<unknown> => {
    if (method !== 'session/request_permission') {
      return Promise.reject(new Error(`the client offers no ${method}`));
    }
    const body = asRecord(params);
    const toolCall = asRecord(body.toolCall);
    const request: PermissionRequest = {
      id: nextPermission++,
      title: String(toolCall.title ?? toolCall.kind ?? 'a tool call'),
      options: (Array.isArray(body.options) ? body.options : []).map((o) => {
        const option = asRecord(o);
        return { optionId: String(option.optionId), name: String(option.name), kind: String(option.kind) };
      }),
    };
    acknowledge?.();
    acknowledge = undefined;
    return new Promise((resolve) => {
      permissions.set(request.id, { request, answer: (outcome) => resolve({ outcome }) });
      onEvent({ kind: 'permission', request });
    });
  };

  return {
    get name() {
      return name;
    },

    async start() {
      const spawned = spawn(options.command, [...options.args], {
        cwd: options.cwd,
        env: options.env ?? process.env,
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      child = spawned;
      const exited = new Promise<never>((_, reject) => {
        spawned.once('error', (err) => reject(err));
        spawned.once('exit', (code, signal) =>
          reject(new Error(`the agent exited (${signal ?? `code ${code}`})`)),
        );
      });
      exited.catch((err: Error) => {
        peer?.close(err.message);
        for (const { answer } of permissions.values()) answer({ outcome: 'cancelled' });
        permissions.clear();
        onEvent({ kind: 'exited', why: err.message });
      });
      spawned.stderr?.setEncoding('utf8');
      spawned.stderr?.on('data', (text: string) => onEvent({ kind: 'stderr', text }));
      const rpc = createJsonRpcPeer(
        spawned.stdout as NonNullable<typeof spawned.stdout>,
        spawned.stdin as NonNullable<typeof spawned.stdin>,
        {
          request: onRequest,
          notification: (method, params) => {
            if (method !== 'session/update') return;
            const body = asRecord(params);
            if (body.sessionId !== sessionId) return;
            acknowledge?.();
            acknowledge = undefined;
            onEvent({ kind: 'update', update: asRecord(body.update) });
          },
          badLine: (reason) => onEvent({ kind: 'bad-line', reason }),
        },
      );
      peer = rpc;
      const init = asRecord(
        await Promise.race([
          rpc.request('initialize', {
            protocolVersion: acpProtocolVersion,
            clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
          }),
          exited,
        ]),
      );
      const info = asRecord(init.agentInfo);
      if (typeof info.name === 'string') {
        name =
          typeof info.version === 'string'
            ? `${info.title ?? info.name} ${info.version}`
            : String(info.title ?? info.name);
      }
      const session = asRecord(
        await Promise.race([rpc.request('session/new', { cwd: options.cwd, mcpServers: [] }), exited]),
      );
      if (typeof session.sessionId !== 'string') throw new Error('session/new answered without a sessionId');
      sessionId = session.sessionId;
      onEvent({ kind: 'started', agent: name, sessionId });
    },

    async prompt(text, onAcknowledged) {
      if (!peer) throw new Error('the agent has not started');
      acknowledge = onAcknowledged;
      try {
        const result = asRecord(
          await peer.request('session/prompt', { sessionId, prompt: [{ type: 'text', text }] }),
        );
        const stopReason = String(result.stopReason ?? 'unknown');
        // A turn that ended before any update still took the prompt.
        acknowledge?.();
        onEvent({ kind: 'turn-ended', stopReason });
        return stopReason;
      } finally {
        acknowledge = undefined;
      }
    },

    openPermissions() {
      return [...permissions.values()].map((p) => p.request);
    },

    answerPermission(id, optionId) {
      const open = permissions.get(id);
      if (!open) return false;
      if (optionId !== undefined && !open.request.options.some((o) => o.optionId === optionId)) return false;
      permissions.delete(id);
      const outcome = optionId === undefined ? 'cancelled' : 'selected';
      open.answer(optionId === undefined ? { outcome } : { outcome, optionId });
      onEvent({ kind: 'permission-answered', id, outcome: optionId ?? 'cancelled' });
      return true;
    },

    stop() {
      peer?.close('the host stopped');
      child?.kill('SIGTERM');
    },
  };
}
