import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChannelError, ErrorCode, MessageError } from '../../src/errors.js';
import { PaneStatus } from '../../src/inject/paneInjector.js';
import { createTmuxInjector, tmuxPaneExists } from '../../src/inject/tmuxInjector.js';
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

describe('tmux injector against real tmux panes', () => {
  it('types one message as exactly one line', async () => {
    const { paneId, file } = await catPane();
    const injector = createTmuxInjector({ target: paneId, socket: server.socket });
    await injector.type({ text: 'hello from bridge', marker: '' });
    // The sentinel shows nothing else (no empty line, no second Enter) arrived in between.
    await injector.type({ text: 'sentinel', marker: '' });
    expect(await linesOf(file, 2)).toEqual(['hello from bridge', 'sentinel']);
    expect(await readText(file)).toBe('hello from bridge\nsentinel\n');
    await injector.close();
  });

  it('delivers multi-line text as plain lines to a line-reading program, trailing newline dropped', async () => {
    const { paneId, file } = await catPane();
    const injector = createTmuxInjector({ target: paneId, socket: server.socket });
    await injector.type({ text: 'first\r\nsecond\nthird\n\n', marker: '' });
    await injector.type({ text: 'sentinel', marker: '' });
    expect(await linesOf(file, 4)).toEqual(['first', 'second', 'third', 'sentinel']);
    await injector.close();
  });

  it('delivers 200 injects fired without waiting in call order, each exactly once', async () => {
    const { paneId, file } = await catPane();
    const injector = createTmuxInjector({ target: paneId, socket: server.socket });
    const sent = Array.from({ length: 200 }, (_, i) => `msg ${String(i).padStart(3, '0')} ${randomUUID()}`);

    const started = performance.now();
    await Promise.all(sent.map((text) => injector.type({ text: text, marker: '' })));
    const elapsed = performance.now() - started;

    expect(await linesOf(file, 200)).toEqual(sent);
    console.info(
      `tmux injector: 200 injects in ${elapsed.toFixed(0)} ms, ${(elapsed / 200).toFixed(2)} ms per inject`,
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
    const injector = createTmuxInjector({ target: paneId, socket: server.socket });
    await injector.type({ text: text, marker: '' });
    await injector.type({ text: '-sentinel starting with a dash', marker: '' });
    expect(await linesOf(file, 2)).toEqual([text, '-sentinel starting with a dash']);
    expect(existsSync(pwned)).toBe(false);
    await injector.close();
  });

  it('neutralises control characters so a message cannot interrupt or end the program', async () => {
    const { paneId, file } = await catPane();
    const injector = createTmuxInjector({ target: paneId, socket: server.socket });
    // Raw, ^C would kill cat, ^D would end its input and ^U would erase the line.
    await injector.type({ text: 'a\u0003b\u0004c\u0015d\u001b[201~e\u009bf', marker: '' });
    await injector.type({ text: 'still alive', marker: '' });
    expect(await linesOf(file, 2)).toEqual(['a\uFFFDb\uFFFDc\uFFFDd\uFFFD[201~e\uFFFDf', 'still alive']);
    await injector.close();
  });

  it('pastes multi-line text as one bracketed paste, then Enter, when the application asked for it', async () => {
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
        "process.stdin.on('data', (chunk) => fs.appendFileSync(out, chunk));",
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

    const injector = createTmuxInjector({ target: paneId, socket: server.socket });
    await injector.type({ text: 'line one\nline two', marker: '' });
    await injector.type({ text: 'x\u001b[201~y', marker: '' });
    const expected =
      '\u001b[200~line one\rline two\u001b[201~\r' + // one paste; tmux pastes LF as CR
      '\u001b[200~x\uFFFD[201~y\u001b[201~\r'; // an embedded paste end cannot escape the paste
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
    const injector = createTmuxInjector({ target: paneId, socket: server.socket });
    await injector.type({ text: 'typed while scrolling', marker: '' });
    await injector.type({ text: 'sentinel', marker: '' });
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
    const injector = createTmuxInjector({ target, socket: server.socket });
    await injector.type({ text: 'by name', marker: '' });
    expect(await linesOf(file, 1)).toEqual(['by name']);
    await injector.close();
  });

  it('finds a typed marker in the pane and not an untyped one', async () => {
    const { paneId } = await catPane();
    const injector = createTmuxInjector({ target: paneId, socket: server.socket });
    const typed = `bridge-msg-${randomUUID()}`;
    const untyped = `bridge-msg-${randomUUID()}`;
    expect(await injector.contains(typed)).toBe(false);
    await injector.type({ text: `[from alice, msg ${typed}] please rebase`, marker: '' });
    // The echo reaches tmux's screen asynchronously, after the paste returns.
    await waitFor(
      'the echo of the typed marker',
      () => injector.contains(typed),
      (found) => found,
    );
    expect(await injector.contains(untyped)).toBe(false);
    await injector.type({ text: 'a later line', marker: '' });
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
    const injector = createTmuxInjector({ target: '%999', socket: server.socket });
    const err = await rejection(injector.type({ text: 'hello', marker: '' }));
    expect(err).toBeInstanceOf(ChannelError);
    expect(err).toMatchObject({ code: ErrorCode.paneUnavailable });
    const message = (err as ChannelError).message;
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
    const ok = createTmuxInjector({ target: paneId, socket: server.socket });
    const missing = createTmuxInjector({ target: '%998', socket: server.socket });
    await ok.type({ text: 'one', marker: '' });
    await rejection(missing.type({ text: 'two', marker: '' }));
    await ok.type({ text: 'three', marker: '' });
    expect(await linesOf(file, 2)).toEqual(['one', 'three']);
    expect(await server.run('list-buffers', '-F', '#{buffer_name}')).toBe('');
  });

  it('reports a killed tmux server as PANE_UNAVAILABLE naming the server', async () => {
    const doomed = await startTmuxServer();
    try {
      const paneId = await doomed.newPane('exec cat > /dev/null');
      expect(await tmuxPaneExists(paneId, doomed.socket)).toBe(true);
      const injector = createTmuxInjector({ target: paneId, socket: doomed.socket });
      await injector.type({ text: 'before the crash', marker: '' });
      await doomed.kill();

      const err = await rejection(injector.type({ text: 'after the crash', marker: '' }));
      expect(err).toBeInstanceOf(ChannelError);
      expect(err).toMatchObject({ code: ErrorCode.paneUnavailable });
      const message = (err as ChannelError).message;
      expect(message).toContain(`cannot type into tmux pane ${paneId}`);
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
    const err = await rejection(injector.type({ text: 'hello', marker: '' }));
    expect(err).toBeInstanceOf(ChannelError);
    expect(err).toMatchObject({ code: ErrorCode.paneUnavailable });
    expect((err as ChannelError).message).toMatch(/could not run "\/nonexistent\/tmux": install tmux/);
  });

  it('rejects targets that tmux would parse as a command separator, and empty text', async () => {
    expect(() => createTmuxInjector({ target: '%1;', socket: server.socket })).toThrow(MessageError);
    expect(() => createTmuxInjector({ target: '', socket: server.socket })).toThrow(/not a tmux pane target/);
    await expect(tmuxPaneExists('%1\n', server.socket)).rejects.toMatchObject({ code: ErrorCode.badRequest });
    const { paneId } = await catPane();
    const injector = createTmuxInjector({ target: paneId, socket: server.socket });
    expect(await rejection(injector.type({ text: '\n\n', marker: '' }))).toMatchObject({
      code: ErrorCode.badRequest,
    });
  });

  it('reports idle once, and refuses injects after close', async () => {
    const { paneId, file } = await catPane();
    const injector = createTmuxInjector({ target: paneId, socket: server.socket });
    const seen: PaneStatus[] = [];
    injector.watchStatus((status) => seen.push(status));
    const unsubscribed: PaneStatus[] = [];
    injector.watchStatus((status) => unsubscribed.push(status))();
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(seen).toEqual([PaneStatus.idle]);
    expect(unsubscribed).toEqual([]);

    const pending = injector.type({ text: 'queued before close', marker: '' });
    await injector.close(); // waits for the queued inject
    await pending;
    expect(await linesOf(file, 1)).toEqual(['queued before close']);
    expect(await rejection(injector.type({ text: 'too late', marker: '' }))).toMatchObject({
      code: ErrorCode.shuttingDown,
    });
  });
});
