/**
 * One coding agent behind its own protocol, as the agent host drives it: what each protocol's
 * client (acpAgent.ts, claudeStreamAgent.ts) offers, and what it reports for the mirror.
 */
import { type ChildProcessByStdio, spawn } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import type { NativePath } from '../wire/agentHost.js';

/** What the agent did, for the host's mirror and its status. */
export type AgentEvent =
  | {
      readonly kind: 'started';
      readonly agent: string;
      readonly session: string;
      /** The command a person runs to watch the session and take part (Codex: its TUI, attached). */
      readonly attach?: string | undefined;
    }
  /** Words of the agent's reply (a chunk). */
  | { readonly kind: 'said'; readonly text: string }
  | { readonly kind: 'thought'; readonly text: string }
  | { readonly kind: 'tool'; readonly title: string; readonly status: string }
  | { readonly kind: 'permission'; readonly request: PermissionRequest }
  | { readonly kind: 'permission-answered'; readonly id: number; readonly outcome: string }
  | { readonly kind: 'turn-ended'; readonly stopReason: string }
  | { readonly kind: 'bad-line'; readonly reason: string }
  | { readonly kind: 'exited'; readonly why: string };

/** A permission the agent asked for and its owner has not answered yet. */
export interface PermissionRequest {
  /** Ours: the order in which they came, from 1. */
  readonly id: number;
  /** The tool call as the agent named it. */
  readonly title: string;
  /** What the owner may answer; `kind` as ACP names it (allow_once, reject_once, ...). */
  readonly options: ReadonlyArray<{ optionId: string; name: string; kind: string }>;
}

export interface AgentSessionOptions {
  readonly command: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly env?: NodeJS.ProcessEnv | undefined;
  readonly onEvent: (event: AgentEvent) => void;
  /**
   * Where an agent that a person can join listens (Codex's app-server on a unix socket, which
   * its TUI attaches to), unless its arguments name a transport of their own.
   */
  readonly attachSocket?: string | undefined;
}

export interface AgentSession {
  readonly path: NativePath;
  /** The agent as it named itself (else its command). */
  readonly name: string;
  /**
   * Whether a prompt may be given while a turn runs: the agent takes it into that turn (at its
   * next inference boundary) instead of refusing it.
   */
  readonly takesMidTurn: boolean;
  /**
   * Whether a turn runs that this host did not start (a person's, in a TUI attached to the same
   * session): a message waits for it or steers into it as into one of its own.
   */
  turnRunning?(): boolean;
  /** Starts the process and opens a session; rejects if the agent will not. */
  start(): Promise<void>;
  /**
   * Gives the agent one prompt (`marker` names it, the message's id). `onAcknowledged` is called
   * once the agent has taken it; the promise resolves with why its turn ended, and rejects if the
   * agent refused the prompt.
   */
  prompt(marker: string, text: string, onAcknowledged: () => void): Promise<string>;
  /** The permissions asked and not answered, oldest first. */
  openPermissions(): PermissionRequest[];
  /** Answers an open permission with one of its options, or (undefined) cancels it. */
  answerPermission(id: number, optionId: string | undefined): boolean;
  stop(): void;
}

export function asRecord(value: unknown): Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};
}

/** The agent's process: its stdio piped, and a promise that rejects, saying why, when it exits. */
export interface AgentProcess {
  readonly child: ChildProcessByStdio<Writable, Readable, Readable>;
  readonly exited: Promise<never>;
  /** Ends the agent (SIGTERM). */
  stop(): void;
}

/**
 * Starts the agent with `args`. When it exits, `onExit` is told why (to reject what waits on it,
 * cancel its open permission requests), then the mirror.
 */
export function startAgentProcess(
  options: AgentSessionOptions,
  args: readonly string[],
  onExit: (err: Error) => void,
): AgentProcess {
  const child = spawn(options.command, [...args], {
    cwd: options.cwd,
    env: options.env ?? process.env,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const exited = new Promise<never>((_, reject) => {
    child.once('error', (err) => reject(err));
    child.once('exit', (code, signal) => reject(new Error(`the agent exited (${signal ?? `code ${code}`})`)));
  });
  exited.catch((err: Error) => {
    onExit(err);
    options.onEvent({ kind: 'exited', why: err.message });
  });
  // Its own diagnostics are not the session's: read and let go (a full pipe would stall it).
  child.stderr.resume();
  return { child, exited, stop: () => child.kill('SIGTERM') };
}

/**
 * The permissions an agent asked for and its owner has not answered: numbered as they come, and
 * answered once, by the owner (never by a message). Each protocol's client encodes the answer.
 */
export interface PermissionDesk {
  /** Records a request; resolves with the option the owner chose, or undefined if cancelled. */
  ask(title: string, options: PermissionRequest['options']): Promise<string | undefined>;
  open(): PermissionRequest[];
  /** The owner's answer: one of the request's options, or undefined to cancel it. */
  answer(id: number, optionId: string | undefined): boolean;
  /** The agent is gone: every open request is cancelled. */
  cancelAll(): void;
}

export function createPermissionDesk(onEvent: (event: AgentEvent) => void): PermissionDesk {
  const waiting = new Map<
    number,
    { request: PermissionRequest; settle: (optionId: string | undefined) => void }
  >();
  let nextId = 1;
  return {
    ask(title, options) {
      const request: PermissionRequest = { id: nextId++, title, options };
      return new Promise((settle) => {
        waiting.set(request.id, { request, settle });
        onEvent({ kind: 'permission', request });
      });
    },
    open() {
      return [...waiting.values()].map((w) => w.request);
    },
    answer(id, optionId) {
      const open = waiting.get(id);
      if (!open) return false;
      if (optionId !== undefined && !open.request.options.some((o) => o.optionId === optionId)) return false;
      waiting.delete(id);
      open.settle(optionId);
      onEvent({ kind: 'permission-answered', id, outcome: optionId ?? 'cancelled' });
      return true;
    },
    cancelAll() {
      for (const { settle } of waiting.values()) settle(undefined);
      waiting.clear();
    },
  };
}
