import { ChannelError, ErrorCode } from '../errors.js';
import type { PaneTarget } from '../inject/paneInjector.js';
import { defaultTimeoutMs, runTmux, type TmuxRunOptions, toTmuxFailure } from '../inject/tmuxInjector.js';
import { type Launcher, type LaunchRequest, oneAtATime } from './launcher.js';

export interface TmuxLauncherOptions {
  /** tmux server socket (`tmux -S`); unset: the default server. */
  readonly socket?: string | undefined;
  /** Session the windows go in; created when missing. */
  readonly session: string;
}

/**
 * Launches agents as windows of one tmux session: `new-window -d` (never steals focus), named
 * after the entity, with the agent's environment set by tmux (`-e`), so no secret is typed
 * into a shell. Launches run one at a time so two cannot both create the session.
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
    const env = Object.entries(request.env).flatMap(([key, value]) => ['-e', `${key}=${value}`]);
    const exists = await runTmux(tmux, ['has-session', '-t', `=${session}`]).then(
      () => true,
      () => false,
    );
    // biome-ignore format: the tmux command reads better as written
    const args = exists
      ? ['new-window', '-d', '-P', '-F', '#{pane_id}', '-t', `=${session}:`, '-n', request.name, '-c', request.cwd, ...env, request.command]
      : ['new-session', '-d', '-P', '-F', '#{pane_id}', '-s', session, '-n', request.name, '-c', request.cwd, ...env, request.command];
    try {
      const { stdout } = await runTmux(tmux, args);
      const paneId = stdout.trim();
      if (!/^%\d+$/.test(paneId)) throw new Error(`tmux printed no pane id (${JSON.stringify(stdout)})`);
      return paneOf(paneId);
    } catch (err) {
      const failure = toTmuxFailure(err);
      const server =
        options.socket === undefined ? 'the default tmux server' : `the tmux server at ${options.socket}`;
      const said = failure.stderr === '' ? (err as Error).message : failure.stderr;
      throw new ChannelError(
        ErrorCode.launchFailed,
        `could not open a tmux window for ${request.name} in session ${session} on ${server}: ${said}`,
        { cause: err },
      );
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
