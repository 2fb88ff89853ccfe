import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BridgeError, ErrorCode } from '../../src/errors.js';
import { type PaneInjector, PaneStatus } from '../../src/panes/paneInjector.js';
import { createTmuxInjector, tmuxPaneExists } from '../../src/panes/tmuxInjector.js';
import { typeAndSubmit } from '../../src/panes/typeAndSubmit.js';
import { startTmuxServer, type TmuxTestServer } from '../support/tmux.js';

let server: TmuxTestServer;
let dir: string;

beforeAll(async () => {
  server = await startTmuxServer();
  dir = await mkdtemp(join(tmpdir(), 'bridge-tmux-int-'));
});

afterAll(async () => {
  await server?.kill();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** A pane whose typed lines end up in a file: the tty's line discipline, as for a REPL. */
async function catPane(): Promise<{ paneId: string; file: string }> {
  const file = join(dir, `${randomUUID()}.txt`);
  await writeFile(file, '');
  const paneId = await server.newPane(`exec cat >> '${file}'`);
  return { paneId, file };
}

/** Types and submits `text` (its own marker), verified; rejects unless the pane took it. */
async function deliver(injector: PaneInjector, text: string): Promise<void> {
  const outcome = await typeAndSubmit(injector, { text, marker: text });
  if (outcome.kind !== 'submitted') throw new Error(`not submitted: ${JSON.stringify(outcome)}`);
}

async function readText(file: string): Promise<string> {
  return readFile(file, 'utf8');
}

async function waitFor<T>(what: string, probe: () => Promise<T>, done: (value: T) => boolean): Promise<T> {
  const deadline = Date.now() + 10_000;
  let last = await probe();
  while (!done(last)) {
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}; last seen: ${JSON.stringify(last)}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
    last = await probe();
  }
  return last;
}

/** Waits until the file holds `count` complete lines and returns them. */
async function linesOf(file: string, count: number): Promise<string[]> {
  const text = await waitFor(
    `${count} lines in ${file}`,
    () => readText(file),
    (t) => t.split('\n').length - 1 >= count,
  );
  return text.split('\n').slice(0, -1);
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a rejection');
    },
    (err: unknown) => err,
  );
}

/**
 * These drive a program the moment it started, to test typing itself: the wait for a new
 * program to settle (delivery.programSettleMs) is tested in sharedPane.unit and sharedPane.e2e.
 */
const settled = { programSettleMs: 0 };

