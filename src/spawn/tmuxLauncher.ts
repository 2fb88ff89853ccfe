import { BridgeError, ErrorCode } from '../errors.js';
import { defaultTimeoutMs, runTmux, type TmuxRunOptions, toTmuxFailure } from '../panes/tmuxInjector.js';
import type { PaneTarget } from '../wire/paneTarget.js';
import { type EnvFile, envFileText, sourceAndRun, writeEnvFile } from './envFile.js';
import { type Launcher, type LaunchRequest, oneAtATime } from './launcher.js';

export interface TmuxLauncherOptions {
  /** tmux server socket (`tmux -S`); unset: the default server. */
  readonly socket?: string | undefined;
  /** Session the windows go in; created when missing. */
  readonly session: string;
}

/**
 * Launches agents as windows of one tmux session: `new-window -d` (never steals focus), named
 * after the entity. The agent's environment carries BRIDGE_TOKEN, so it is not given with
 * `-e KEY=VALUE`, which would put it in the tmux client's argv where any local user reads it
 * in `ps`: it goes in a 0600 env file that the window's shell sources and deletes before it
 * `exec`s the command (as the herdr launcher does). Launches run one at a time so two cannot
 * both create the session.
 */
export function createTmuxLauncher(options: TmuxLauncherOptions): Launcher {
  const tmux: TmuxRunOptions = { socket: options.socket, tmuxPath: 'tmux', timeoutMs: defaultTimeoutMs };
  const session = options.session;

  const paneOf = (target: string): PaneTarget => ({
    type: 'tmux',
    target,
    ...(options.socket === undefined ? {} : { socket: options.socket }),
  });

  const launchNow = async (request: LaunchRequest): Promise<PaneTarget> => {
    const server =
      options.socket === undefined ? 'the default tmux server' : `the tmux server at ${options.socket}`;
    const failed = (said: string, cause: unknown) =>
      new BridgeError(
        ErrorCode.launchFailed,
        `could not open a tmux window for ${request.name} in session ${session} on ${server}: ${said}`,
        { cause },
      );
    let envFile: EnvFile;
    try {
      envFile = writeEnvFile(envFileText(request.env), 'bridge-tmux-');
    } catch (err) {
      throw failed((err as Error).message, err);
    }
    const exists = await runTmux(tmux, ['has-session', '-t', `=${session}`]).then(
      () => true,
      () => false,
    );
    // As separate words, tmux execs /bin/sh itself rather than through its default-shell, which
    // may be one (fish, say) that does not take `.` and `&&`.
    const command = ['/bin/sh', '-c', sourceAndRun(envFile, request.command)];
    // biome-ignore format: the tmux command reads better as written
    const args = exists
      ? ['new-window', '-d', '-P', '-F', '#{pane_id}', '-t', `=${session}:`, '-n', request.name, '-c', request.cwd, ...command]
      : ['new-session', '-d', '-P', '-F', '#{pane_id}', '-s', session, '-n', request.name, '-c', request.cwd, ...command];
    try {
      const { stdout } = await runTmux(tmux, args);
      const paneId = stdout.trim();
      if (!/^%\d+$/.test(paneId)) throw new Error(`tmux printed no pane id (${JSON.stringify(stdout)})`);
      return paneOf(paneId);
    } catch (err) {
      // No window (or none we know of) will read it.
      envFile.remove();
      const failure = toTmuxFailure(err);
      throw failed(failure.stderr === '' ? (err as Error).message : failure.stderr, err);
    }
  };

  return {
    launch: oneAtATime(launchNow),
    async find(name) {
      try {
        const { stdout } = await runTmux(tmux, [
          'list-windows',
          '-t',
          `=${session}`,
          '-F',
          '#{window_name} #{pane_id}',
        ]);
        for (const line of stdout.split('\n')) {
          const [windowName, paneId] = line.trim().split(' ');
          if (windowName === name && paneId) return paneOf(paneId);
        }
      } catch {
        // No server or no session: nothing was left behind.
      }
      return undefined;
    },
    async close(pane) {
      if (pane.type !== 'tmux') return;
      await runTmux(tmux, ['kill-pane', '-t', pane.target]).catch((err: unknown) => {
        const kind = toTmuxFailure(err).kind;
        if (kind !== 'notFound' && kind !== 'serverDown') throw err;
      });
    },
  };
}
