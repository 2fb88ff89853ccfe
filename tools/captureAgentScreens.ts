/**
 * Regenerates test/fixtures/screens/: what `tmux capture-pane -p` shows of real agent TUIs
 * (Claude Code, Codex, Gemini CLI from devDependencies) in each state a gateway may find them
 * in, plus a plain shell and `cat`, with the cursor position of each in index.json and README.md.
 *
 *   npx tsx tools/captureAgentScreens.ts [claude,codex,gemini,shell]
 *
 * Each group of states starts from a fresh launch (test/support/agentTuis.ts) against a fake
 * model API (test/support/fakeModelApi.ts), except Claude's first group, which has no API: the
 * offline case, where a submitted prompt is answered "Not logged in". Agents run in parallel;
 * the working directory is a fixed path per agent so the screens do not change between runs.
 */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  AgentTui,
  type AgentTuiSession,
  type Cursor,
  cursorOf,
  isAtPrompt,
  launchAgentTui,
  runTmux,
} from '../test/support/agentTuis.js';
import { startFakeModelApi } from '../test/support/fakeModelApi.js';

const outDir = join(import.meta.dirname, '..', 'test', 'fixtures', 'screens');

const shortText = 'hello from bridge';
const multiLineText = 'first line of the message\nsecond line\nthird line';
/** 4096 characters in 84 lines: 83 lines of 48 characters and a newline, then 29 more. */
const bigText = [
  ...Array.from({ length: 83 }, (_, i) => `line ${String(i + 1).padStart(2, '0')} `.padEnd(48, 'x')),
  'last line '.padEnd(29, 'y'),
].join('\n');

interface Shot {
  readonly file: string;
  readonly agent: string;
  readonly state: string;
  readonly cursor: Cursor;
  readonly how: string;
}

/** Landmarks that tell the states apart, per agent (see README.md). */
const landmarks = {
  claude: {
    busy: /esc to interrupt/,
    queued: /Press up to edit queued messages/,
    dialog: /Do you want to proceed\?/,
    answered: /⎿\s+Not logged in · Please run \/login/,
  },
  codex: {
    busy: /esc to interrupt/,
    queued: /Queued follow-up inputs/,
    steered: /Messages to be submitted after next tool call/,
    dialog: /Would you like to run the following command\?/,
  },
  gemini: {
    busy: /esc to cancel/,
    queued: /Queued \(press ↑ to edit\):/,
    dialog: /Allow execution of \[Shell\]\?/,
  },
} as const;

const shots: Shot[] = [];

async function main(): Promise<void> {
  const only = new Set((process.argv[2] ?? 'claude,codex,gemini,shell').split(','));
  await mkdir(outDir, { recursive: true });
  const dir = await mkdtemp(join(tmpdir(), 'bridge-screens-'));
  const socket = join(dir, 'tmux.sock');
  // In the agent's fixed cwd, so the path in the dialog is the same on every run.
  const marker = (agent: string): string => join(tmpdir(), 'bridge-screens', agent, 'PWNED');
  const api = await startFakeModelApi({
    command: (prompt) => {
      const match = /run the command for (\w+)/.exec(prompt);
      return match ? `touch ${marker(match[1] ?? 'x')}` : undefined;
    },
    replyDelayMs: (prompt) => (prompt.includes('slow') ? 120_000 : 0),
  });
  try {
    const jobs: Promise<void>[] = [];
    for (const agent of Object.values(AgentTui))
      if (only.has(agent)) jobs.push(captureAgent(agent, socket, api.url, marker(agent)));
    if (only.has('shell')) jobs.push(captureShell(socket, dir));
    const results = await Promise.allSettled(jobs);
    for (const result of results) if (result.status === 'rejected') console.error(result.reason);
    await writeIndex();
    if (results.some((r) => r.status === 'rejected')) process.exitCode = 1;
  } finally {
    await api.close();
    // Every session was stopped; this is for a launch that failed half-way.
    await runTmux(socket, ['kill-server']).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
    await rm(join(tmpdir(), 'bridge-screens'), { recursive: true, force: true });
  }
}

