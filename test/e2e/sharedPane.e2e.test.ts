import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { registerEntity, startPaneWorker } from '../support/paneWorker.js';
import { startTmuxServer, type TmuxTestServer } from '../support/tmux.js';
import { waitFor } from '../support/waitFor.js';

/**
 * Issue 29 as it was found, through a real gateway daemon and real tmux panes a person shares:
 * a line reader whose prompt ends the body (item 4), a person's half-typed line (item 1 on a
 * line reader), a body that quotes a dialog and a busy line (item 3), a program restarted while
 * a message waits (item 5). The stage the sender reads must be true at every moment.
 */

interface Registered {
  token: string;
}

interface Sent {
  msgId: string;
  stage: string | null;
}

describe('a pane a person shares with the gateway (real daemon, real tmux)', () => {
  let gateway: GatewayProcess;
  let tmux: TmuxTestServer;
  let sender: Registered;
  let dir: string;

  const register = (args: string[]): Promise<Registered> => registerEntity<Registered>(gateway, args);
  const worker = (name: string, command: string, ready: RegExp): Promise<string> =>
    startPaneWorker(gateway, tmux, name, command, ready);

  const send = async (to: string, text: string, waitFor = 'submitted'): Promise<Sent> => {
    const result = await gateway.cli(['send', to, text, '--wait-for', waitFor, '--json'], {
      BRIDGE_TOKEN: sender.token,
    });
    expect(result.code, result.stderr).toBe(0);
    return JSON.parse(result.stdout) as Sent;
  };

  const stage = async (msgId: string): Promise<string | null> => {
    const result = await gateway.cli(['status', msgId, '--json'], { BRIDGE_TOKEN: sender.token });
    expect(result.code, result.stderr).toBe(0);
    return (JSON.parse(result.stdout) as { stage: string | null }).stage;
  };

  /** A loop that reads lines after a prompt and records each line it read, as a file. */
  const readLoop = (log: string, prompt: string): string => {
    const script = join(dir, `loop-${Math.random().toString(36).slice(2)}.sh`);
    writeFileSync(
      script,
      `while IFS= read -r -p '${prompt}' line; do printf '%s\\n' "$line" >> '${log}'; done\n`,
    );
    return `exec env -i PATH="$PATH" TERM=screen bash --norc --noprofile ${script}`;
  };
  const linesRead = (log: string): string[] => {
    try {
      return readFileSync(log, 'utf8').split('\n').filter(Boolean);
    } catch {
      return [];
    }
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'bridge-shared-pane-'));
    tmux = await startTmuxServer();
    gateway = new GatewayProcess();
    await gateway.start();
    sender = await register(['--kind', 'main', '--name', 'lead']);
  });

  afterAll(async () => {
    await gateway?.dispose();
    await tmux?.kill();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('a line reader whose prompt ends the body: submitted only once the whole line was read (item 4)', async () => {
    const log = join(dir, 'ready.log');
    await worker('ready', readLoop(log, '[1] ready> '), /\[1\] ready> $/m);
    const sent = await send('ready', 'status please\n[1] ready> ');
    expect(sent.stage).toBe('submitted');
    const read = linesRead(log);
    // One line read, and it is the whole message: not an empty line from an Enter alone.
    expect(read).toHaveLength(1);
    expect(read[0]).toContain(`msg ${sent.msgId}`);
    expect(read[0]).toMatch(/\[1\] ready> ?$/);
  });

  it("a person's half-typed line is never sent by the gateway; the message goes in once it is sent (item 1)", async () => {
    const log = join(dir, 'typed.log');
    const pane = await worker('typed', readLoop(log, 'cmd> '), /cmd> $/m);
    await tmux.run('send-keys', '-t', pane, '-l', 'rm -rf half typed');
    await waitFor('the half-typed line', async () =>
      (await tmux.capture(pane)).includes('half typed') ? true : undefined,
    );
    const held = await send('typed', 'run the tests', 'queued');
    await sleep(2_500);
    expect(await stage(held.msgId)).toBe('queued');
    expect(linesRead(log)).toEqual([]);
    await tmux.run('send-keys', '-t', pane, 'Enter');
    await waitFor('the message to be submitted', async () =>
      (await stage(held.msgId)) === 'submitted' ? true : undefined,
    );
    const read = linesRead(log);
    expect(read[0]).toBe('rm -rf half typed');
    expect(read).toHaveLength(2);
    expect(read[1]).toContain(`msg ${held.msgId}`);
    expect(read[1]).not.toContain('half typed');
  });

  it('a body quoting a dialog and a busy line is submitted, and so is the next message (item 3)', async () => {
    const log = join(dir, 'quote.log');
    await worker('quote', readLoop(log, '$ '), /\$ $/m);
    const first = await send('quote', 'Do you want to proceed?\n(esc to interrupt)\n✻ Kneading…');
    expect(first.stage).toBe('submitted');
    const second = await send('quote', 'and the next one');
    expect(second.stage).toBe('submitted');
    const read = linesRead(log);
    expect(read).toHaveLength(2);
    expect(read[0]).toContain('Do you want to proceed?');
    expect(read[1]).toContain(`msg ${second.msgId}`);
  });

  it('a program restarted while a message waits: not read from its blank screen, taken once it reads (item 5)', async () => {
    const log = join(dir, 'restart.log');
    const pane = await tmux.newPane('exec env -i PATH="$PATH" TERM=screen bash --norc --noprofile');
    await waitFor('bash', async () => (/[$#] $/m.test(await tmux.capture(pane)) ? true : undefined));
    await register(['--kind', 'worker', '--name', 'restart', '--tmux', pane, '--tmux-socket', tmux.socket]);
    // The person starts a program that clears the screen, and drops what is typed before it
    // draws its prompt (as a TUI starting up does).
    const script = join(dir, 'slow.sh');
    writeFileSync(
      script,
      'clear; sleep 1; while read -r -t 0.05 junk; do :; done; ' +
        `while IFS= read -r -p 'ok> ' line; do printf '%s\\n' "$line" >> '${log}'; done\n`,
    );
    await tmux.run('send-keys', '-t', pane, '-l', `bash ${script}`);
    await tmux.run('send-keys', '-t', pane, 'Enter');
    const sent = await send('restart', 'after the restart');
    expect(sent.stage).toBe('submitted');
    const read = linesRead(log);
    expect(read).toHaveLength(1);
    expect(read[0]).toContain(`msg ${sent.msgId}`);
  });
});
