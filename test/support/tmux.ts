import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor } from './waitFor.js';

/** A private tmux server for one test file; never the user's own server. */
export interface TmuxTestServer {
  /** Socket path of this server (`tmux -S`), unique per call. */
  readonly socket: string;
  /** Opens a window running `command` (through /bin/sh) and returns its pane id, e.g. `%3`. */
  newPane(command: string): Promise<string>;
  /** The pane's whole history and screen, wrapped lines joined. */
  capture(paneId: string): Promise<string>;
  /** Runs any tmux command on this server and returns its stdout. */
  run(...args: string[]): Promise<string>;
  /** Kills the server and removes its socket directory; safe to call twice. */
  kill(): Promise<void>;
}

const sessionName = 'bridge-test';

/**
 * Starts a detached tmux server on a fresh socket under os.tmpdir(). It reads no config file
 * (`-f /dev/null`) and runs pane commands with /bin/sh, so the user's ~/.tmux.conf, login
 * shell and shell rc files cannot change what a test sees.
 */
export async function startTmuxServer(): Promise<TmuxTestServer> {
  const dir = await mkdtemp(join(tmpdir(), 'bridge-tmux-'));
  const socket = join(dir, 'tmux.sock');
  const run = (...args: string[]): Promise<string> => tmux(socket, args);

  // The first window only keeps the session (and so the server) alive while test panes come
  // and go; given as separate argv words, tmux execs it without any shell.
  await run(
    '-f',
    '/dev/null',
    'new-session',
    '-d',
    '-x',
    '200',
    '-y',
    '50',
    '-s',
    sessionName,
    'sleep',
    '2147483647',
  );

  let killed = false;
  return {
    socket,
    run,
    async newPane(command: string): Promise<string> {
      const out = await run(
        'new-window',
        '-d',
        '-t',
        `${sessionName}:`,
        '-P',
        '-F',
        '#{pane_id}',
        '/bin/sh',
        '-c',
        command,
      );
      const paneId = out.trim();
      if (!/^%\d+$/.test(paneId))
        throw new Error(`tmux new-window printed ${JSON.stringify(out)}, not a pane id`);
      return paneId;
    },
    capture(paneId: string): Promise<string> {
      return run('capture-pane', '-p', '-J', '-S', '-', '-t', paneId);
    },
    async kill(): Promise<void> {
      if (killed) return;
      killed = true;
      // Already dead is fine: a test may have killed it on purpose.
      await run('kill-server').catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

function tmux(socket: string, args: readonly string[]): Promise<string> {
  // Without $TMUX a test started from inside tmux cannot reach the user's server by accident.
  const { TMUX: _ignored, ...env } = process.env;
  return new Promise((resolve, reject) => {
    execFile('tmux', ['-S', socket, ...args], { env, encoding: 'utf8' }, (error, stdout, stderr) => {
      if (error)
        reject(
          new Error(`tmux ${args.join(' ')} failed: ${stderr.trim() || error.message}`, { cause: error }),
        );
      else resolve(stdout);
    });
  });
}

/**
 * Runs the stand-in agent (tools/standInAgent.mjs) in `pane` as the entity whose token is
 * given, and waits until it is ready: it answers every SEND typed into the pane with bridge_reply.
 */
export async function startStandInAgent(
  tmux: TmuxTestServer,
  pane: string,
  mcpUrl: string,
  token: string,
): Promise<void> {
  const agent = join(import.meta.dirname, '..', '..', 'tools', 'standInAgent.mjs');
  await tmux.run(
    'respawn-pane',
    '-k',
    '-t',
    pane,
    `BRIDGE_MCP_URL=${mcpUrl} BRIDGE_TOKEN=${token} ${process.execPath} ${agent}`,
  );
  await waitFor('the stand-in agent', async () =>
    (await tmux.capture(pane)).includes('stand-in agent ready') ? true : undefined,
  );
}
