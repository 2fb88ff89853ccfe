import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { registerEntity, startPaneWorker } from '../support/paneWorker.js';
import { startTmuxServer, type TmuxTestServer } from '../support/tmux.js';
import { waitFor } from '../support/waitFor.js';

/**
 * Issue 29 as it was found, through a real gateway daemon and real tmux panes a person shares:
 * a line reader whose prompt ends the body (item 4), a person's half-typed line (item 1 on a
 * line reader), a body that quotes a dialog and a busy line (item 3), a program restarted while
 * a message waits (item 5). The stage the sender reads must be true at every moment. Then on a
 * screen drawn as Claude Code draws it (`fakeTui.ts`, recognised by the gateway as claude-code):
 * a person's collapsed paste (item 1), a body quoting the dialog and busy lines (item 3), and
 * an agent that ignores Enter for a while with a message left in its input (item 2).
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
    expect(result.code, result.stderr || result.stdout).toBe(0);
    return JSON.parse(result.stdout) as Sent;
  };

  const stage = async (msgId: string): Promise<string | null> => {
    const result = await gateway.cli(['status', msgId, '--json'], { BRIDGE_TOKEN: sender.token });
    expect(result.code, result.stderr || result.stdout).toBe(0);
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
    // Few, short Enter tries, so an agent deaf to Enter (item 2) dead-letters a message quickly.
    gateway = new GatewayProcess({
      config: { delivery: { submitTimeoutMs: 800, enterAttempts: 2, maxAttempts: 2, retryBaseMs: 200 } },
    });
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

  describe('on a screen drawn as Claude Code draws it', () => {
    const fakeTui = fileURLToPath(new URL('../support/fakeTui.ts', import.meta.url));
    /** What the agent took, each submitted input whole (pastes expanded). */
    const modelGot = (log: string): string[] => linesRead(log).map((line) => JSON.parse(line) as string);
    const claude = async (name: string, deaf = false): Promise<{ pane: string; log: string }> => {
      const log = join(dir, `${name}.jsonl`);
      const command = `exec node --import tsx ${fakeTui} --style claude --log ${log}${deaf ? ' --deaf' : ''}`;
      const pane = await worker(name, command, /\? for shortcuts/);
      return { pane, log };
    };
    const personPastes = async (pane: string, text: string): Promise<void> => {
      await tmux.run('set-buffer', '-b', 'person', text);
      await tmux.run('paste-buffer', '-p', '-d', '-b', 'person', '-t', pane);
    };
    // A stage that takes attempts (M7's dead letter: 2 attempts of 2 Enters, each waited for, the
    // pane settling between) takes ~12 s here and more on a loaded machine: waited for, not timed.
    const until = (what: string, msgId: string, want: string) =>
      waitFor(what, async () => ((await stage(msgId)) === want ? true : undefined), 60_000);

    it("a person's 12-line paste, collapsed, is not taken for ours: held, then ours goes in once they send (item 1)", async () => {
      const { pane, log } = await claude('paster');
      const draft = Array.from({ length: 12 }, (_, i) => `draft line ${i + 1}`).join('\n');
      await personPastes(pane, draft);
      await waitFor('the collapsed paste', async () =>
        (await tmux.capture(pane)).includes('[Pasted text #1 +11 lines]') ? true : undefined,
      );
      const held = await send('paster', 'M6: please review PR 42', 'queued');
      await sleep(2_500);
      expect(await stage(held.msgId)).toBe('queued');
      expect(modelGot(log)).toEqual([]);
      await tmux.run('send-keys', '-t', pane, 'Enter');
      await until('M6 to be submitted', held.msgId, 'submitted');
      const got = modelGot(log);
      expect(got).toHaveLength(2);
      expect(got[0]).toBe(draft);
      expect(got[1]).toContain(`msg ${held.msgId}`);
      expect(got[1]).toContain('M6: please review PR 42');
    });

    it("a body quoting Claude's dialog and busy lines is submitted, and so is the next message (item 3)", async () => {
      const { log } = await claude('quoter');
      const first = await send(
        'quoter',
        'Do you want to proceed?\n ❯ 1. Yes\n(esc to interrupt)\n✻ Kneading…',
      );
      expect(first.stage).toBe('submitted');
      const second = await send('quoter', 'and the next one');
      expect(second.stage).toBe('submitted');
      const got = modelGot(log);
      expect(got).toHaveLength(2);
      expect(got[0]).toContain('Do you want to proceed?');
      expect(got[1]).toContain(`msg ${second.msgId}`);
    });

    it('an agent deaf to Enter: the message left in its input is never taken for the next one (item 2)', async () => {
      const { pane, log } = await claude('deaf', true);
      // M7 is typed, its Enters are ignored: dead-lettered not-submitted, its text left in the input.
      const m7 = await send('deaf', 'M7: first task', 'queued');
      await until('M7 to be dead-lettered', m7.msgId, 'dead-lettered');
      expect(await tmux.capture(pane)).toContain(`msg ${m7.msgId}`);
      // M8 from the same sender within the same second: its header differs from M7's only
      // after the time part of the msgId. M7's text is not M8's: held, never Enter on it.
      const m8 = await send('deaf', 'M8: second task', 'queued');
      await sleep(2_000);
      const pid = Number((await tmux.run('display-message', '-p', '-t', pane, '#{pane_pid}')).trim());
      process.kill(pid, 'SIGUSR1');
      await sleep(1_500);
      expect(await stage(m8.msgId)).toBe('queued');
      expect(modelGot(log)).toEqual([]);
      // The person clears the input: M8 goes in, alone.
      await tmux.run('send-keys', '-t', pane, 'C-u');
      await until('M8 to be submitted', m8.msgId, 'submitted');
      const got = modelGot(log);
      expect(got).toHaveLength(1);
      expect(got[0]).toContain(`msg ${m8.msgId}`);
      expect(got[0]).not.toContain(m7.msgId);
    });
  });
});
