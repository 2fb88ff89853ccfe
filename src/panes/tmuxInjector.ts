import { type ExecFileException, execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { BridgeError, ErrorCode } from '../errors.js';
import { type Clock, systemClock } from '../kernel/clock.js';
import { hasUnsafeChar, neutralise } from '../text/neutralise.js';
import {
  type PaneHold,
  type PaneInjector,
  type PaneMessage,
  PaneStatus,
  type SubmitOutcome,
  type TypeOutcome,
  type Whereabouts,
} from './paneInjector.js';
import type { Screen } from './readScreen.js';
import {
  createVerifiedSubmission,
  defaultSubmissionTiming,
  type PanePort,
  type SubmissionTiming,
} from './verifiedSubmission.js';

export interface TmuxInjectorOptions {
  /** tmux target pane: a pane id (`%12`) or `session:window.pane`. */
  readonly target: string;
  /**
   * tmux server socket path (`tmux -S`). Unset: the server `$TMUX` names, else the user's
   * default server.
   */
  readonly socket?: string | undefined;
  /** tmux executable, default `tmux` from PATH. */
  readonly tmuxPath?: string | undefined;
  /**
   * Upper bound for one tmux command, default 10 s: a wedged tmux server must not stall the
   * pane's delivery queue forever.
   */
  readonly timeoutMs?: number | undefined;
  /** How submission is verified (R-DL6); defaults in `defaultSubmissionTiming`. */
  readonly timing?: Partial<SubmissionTiming> | undefined;
  /** What its waits and deadlines read; default the system clock. */
  readonly clock?: Clock | undefined;
}

export const defaultTimeoutMs = 10_000;
/** How long after a paste or an Enter the screen is first read, in the same tmux client. */
const settleSeconds = 0.005;

/**
 * Reads `#{cursor_x} #{cursor_y} #{pane_pid} #{pane_current_command}` on the first line, then
 * the screen; one reader per pane, which remembers when the program it last saw started.
 */
function createScreenReader(clock: Clock): (out: string) => Screen {
  let known: Pick<Screen, 'program' | 'programStartedAt'> = {};
  return (out) => {
    const newline = out.indexOf('\n');
    const [x, y, pid, ...command] = out.slice(0, newline).split(' ');
    const cursorX = Number(x);
    const cursorY = Number(y);
    const cursor =
      Number.isInteger(cursorX) && Number.isInteger(cursorY) ? { x: cursorX, y: cursorY } : undefined;
    const program = programOf(pid, command.join(' '));
    if (program !== known.program) known = { program, programStartedAt: startedAt(program, clock) };
    return { text: out.slice(newline + 1), cursor, ...known };
  };
}

/**
 * Which program runs in a pane: its process and the foreground process group of its terminal,
 * from `/proc` where there is one (a program started anew in the same pane, even the same one,
 * has a new group), else the command tmux names.
 */
function programOf(pid: string | undefined, command: string): string {
  if (pid !== undefined && /^\d+$/.test(pid)) {
    try {
      return `${pid}:${statFields(pid)[5]}`;
    } catch {
      // Not Linux, or the process is gone: the name will do.
    }
  }
  return `${pid ?? ''}:${command}`;
}

/** When the group leader of `program` (`pid:group`) started, in epoch ms; undefined where /proc cannot say. */
function startedAt(program: string, clock: Clock): number | undefined {
  const group = program.split(':')[1] ?? '';
  if (!/^\d+$/.test(group)) return undefined;
  try {
    // Field 22 of /proc/PID/stat: start time in clock ticks after boot (USER_HZ, 100 on Linux).
    const ticks = Number(statFields(group)[19]);
    const uptime = Number(readFileSync('/proc/uptime', 'utf8').split(' ')[0]);
    return clock.now() - (uptime - ticks / 100) * 1000;
  } catch {
    return undefined;
  }
}

/** The fields of /proc/PID/stat after the parenthesised command name (field 3 first). */
function statFields(pid: string): string[] {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}
const defaultContainsLines = 500;

/**
 * A {@link PaneInjector} for a tmux pane. Typing is verified (R-DL6): the pane is read before
 * the paste (a dialog, half-typed input or a busy agent hold the message), the text goes in as
 * one paste through stdin (never argv, never a shell, never `send-keys -l`), Enter follows as
 * its own command once the paste shows, and the pane is read back until the agent has taken
 * it. Calls run one at a time, in call order.
 *
 * Throws a BridgeError (`BAD_REQUEST`) at once when `target` cannot be a tmux target.
 */
export function createTmuxInjector(options: TmuxInjectorOptions): PaneInjector {
  const target = checkTarget(options.target);
  const clock = options.clock ?? systemClock;
  const tmux: TmuxRunOptions = {
    socket: options.socket,
    tmuxPath: options.tmuxPath ?? 'tmux',
    timeoutMs: options.timeoutMs ?? defaultTimeoutMs,
  };
  // Chained so calls reach the pane in call order even when callers do not await each other;
  // `tail` never rejects, so one failed call does not wedge the ones behind it (each caller
  // still gets its own rejection).
  let tail: Promise<unknown> = Promise.resolve();
  let closed = false;

  const run = async (args: readonly string[], verb: string, input?: string): Promise<string> => {
    try {
      return (await runTmux(tmux, args, input)).stdout;
    } catch (err) {
      throw paneError(toTmuxFailure(err), target, tmux, verb);
    }
  };

  const toScreen = createScreenReader(clock);
  // The cursor and the screen, read by one client so the cursor belongs to its screen.
  // biome-ignore format: one tmux command per line reads better than a wrapped list
  const look = [
    'display-message', '-p', '-t', target, '#{cursor_x} #{cursor_y} #{pane_pid} #{pane_current_command}', ';',
    'capture-pane', '-p', '-t', target,
  ];
  // The same, a moment after a paste or an Enter (a program needs a few ms to redraw).
  const lookSoon = [';', 'run-shell', '-d', String(settleSeconds), ';', ...look];
  const port: PanePort = {
    async capture() {
      return toScreen(await run(look, 'read'));
    },
    history: (lines) => run(['capture-pane', '-p', '-J', '-S', `-${lines}`, '-t', target], 'read'),
    // -E -1: the last line of scrollback, so the visible screen (and the input area on it) is not read.
    scrollback: (lines) =>
      run(['capture-pane', '-p', '-J', '-S', `-${lines}`, '-E', '-1', '-t', target], 'read'),
    async paste(text, enter) {
      const buffer = `bridge-${process.pid}-${randomUUID()}`;
      // - `copy-mode -q` first: a pane in copy mode (or any other mode) would swallow the
      //   paste. It also fails fast on a missing pane, before a buffer is created that could leak.
      // - a named buffer, deleted by the paste (`-d`), so concurrent gateways and the user's
      //   own paste buffers never mix; `-p` brackets the paste when the application asked for it.
      // biome-ignore format: one tmux command per line reads better than a wrapped list
      const args = [
        'copy-mode', '-q', '-t', target, ';',
        'load-buffer', '-b', buffer, '-', ';',
        'paste-buffer', '-p', '-d', '-b', buffer, '-t', target,
        // A line reader's Enter goes in the same client: tmux runs one client's commands back
        // to back, so no other keys land between the paste and it.
        ...(enter ? [';', 'send-keys', '-t', target, 'Enter'] : []),
        ...lookSoon,
      ];
      try {
        return toScreen((await runTmux(tmux, args, text)).stdout);
      } catch (err) {
        const failure = toTmuxFailure(err);
        if (failure.kind === 'failed' || failure.kind === 'timeout') {
          // The chain may have stopped after load-buffer (pane gone in between): drop the
          // buffer so a message cannot later be pasted by hand from the buffer list.
          await runTmux(tmux, ['delete-buffer', '-b', buffer]).catch(() => undefined);
        }
        throw paneError(failure, target, tmux, 'type into');
      }
    },
    async pressEnter() {
      return toScreen(await run(['send-keys', '-t', target, 'Enter', ...lookSoon], 'press Enter in'));
    },
  };
  const submission = createVerifiedSubmission(port, { ...defaultSubmissionTiming, ...options.timing }, clock);

  function serial<T>(step: () => Promise<T>): Promise<T> {
    if (closed) {
      return Promise.reject(
        new BridgeError(ErrorCode.shuttingDown, `the injector for tmux pane ${target} is closed`),
      );
    }
    const next = tail.then(step);
    tail = next.catch(() => undefined);
    return next;
  }

  // The pasted bytes reach the pane's terminal as if typed: control characters would act and
  // bidi or zero-width ones would change what is read (`neutralise`, shared with herdr).
  function checked(message: PaneMessage): PaneMessage {
    const text = neutralise(message.text);
    if (text === '') {
      throw new BridgeError(
        ErrorCode.badRequest,
        `nothing to type into tmux pane ${target}: the text is empty`,
      );
    }
    return { text, marker: message.marker };
  }

  return {
    inspect(): Promise<PaneHold | undefined> {
      return serial(() => submission.inspect());
    },
    type(message: PaneMessage): Promise<TypeOutcome> {
      return serial(async () => submission.type(checked(message)));
    },
    submit(message: PaneMessage): Promise<SubmitOutcome> {
      return serial(async () => submission.submit(checked(message)));
    },
    locate(message: PaneMessage): Promise<Whereabouts> {
      return serial(async () => submission.locate(checked(message)));
    },

    async contains(marker: string, lines: number = defaultContainsLines): Promise<boolean> {
      if (marker === '') throw new BridgeError(ErrorCode.badRequest, 'contains() needs a non-empty marker');
      if (!Number.isSafeInteger(lines) || lines < 1) {
        throw new BridgeError(ErrorCode.badRequest, `contains() needs a positive line count, got ${lines}`);
      }
      // -J joins lines tmux wrapped at the pane width, so a marker that happened to straddle
      // the right edge is still found. -S counts history lines above the visible screen, which
      // is mostly blank below the cursor: the blank tail is dropped and the last `lines` lines
      // are searched, as the contract promises.
      const stdout = await port.history(lines);
      const captured = stdout.trimEnd().split('\n');
      return captured.slice(-lines).join('\n').includes(marker);
    },

    watchStatus(listener: (status: PaneStatus) => void): () => void {
      // tmux cannot tell whether an agent is busy: the screen is read before each delivery
      // instead (R-DL6), so the pane is reported idle once. Asynchronously, like a multiplexer
      // that does report status, so callers never see the listener run before they hold the
      // unsubscribe function.
      let active = true;
      queueMicrotask(() => {
        if (active && !closed) listener(PaneStatus.idle);
      });
      return () => {
        active = false;
      };
    },

    async close(): Promise<void> {
      closed = true;
      await tail;
    },
  };
}

/**
 * True when `target` names a pane on the tmux server at `socket` (default server when unset).
 * A missing pane or no running server is `false`; a missing tmux binary throws a BridgeError
 * (`PANE_UNAVAILABLE`), since "not found" would send the operator looking in the wrong place.
 */
export async function tmuxPaneExists(target: string, socket?: string): Promise<boolean> {
  const checked = checkTarget(target);
  const tmux: TmuxRunOptions = { socket, tmuxPath: 'tmux', timeoutMs: defaultTimeoutMs };
  try {
    // display-message tolerates a missing target (prints an empty line, exits 0), so the
    // answer is whether a pane id came back.
    const { stdout } = await runTmux(tmux, ['display-message', '-p', '-t', checked, '#{pane_id}']);
    return stdout.trim() !== '';
  } catch (err) {
    const failure = toTmuxFailure(err);
    if (failure.kind === 'notFound' || failure.kind === 'serverDown') return false;
    throw paneError(failure, checked, tmux, 'look up');
  }
}

export interface TmuxRunOptions {
  readonly socket: string | undefined;
  readonly tmuxPath: string;
  readonly timeoutMs: number;
}

export type TmuxFailureKind = 'notInstalled' | 'serverDown' | 'notFound' | 'timeout' | 'failed';

export interface TmuxFailure {
  readonly kind: TmuxFailureKind;
  readonly stderr: string;
  readonly exitCode: number | string | undefined;
  readonly cause: unknown;
}

/** Thrown by runTmux; carries what tmux printed so errors can quote it. */
class TmuxRunError extends Error {
  constructor(
    readonly failure: TmuxFailure,
    message: string,
  ) {
    super(message, { cause: failure.cause });
  }
}

export function runTmux(
  tmux: TmuxRunOptions,
  args: readonly string[],
  input?: string,
): Promise<{ stdout: string; stderr: string }> {
  const argv = tmux.socket === undefined ? [...args] : ['-S', tmux.socket, ...args];
  return new Promise((resolve, reject) => {
    const child = execFile(
      tmux.tmuxPath,
      argv,
      { encoding: 'utf8', timeout: tmux.timeoutMs, maxBuffer: 64 * 1024 * 1024, windowsHide: true },
      (error: ExecFileException | null, stdout: string, stderr: string) => {
        if (error === null) {
          resolve({ stdout, stderr });
          return;
        }
        const failure = classify(error, stderr);
        reject(new TmuxRunError(failure, stderr.trim() || error.message));
      },
    );
    // When tmux exits before reading stdin (missing pane, dead server) the write fails with
    // EPIPE; the exit status and stderr already report that failure, with a better message.
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(input ?? '');
  });
}

function classify(error: ExecFileException, stderr: string): TmuxFailure {
  const text = stderr.trim();
  const base = { stderr: text, exitCode: error.code ?? undefined, cause: error };
  if (error.code === 'ENOENT' || error.code === 'EACCES') return { kind: 'notInstalled', ...base };
  if (error.killed) return { kind: 'timeout', ...base };
  if (/no server running|error connecting to|server exited|lost server/i.test(text)) {
    return { kind: 'serverDown', ...base };
  }
  if (/can't find (pane|window|session)|no such (pane|window|session)/i.test(text)) {
    return { kind: 'notFound', ...base };
  }
  return { kind: 'failed', ...base };
}

export function toTmuxFailure(err: unknown): TmuxFailure {
  if (err instanceof TmuxRunError) return err.failure;
  return { kind: 'failed', stderr: '', exitCode: undefined, cause: err };
}

function paneError(failure: TmuxFailure, target: string, tmux: TmuxRunOptions, verb: string): BridgeError {
  const server = tmux.socket === undefined ? 'the default tmux server' : `the tmux server at ${tmux.socket}`;
  const cli = tmux.socket === undefined ? 'tmux' : `tmux -S ${tmux.socket}`;
  const said = failure.stderr === '' ? '' : ` (tmux said: ${failure.stderr})`;
  const details = {
    target,
    socket: tmux.socket ?? null,
    stderr: failure.stderr,
    exitCode: failure.exitCode ?? null,
  };
  const options = { cause: failure.cause, details };
  switch (failure.kind) {
    case 'notInstalled':
      return new BridgeError(
        ErrorCode.paneUnavailable,
        `cannot ${verb} tmux pane ${target}: could not run "${tmux.tmuxPath}": install tmux or put it on PATH`,
        options,
      );
    case 'serverDown':
      return new BridgeError(
        ErrorCode.paneUnavailable,
        `cannot ${verb} tmux pane ${target}: ${server} is not running${said}: ` +
          'start tmux (or fix the socket path) and register the pane again',
        options,
      );
    case 'notFound':
      return new BridgeError(
        ErrorCode.paneUnavailable,
        `tmux pane ${target} not found on ${server}${said}: check the target with \`${cli} list-panes -a\``,
        options,
      );
    case 'timeout':
      // Retryable: whether the text was typed is unknown, and R-DL5 recovery settles that by
      // looking for the msg id in the pane before typing again.
      return new BridgeError(
        ErrorCode.injectFailed,
        `tmux did not answer within ${tmux.timeoutMs} ms when asked to ${verb} pane ${target}: ` +
          `check that ${server} is responsive`,
        { ...options, retryable: true },
      );
    case 'failed':
      return new BridgeError(
        ErrorCode.injectFailed,
        `cannot ${verb} tmux pane ${target}: tmux failed${said}`,
        options,
      );
  }
}

/**
 * tmux reads argv as a command list in which an argument ending in `;` ends the command, so a
 * target like `x;` would splice our own arguments into a new command. Targets never need `;`,
 * control characters or surrounding blanks.
 */
function checkTarget(target: string): string {
  if (target.trim() === '' || target !== target.trim() || target.includes(';') || hasUnsafeChar(target)) {
    throw new BridgeError(
      ErrorCode.badRequest,
      `"${target}" is not a tmux pane target: use a pane id like %12 or session:window.pane ` +
        '(see `tmux list-panes -a -F "#{pane_id} #{session_name}:#{window_index}.#{pane_index}"`)',
    );
  }
  return target;
}
