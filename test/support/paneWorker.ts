import { expect } from 'vitest';
import type { GatewayProcess } from './GatewayProcess.js';
import type { TmuxTestServer } from './tmux.js';
import { waitFor } from './waitFor.js';

/** `agentbridge register … --json` on `gateway`, which must succeed: what it printed. */
export async function registerEntity<T = { token: string }>(
  gateway: GatewayProcess,
  args: string[],
): Promise<T> {
  const result = await gateway.cli(['register', ...args, '--json']);
  expect(result.code, result.stderr || result.stdout).toBe(0);
  return JSON.parse(result.stdout) as T;
}

/** A worker on a new pane of `tmux` running `command`, registered once `ready` shows on its screen. */
export async function startPaneWorker(
  gateway: GatewayProcess,
  tmux: TmuxTestServer,
  name: string,
  command: string,
  ready: RegExp,
): Promise<string> {
  const pane = await tmux.newPane(command);
  await waitFor(`${name}'s pane to start`, async () =>
    ready.test(await tmux.capture(pane)) ? true : undefined,
  );
  await registerEntity(gateway, [
    '--kind',
    'worker',
    '--name',
    name,
    '--tmux',
    pane,
    '--tmux-socket',
    tmux.socket,
  ]);
  return pane;
}