/** Saves the visible screen of `target` as `<name>.txt` and notes its cursor. */
async function save(socket: string, target: string, name: string, agent: string, state: string, how: string) {
  const screen = await runTmux(socket, ['capture-pane', '-p', '-t', target]);
  const cursor = await cursorOf(socket, target);
  const file = `${name}.txt`;
  await writeFile(join(outDir, file), screen);
  shots.push({ file, agent, state, cursor, how });
  console.log(`${file}: cursor ${cursor.x},${cursor.y}${cursor.visible ? '' : ' (hidden)'}`);
}

async function captureAgent(agent: AgentTui, socket: string, apiUrl: string, marker: string): Promise<void> {
  const cwd = join(tmpdir(), 'bridge-screens', agent);
  const marks = landmarks[agent];
  const launch = async (withApi: boolean, env?: Record<string, string>): Promise<AgentTuiSession> => {
    await rm(cwd, { recursive: true, force: true });
    await mkdir(cwd, { recursive: true });
    return launchAgentTui(agent, { socket, cwd, ...(withApi ? { apiUrl } : {}), ...(env ? { env } : {}) });
  };
  const shoot = (s: AgentTuiSession, state: string, how: string) =>
    save(socket, s.target, `${agent}-${state}`, agent, state, how);
  const settle = (s: AgentTuiSession) => waitForStill(s);
  const submit = async (s: AgentTuiSession, text: string) => {
    await s.paste(text);
    await s.waitForScreen(
      `the text in the ${agent} input`,
      (x) => x.includes(text.split('\n')[0] ?? '') || undefined,
    );
    await sleep(150);
    await s.sendKeys('Enter');
  };
  // Claude offline has no API; the other two answer from the fake.
  const withApi = agent !== AgentTui.claude;
  const apiNote = withApi ? ', fake model API' : ', no API key (offline)';

  // 1. Empty prompt, short text typed, submitted.
  let s = await launch(withApi);
  console.log(`${agent}: launched in ${s.launchMs} ms`);
  try {
    await shoot(s, 'prompt-empty', `fresh launch${apiNote}; prompt on screen and still`);
    await s.paste(shortText);
    await s.waitForScreen('the short text', (x) => x.includes(shortText) || undefined);
    await settle(s);
    await shoot(
      s,
      'typed-short',
      `prompt-empty, then \`${shortText}\` pasted (load-buffer + paste-buffer -p), not submitted`,
    );
    await sleep(150);
    await s.sendKeys('Enter');
    await s.waitForScreen('the answer', (x) =>
      (agent === AgentTui.claude ? landmarks.claude.answered.test(x) : x.includes('Done.')) &&
      isAtPrompt(agent, x, cwd)
        ? true
        : undefined,
    );
    await settle(s);
    const answer = agent === AgentTui.claude ? 'Claude answers "Not logged in"' : 'the fake answers "Done."';
    await shoot(
      s,
      'submitted',
      `typed-short, then Enter as its own send-keys 150 ms later; ${answer}; input empty again`,
    );
  } finally {
    await s.stop();
  }

  // 2. Multi-line text typed.
  s = await launch(withApi);
  try {
    await s.paste(multiLineText);
    await s.waitForScreen('the multi-line text', (x) => x.includes('third line') || undefined);
    await settle(s);
    await shoot(
      s,
      'typed-multiline',
      'fresh launch, then three lines pasted as one bracketed paste, not submitted',
    );
  } finally {
    await s.stop();
  }

  // 3. A 4 KB paste.
  s = await launch(withApi);
  try {
    await s.paste(bigText);
    await s.waitForScreen('the paste placeholder', (x) => /\[Pasted/i.test(x) || undefined);
    await settle(s);
    await shoot(
      s,
      'paste-4k',
      'fresh launch, then 4096 characters in 84 lines pasted at once, not submitted',
    );
  } finally {
    await s.stop();
  }

  // 4. Busy, text typed while busy, queued (Codex: steered with Enter, queued with Tab).
  s = await launch(true);
  try {
    await submit(s, 'a slow question');
    await s.waitForScreen('busy', (x) => marks.busy.test(x) || undefined);
    await sleep(1_000);
    await shoot(s, 'busy', 'fake API holds its answer; a prompt submitted 1 s before');
    await s.paste('second message');
    await s.waitForScreen('the second message', (x) => x.includes('second message') || undefined);
    await sleep(300);
    await shoot(s, 'busy-typed', 'busy, then `second message` pasted, not submitted');
    await s.sendKeys('Enter');
    if (agent === AgentTui.codex) {
      await s.waitForScreen('steered', (x) => landmarks.codex.steered.test(x) || undefined);
      await sleep(300);
      await shoot(s, 'steered', 'busy-typed, then Enter: Codex adds it to the running turn');
      await s.paste('third message');
      await s.waitForScreen('the third message', (x) => x.includes('third message') || undefined);
      await sleep(150);
      await s.sendKeys('Tab');
    }
    await s.waitForScreen('queued', (x) => marks.queued.test(x) || undefined);
    await sleep(300);
    await shoot(
      s,
      'queued',
      agent === AgentTui.codex
        ? 'steered, then `third message` pasted and Tab: queued for after the turn'
        : 'busy-typed, then Enter: queued until the turn ends',
    );
  } finally {
    await s.stop();
  }

  // 5. The permission dialog; text pasted into it; approved with Enter.
  s = await launch(true);
  try {
    await submit(s, `please run the command for ${agent}`);
    await s.waitForScreen('the permission dialog', (x) => marks.dialog.test(x) || undefined);
    await settle(s);
    await shoot(
      s,
      'dialog',
      `fake API answers with a shell tool call (\`touch /tmp/bridge-screens/${agent}/PWNED\`); not run yet`,
    );
    if (existsSync(marker)) throw new Error(`${agent} ran the command before it was approved`);
    await s.paste(shortText);
    await sleep(1_500);
    await shoot(s, 'dialog-pasted', `dialog, then \`${shortText}\` pasted: the dialog drops it`);
    if (existsSync(marker)) throw new Error(`${agent} ran the command on a paste`);
    await s.sendKeys('Enter');
    await s.waitForScreen(
      'the end of the turn',
      (x) => (x.includes('Done.') && isAtPrompt(agent, x, cwd)) || undefined,
    );
    await settle(s);
    if (!existsSync(marker)) throw new Error(`${agent} did not run the approved command`);
    await shoot(
      s,
      'approved',
      'dialog-pasted, then Enter: the default (yes) runs the command; the fake ends the turn',
    );
  } finally {
    await s.stop();
  }

  // 6. Without COLORTERM=truecolor (a 256-colour terminal): only Gemini draws differently.
  if (agent === AgentTui.gemini) {
    s = await launch(withApi, { COLORTERM: '' });
    try {
      await shoot(s, 'prompt-empty-256color', `fresh launch${apiNote}, COLORTERM unset (256 colours only)`);
    } finally {
      await s.stop();
    }
  }
  await rm(cwd, { recursive: true, force: true });
}

async function captureShell(socket: string, dir: string): Promise<void> {
  const run = (...args: string[]) => runTmux(socket, args);
  const pane = async (command: string[]): Promise<string> => {
    const out = await run(
      '-f',
      '/dev/null',
      'new-session',
      '-d',
      '-P',
      '-F',
      '#{pane_id}',
      '-x',
      '120',
      '-y',
      '40',
      '-c',
      dir,
      'env',
      '-i',
      `HOME=${dir}`,
      'PATH=/usr/bin:/bin',
      'TERM=xterm-256color',
      'LANG=C.UTF-8',
      ...command,
    );
    return out.trim();
  };
  const screenOf = (target: string) => run('capture-pane', '-p', '-t', target);
  const until = async (target: string, what: string, test: (screen: string) => boolean) => {
    const deadline = Date.now() + 10_000;
    while (!test(await screenOf(target))) {
      if (Date.now() > deadline)
        throw new Error(`timed out waiting for ${what}; screen:\n${(await screenOf(target)).trimEnd()}`);
      await sleep(50);
    }
  };
  const paste = async (target: string, text: string) => {
    await runTmux(socket, ['load-buffer', '-b', 'screens', '-'], text);
    await run('paste-buffer', '-p', '-d', '-b', 'screens', '-t', target);
  };

  // A prompt of the usual shape, the same for root and for any bash version.
  const bash = await pane(['PS1=worker@host:~/project$ ', 'bash', '--norc', '--noprofile']);
  await until(bash, 'the bash prompt', (x) => x.includes('worker@host:~/project$'));
  await save(
    socket,
    bash,
    'bash-prompt',
    'bash',
    'prompt',
    "`env -i PS1='worker@host:~/project$ ' bash --norc --noprofile`",
  );

  const cat = await pane(['cat']);
  await sleep(300);
  await paste(cat, shortText);
  await until(cat, 'the typed text', (x) => x.includes(shortText));
  await save(socket, cat, 'cat-typed', 'cat', 'typed', `\`cat\`, then \`${shortText}\` pasted, no Enter`);
  await run('send-keys', '-t', cat, 'Enter');
  await until(cat, 'the echoed line', (x) => x.split(shortText).length > 2);
  await save(
    socket,
    cat,
    'cat-submitted',
    'cat',
    'submitted',
    'cat-typed, then Enter: the tty echoes the line, cat prints it',
  );
}

/** Waits until the screen has not changed for 500 ms (at most 5 s: spinners never settle). */
async function waitForStill(s: AgentTuiSession): Promise<void> {
  const deadline = Date.now() + 5_000;
  let last = await s.capture();
  let since = Date.now();
  while (Date.now() < deadline && Date.now() - since < 500) {
    await sleep(100);
    const screen = await s.capture();
    if (screen !== last) {
      last = screen;
      since = Date.now();
    }
  }
}

async function writeIndex(): Promise<void> {
  const indexPath = join(outDir, 'index.json');
  // A partial run (one agent) keeps the other agents' entries.
  const previous = existsSync(indexPath) ? (JSON.parse(await readFile(indexPath, 'utf8')) as Shot[]) : [];
  const fresh = new Set(shots.map((shot) => shot.file));
  const all = [...previous.filter((shot) => !fresh.has(shot.file)), ...shots].sort((a, b) =>
    a.file.localeCompare(b.file),
  );
  await writeFile(indexPath, `${JSON.stringify(all, null, 2)}\n`);

  const readmePath = join(outDir, 'README.md');
  const readme = existsSync(readmePath) ? await readFile(readmePath, 'utf8') : '';
  const begin = '<!-- screens:begin -->';
  const end = '<!-- screens:end -->';
  const rows = [
    ['File', 'State', 'Cursor (x,y)', 'How it was made'],
    ...all.map((shot) => [
      `[${shot.file}](${shot.file})`,
      shot.state,
      `${shot.cursor.x},${shot.cursor.y}${shot.cursor.visible ? '' : ' (hidden)'}`,
      shot.how,
    ]),
  ];
  const table = [begin, ...markdownTable(rows), end].join('\n');
  const at = readme.indexOf(begin);
  const next =
    at >= 0
      ? `${readme.slice(0, at)}${table}${readme.slice(readme.indexOf(end) + end.length)}`
      : `${readme}${table}\n`;
  await writeFile(readmePath, next);
}

/** A Markdown table with padded columns, as Biome formats it. */
function markdownTable(rows: readonly (readonly string[])[]): string[] {
  const widths = (rows[0] ?? []).map((_, column) =>
    Math.max(...rows.map((row) => (row[column] ?? '').length)),
  );
  const line = (cells: readonly string[]) =>
    `| ${cells.map((cell, i) => cell.padEnd(widths[i] ?? 0)).join(' | ')} |`;
  const [head = [], ...body] = rows;
  return [line(head), line(widths.map((width) => '-'.repeat(width))), ...body.map(line)];
}

await main();