describe('tmux injector against real tmux panes', () => {
  it('types one message as exactly one line', async () => {
    const { paneId, file } = await catPane();
    const injector = createTmuxInjector({ target: paneId, socket: server.socket, timing: settled });
    await deliver(injector, 'hello from bridge');
    // The sentinel shows nothing else (no empty line, no second Enter) arrived in between.
    await deliver(injector, 'sentinel');
    expect(await linesOf(file, 2)).toEqual(['hello from bridge', 'sentinel']);
    expect(await readText(file)).toBe('hello from bridge\nsentinel\n');
    await injector.close();
  });

  it('delivers multi-line text to a line-reading program as one line (one message, one input), trailing newline dropped', async () => {
    const { paneId, file } = await catPane();
    const injector = createTmuxInjector({ target: paneId, socket: server.socket, timing: settled });
    await deliver(injector, 'first\r\nsecond\nthird\n\n');
    await deliver(injector, 'sentinel');
    expect(await linesOf(file, 2)).toEqual(['first ⏎ second ⏎ third', 'sentinel']);
    await injector.close();
  });

  it('delivers 200 messages one after another in order, each exactly once and verified', async () => {
    const { paneId, file } = await catPane();
    const injector = createTmuxInjector({ target: paneId, socket: server.socket, timing: settled });
    const sent = Array.from({ length: 200 }, (_, i) => `msg ${String(i).padStart(3, '0')} ${randomUUID()}`);

    const started = performance.now();
    for (const text of sent) await deliver(injector, text);
    const elapsed = performance.now() - started;

    expect(await linesOf(file, 200)).toEqual(sent);
    console.info(
      `tmux injector: 200 verified submissions in ${elapsed.toFixed(0)} ms, ${(elapsed / 200).toFixed(2)} ms each`,
    );
    await injector.close();
  });

  it('types quotes, $(...), ;, backslashes, tmux formats and unicode literally, running nothing', async () => {
    const { paneId, file } = await catPane();
    const pwned = join(dir, `pwned-${randomUUID()}`);
    const text =
      `it's "quoted" $(touch ${pwned}) \`touch ${pwned}\` ; touch ${pwned} && echo no | tee ${pwned} ` +
      `\\ back\\\\slash \\; \\n %% %s #{pane_id} #(touch ${pwned}) ~ * ? [a] {b} <c> ! & ` +
      `tab\there ünïcødé 日本語 🚀 -t %0`;
    const injector = createTmuxInjector({ target: paneId, socket: server.socket, timing: settled });
    await deliver(injector, text);
    await deliver(injector, '-sentinel starting with a dash');
    expect(await linesOf(file, 2)).toEqual([text, '-sentinel starting with a dash']);
    expect(existsSync(pwned)).toBe(false);
    await injector.close();
  });

  it('neutralises control characters so a message cannot interrupt or end the program', async () => {
    const { paneId, file } = await catPane();
    const injector = createTmuxInjector({ target: paneId, socket: server.socket, timing: settled });
    // Raw, ^C would kill cat, ^D would end its input and ^U would erase the line.
    await deliver(injector, 'a\u0003b\u0004c\u0015d\u001b[201~e\u009bf');
    // Bidi overrides, zero-width characters and line separators would change what is read.
    await deliver(injector, 'g\u202Eh\u200Bi\u2028j\u2029k\uFEFFl');
    await deliver(injector, 'still alive');
    expect(await linesOf(file, 3)).toEqual([
      'a\uFFFDb\uFFFDc\uFFFDd\uFFFD[201~e\uFFFDf',
      'g\uFFFDh\uFFFDi\uFFFDj\uFFFDk\uFFFDl',
      'still alive',
    ]);
    await injector.close();
  });

  it('pastes as one bracketed paste, then Enter, when the application asked for it', async () => {
    const file = join(dir, `${randomUUID()}.raw`);
    const script = join(dir, `${randomUUID()}.cjs`);
    // A minimal agent-like TUI: raw mode, bracketed paste on, records every byte it reads.
    await writeFile(
      script,
      [
        "const fs = require('node:fs');",
        'const out = process.argv[2];',
        "fs.writeFileSync(out, '');",
        'process.stdin.setRawMode(true);',
        // It shows its input as an agent's input area does: pasted line breaks as spaces, and
        // its own Enter as a new line.
        "process.stdin.on('data', (chunk) => {",
        '  fs.appendFileSync(out, chunk);',
        "  const s = chunk.toString('utf8')",
        "    .replace(/\\x1b\\[200~([\\s\\S]*?)\\x1b\\[201~/g, (_, p) => p.replace(/\\r/g, ' '))",
        "    .replace(/\\r/g, '\\r\\n');",
        '  process.stdout.write(s);',
        '});',
        "process.stdout.write('\\x1b[?2004hREADY\\n');",
      ].join('\n'),
    );
    const paneId = await server.newPane(`exec node '${script}' '${file}'`);
    // Output is processed in order, so once READY shows, tmux has seen the mode switch.
    await waitFor(
      'the reader to start',
      () => server.capture(paneId),
      (t) => t.includes('READY'),
    );

    const injector = createTmuxInjector({ target: paneId, socket: server.socket, timing: settled });
    await deliver(injector, 'line one\nline two');
    await deliver(injector, 'x\u001b[201~y');
    const expected =
      // A program the agent table does not know reads lines: the message is folded into one.
      '\u001b[200~line one ⏎ line two\u001b[201~\r' + '\u001b[200~x\uFFFD[201~y\u001b[201~\r'; // an embedded paste end cannot escape the paste
    expect(
      await waitFor(
        'both pastes',
        () => readText(file),
        (t) => t.length >= expected.length,
      ),
    ).toBe(expected);
    await injector.close();
  });

  it('submits even when the pane is in copy mode', async () => {
    const { paneId, file } = await catPane();
    await server.run('copy-mode', '-t', paneId);
    expect((await server.run('display-message', '-p', '-t', paneId, '#{pane_in_mode}')).trim()).toBe('1');
    const injector = createTmuxInjector({ target: paneId, socket: server.socket, timing: settled });
    await deliver(injector, 'typed while scrolling');
    await deliver(injector, 'sentinel');
    expect(await linesOf(file, 2)).toEqual(['typed while scrolling', 'sentinel']);
    await injector.close();
  });

  it('accepts a session:window.pane target', async () => {
    const { paneId, file } = await catPane();
    const target = (
      await server.run('display-message', '-p', '-t', paneId, '#{session_name}:#{window_index}.#{pane_index}')
    ).trim();
    expect(target).toMatch(/^bridge-test:\d+\.0$/);
    expect(await tmuxPaneExists(target, server.socket)).toBe(true);
    const injector = createTmuxInjector({ target, socket: server.socket, timing: settled });
    await deliver(injector, 'by name');
    expect(await linesOf(file, 1)).toEqual(['by name']);
    await injector.close();
  });

  it('finds a typed marker in the pane and not an untyped one', async () => {
    const { paneId } = await catPane();
    const injector = createTmuxInjector({ target: paneId, socket: server.socket, timing: settled });
    const typed = `bridge-msg-${randomUUID()}`;
    const untyped = `bridge-msg-${randomUUID()}`;
    expect(await injector.contains(typed)).toBe(false);
    await deliver(injector, `[from alice, msg ${typed}] please rebase`);
    // The echo reaches tmux's screen asynchronously, after the paste returns.
    await waitFor(
      'the echo of the typed marker',
      () => injector.contains(typed),
      (found) => found,
    );
    expect(await injector.contains(untyped)).toBe(false);
    await deliver(injector, 'a later line');
    await waitFor(
      'the echo of the later line',
      () => injector.contains('a later line'),
      (found) => found,
    );
    // Only the last line is searched when asked for one line.
    expect(await injector.contains(typed, 1)).toBe(false);
    expect(await injector.contains(typed, 10)).toBe(true);
    await injector.close();
  });

  it('reports a missing pane as PANE_UNAVAILABLE with a message naming it and what to do', async () => {
    const injector = createTmuxInjector({ target: '%999', socket: server.socket, timing: settled });
    const err = await rejection(deliver(injector, 'hello'));
    expect(err).toBeInstanceOf(BridgeError);
    expect(err).toMatchObject({ code: ErrorCode.paneUnavailable });
    const message = (err as BridgeError).message;
    expect(message).toContain('tmux pane %999 not found');
    expect(message).toContain(`tmux -S ${server.socket} list-panes -a`);
    expect(message).toContain("can't find pane: %999"); // tmux's own words
    expect(await rejection(injector.contains('x'))).toMatchObject({ code: ErrorCode.paneUnavailable });
    expect(await tmuxPaneExists('%999', server.socket)).toBe(false);
    expect(await tmuxPaneExists('no-such-session:0.0', server.socket)).toBe(false);
    await injector.close();
  });

  it('leaves no paste buffers behind, after successes and failures', async () => {
    const { paneId, file } = await catPane();
    const ok = createTmuxInjector({ target: paneId, socket: server.socket, timing: settled });
    const missing = createTmuxInjector({ target: '%998', socket: server.socket, timing: settled });
    await deliver(ok, 'one');
    await rejection(deliver(missing, 'two'));
    await deliver(ok, 'three');
    expect(await linesOf(file, 2)).toEqual(['one', 'three']);
    expect(await server.run('list-buffers', '-F', '#{buffer_name}')).toBe('');
  });

  it('reports a killed tmux server as PANE_UNAVAILABLE naming the server', async () => {
    const doomed = await startTmuxServer();
    try {
      const paneId = await doomed.newPane('exec cat > /dev/null');
      expect(await tmuxPaneExists(paneId, doomed.socket)).toBe(true);
      const injector = createTmuxInjector({ target: paneId, socket: doomed.socket, timing: settled });
      await deliver(injector, 'before the crash');
      await doomed.kill();

      const err = await rejection(deliver(injector, 'after the crash'));
      expect(err).toBeInstanceOf(BridgeError);
      expect(err).toMatchObject({ code: ErrorCode.paneUnavailable });
      const message = (err as BridgeError).message;
      expect(message).toMatch(new RegExp(`cannot (read|type into) tmux pane ${paneId}`));
      expect(message).toContain(`the tmux server at ${doomed.socket} is not running`);
      expect(message).toContain('start tmux');
      expect(await tmuxPaneExists(paneId, doomed.socket)).toBe(false);
      // The queue is not wedged by the failure: the next call fails the same clear way.
      expect(await rejection(injector.contains('x'))).toMatchObject({ code: ErrorCode.paneUnavailable });
    } finally {
      await doomed.kill();
    }
  });

  it('reports a missing tmux binary as PANE_UNAVAILABLE saying to install it', async () => {
    const injector = createTmuxInjector({
      target: '%0',
      socket: server.socket,
      tmuxPath: '/nonexistent/tmux',
    });
    const err = await rejection(deliver(injector, 'hello'));
    expect(err).toBeInstanceOf(BridgeError);
    expect(err).toMatchObject({ code: ErrorCode.paneUnavailable });
    expect((err as BridgeError).message).toMatch(/could not run "\/nonexistent\/tmux": install tmux/);
  });

  it('rejects targets that tmux would parse as a command separator, and empty text', async () => {
    expect(() => createTmuxInjector({ target: '%1;', socket: server.socket, timing: settled })).toThrow(
      BridgeError,
    );
    expect(() => createTmuxInjector({ target: '', socket: server.socket, timing: settled })).toThrow(
      /not a tmux pane target/,
    );
    await expect(tmuxPaneExists('%1\n', server.socket)).rejects.toMatchObject({ code: ErrorCode.badRequest });
    const { paneId } = await catPane();
    const injector = createTmuxInjector({ target: paneId, socket: server.socket, timing: settled });
    expect(await rejection(deliver(injector, '\n\n'))).toMatchObject({ code: ErrorCode.badRequest });
  });

  it('reports idle once, and refuses injects after close', async () => {
    const { paneId, file } = await catPane();
    const injector = createTmuxInjector({ target: paneId, socket: server.socket, timing: settled });
    const seen: PaneStatus[] = [];
    injector.watchStatus((status) => seen.push(status));
    const unsubscribed: PaneStatus[] = [];
    injector.watchStatus((status) => unsubscribed.push(status))();
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(seen).toEqual([PaneStatus.idle]);
    expect(unsubscribed).toEqual([]);

    const message = { text: 'queued before close', marker: 'queued before close' };
    const pending = injector.type(message);
    await injector.close(); // waits for the queued call
    // A line reader gets the paste with its Enter, read back: submitted in the one call.
    expect(await pending).toMatchObject({ kind: 'submitted' });
    expect(await linesOf(file, 1)).toEqual(['queued before close']);
    expect(await rejection(injector.submit(message))).toMatchObject({ code: ErrorCode.shuttingDown });
    expect(await rejection(deliver(injector, 'too late'))).toMatchObject({ code: ErrorCode.shuttingDown });
  });
});
