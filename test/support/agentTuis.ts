/**
 * Real agent TUIs (Claude Code, Codex, Gemini CLI, from devDependencies) in tmux panes, offline.
 *
 * `launchAgentTui` starts one agent in a new 120×40 session of a private tmux server, with a
 * fresh HOME whose config already answers every first-run question (onboarding, folder trust,
 * API key approval, update checks), an environment built from nothing (`env -i`, so nothing of
 * the host's leaks in: no API keys, no TMUX), and optionally a fake model API
 * (`startFakeModelApi`). It resolves once the agent's prompt is on screen and the screen has
 * settled. test/fixtures/screens/README.md tells what each agent's screen looks like, state by
 * state.
 *
 * Nothing here presses a key to get past a screen: a first-run screen that appears anyway fails
 * the launch with the screen in the error, so the pre-seeded config can be fixed.
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import {
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  realpath,
  rename,
  rm,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export const AgentTui = {
  claude: 'claude',
  codex: 'codex',
  gemini: 'gemini',
} as const;
export type AgentTui = (typeof AgentTui)[keyof typeof AgentTui];

export interface LaunchAgentTuiOptions {
  /** Socket of the private tmux server (`tmux -S`); started by the launch if not running. */
  readonly socket: string;
  /**
   * Base URL of a fake model API (`startFakeModelApi().url`). Without it Claude gets no API key
   * (it answers every prompt with "Not logged in"), and Codex and Gemini are pointed at a
   * closed local port, so nothing ever leaves the machine.
   */
  readonly apiUrl?: string;
  /** Working directory of the agent; default a fresh temp dir (removed by `stop`). */
  readonly cwd?: string;
  /** tmux session name; default `<agent>-<random>`. */
  readonly session?: string;
  /** More command-line arguments for the agent, e.g. `['--no-daemon']` for Codex. */
  readonly args?: readonly string[];
  /** More environment for the agent (added to the minimal one; wins on a clash). */
  readonly env?: Readonly<Record<string, string>>;
  /** How long to wait for the prompt; default 60 s (slow CI machines). */
  readonly timeoutMs?: number;
  /** Pane size; default 120×40. */
  readonly columns?: number;
  readonly rows?: number;
  /**
   * Runs once the pane exists and the agent's HOME is prepared, before the agent starts (the
   * pane waits): a setup that needs the pane, as `agentbridge connect --as worker --tmux` does.
   */
  readonly beforeStart?: (pane: PaneBeforeStart) => Promise<void>;
}

/** The pane and HOME an agent is about to start in. */
export interface PaneBeforeStart {
  readonly target: string;
  readonly socket: string;
  readonly home: string;
  readonly cwd: string;
}

export interface Cursor {
  readonly x: number;
  readonly y: number;
  readonly visible: boolean;
}

export interface AgentTuiSession {
  readonly agent: AgentTui;
  /** tmux pane id of the agent (`%N`), for `-t`. */
  readonly target: string;
  /** Socket of the tmux server the session runs on. */
  readonly socket: string;
  readonly session: string;
  /** The agent's temporary HOME. */
  readonly home: string;
  /** The agent's working directory (trusted in its config). */
  readonly cwd: string;
  /** Milliseconds from launch until the prompt was on screen and settled. */
  readonly launchMs: number;
  /** The visible screen as plain text (`capture-pane -p`). */
  capture(): Promise<string>;
  /** The cursor position in the pane, 0-based, and whether the agent shows it. */
  cursor(): Promise<Cursor>;
  /** Types `text` as one bracketed paste (`load-buffer` + `paste-buffer -p`); does not submit. */
  paste(text: string): Promise<void>;
  /** Sends tmux key names (`Enter`, `Escape`, `C-c`) as one `send-keys` command. */
  sendKeys(...keys: string[]): Promise<void>;
  /** Polls the screen until `probe` returns something other than undefined; fails with the screen. */
  waitForScreen<T>(what: string, probe: (screen: string) => T | undefined, timeoutMs?: number): Promise<T>;
  /**
   * Kills the session and every process that still runs with this HOME, then removes the temp
   * dirs. Killing the session is not enough: Codex's app-server daemon outlives its TUI, and
   * Gemini CLI (both its node processes) survives the hang-up of its pane. Safe to call twice.
   */
  stop(): Promise<void>;
}

const root = join(import.meta.dirname, '..', '..');
/** The agent TUIs come from test/agents (installed by `npm run test:prepare`), not the project's dependencies. */
const agents = join(root, 'test', 'agents', 'node_modules');
const bin = (name: string): string => join(agents, '.bin', name);
/** Node (for the npm wrappers and Gemini) and the usual system dirs; nothing of the host's PATH. */
const agentPath = [dirname(process.execPath), '/usr/local/bin', '/usr/bin', '/bin'].join(':');
/** Port 9 (discard) is closed on any machine these tests run on: requests fail at once. */
const closedApiUrl = 'http://127.0.0.1:9';
/** The dummy key Claude is given with a fake API; approved in `.claude.json` by its last 20 chars. */
const claudeApiKey = 'sk-ant-api03-bridge-fake-key-0123456789abcdefghij';

/**
 * A HOME (and working directory) prepared for `agent` to reach its prompt offline, and the
 * whole environment and executable to start it with; for a launch of the test's own
 * (`launchAgentTui`) or one a gateway makes from a spawn profile.
 */
export interface AgentHome {
  readonly home: string;
  readonly cwd: string;
  readonly env: Readonly<Record<string, string>>;
  /** The agent's executable (an npm wrapper). */
  readonly bin: string;
  /** Kills every process still running with this HOME, then removes the temp dirs. */
  remove(): Promise<void>;
}

export async function prepareAgentHome(
  agent: AgentTui,
  options: Pick<LaunchAgentTuiOptions, 'apiUrl' | 'cwd' | 'env'> = {},
): Promise<AgentHome> {
  const home = await realpath(await mkdtemp(join(tmpdir(), `bridge-${agent}-home-`)));
  const ownCwd = options.cwd === undefined;
  // Real paths: the agents key their trust settings by the resolved directory.
  const cwd = await realpath(options.cwd ?? (await mkdtemp(join(tmpdir(), `bridge-${agent}-cwd-`))));
  let removed = false;
  const remove = async (): Promise<void> => {
    if (removed) return;
    removed = true;
    await killProcessesWithHome(home);
    if (agent === AgentTui.codex) await keepCodexRelease(home);
    await rm(home, { recursive: true, force: true });
    if (ownCwd) await rm(cwd, { recursive: true, force: true });
  };
  try {
    const env = {
      ...baseEnv(home),
      ...(await prepareHome(agent, home, cwd, options.apiUrl)),
      ...options.env,
    };
    return { home, cwd, env, bin: bin(agent), remove };
  } catch (err) {
    await remove();
    throw err;
  }
}

/** Starts `agent` in a new tmux session and waits until its prompt is on screen. */
export async function launchAgentTui(
  agent: AgentTui,
  options: LaunchAgentTuiOptions,
): Promise<AgentTuiSession> {
  const started = Date.now();
  const timeoutMs = options.timeoutMs ?? 60_000;
  const session = options.session ?? `${agent}-${randomBytes(4).toString('hex')}`;
  const run = (...args: string[]): Promise<string> => runTmux(options.socket, args);
  const prepared = await prepareAgentHome(agent, options);
  const { home, cwd, env } = prepared;
  const go = join(home, '.bridge-test-start');

  let target = '';
  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    // The session may be gone already (the agent exited, or a test killed the server).
    await run('kill-session', '-t', `=${session}`).catch(() => undefined);
    await prepared.remove();
  };

  try {
    const out = await run(
      '-f',
      '/dev/null',
      'new-session',
      '-d',
      '-P',
      '-F',
      '#{pane_id}',
      '-s',
      session,
      '-x',
      String(options.columns ?? 120),
      '-y',
      String(options.rows ?? 40),
      '-c',
      cwd,
      // Separate argv words: tmux execs them without a shell. `env -i` drops tmux's own
      // environment (TMUX, TMUX_PANE, the server's copy of the caller's env).
      'env',
      '-i',
      ...Object.entries(env).map(([key, value]) => `${key}=${value}`),
      // With a setup to run first, a shell waits for its go file, then becomes the agent.
      ...(options.beforeStart
        ? ['/bin/sh', '-c', 'while [ ! -e "$0" ]; do sleep 0.1; done; exec "$@"', go]
        : []),
      prepared.bin,
      ...(options.args ?? []),
    );
    target = out.trim();
    if (!/^%\d+$/.test(target))
      throw new Error(`tmux new-session printed ${JSON.stringify(out)}, not a pane id`);
    // Keep the pane after the agent exits, so a failed launch can show what it printed.
    await run('set-option', '-t', target, '-p', 'remain-on-exit', 'on');
    if (options.beforeStart) {
      await options.beforeStart({ target, socket: options.socket, home, cwd });
      await writeFile(go, '');
    }

    const capture = (): Promise<string> => run('capture-pane', '-p', '-t', target);
    const waitForScreen = <T>(
      what: string,
      probe: (screen: string) => T | undefined,
      ms = timeoutMs,
    ): Promise<T> => pollScreen(capture, what, probe, ms);

    await waitForPrompt(agent, capture, cwd, timeoutMs);
    await waitForStillScreen(capture);

    return {
      agent,
      target,
      socket: options.socket,
      session,
      home,
      cwd,
      launchMs: Date.now() - started,
      capture,
      cursor: () => cursorOf(options.socket, target),
      async paste(text: string) {
        const buffer = `bridge-${session}`;
        await runTmux(options.socket, ['load-buffer', '-b', buffer, '-'], text);
        await run('paste-buffer', '-p', '-d', '-b', buffer, '-t', target);
      },
      async sendKeys(...keys: string[]) {
        await run('send-keys', '-t', target, ...keys);
      },
      waitForScreen,
      stop,
    };
  } catch (err) {
    const screen = target ? await run('capture-pane', '-p', '-t', target).catch(() => '') : '';
    await stop();
    const shown = screen.trim() ? `\n--- screen ---\n${screen.trimEnd()}\n--------------` : '';
    throw new Error(`${agent} did not reach its prompt: ${(err as Error).message}${shown}`, { cause: err });
  }
}

/** Where tmux has the cursor of `target` (`#{cursor_x},#{cursor_y}`) and whether it is shown. */
export async function cursorOf(socket: string, target: string): Promise<Cursor> {
  const out = await runTmux(socket, [
    'display-message',
    '-p',
    '-t',
    target,
    '#{cursor_x},#{cursor_y},#{cursor_flag}',
  ]);
  const [x = 0, y = 0, flag = 0] = out.trim().split(',').map(Number);
  return { x, y, visible: flag === 1 };
}

/** The whole environment of the agent but what `prepareHome` adds. */
function baseEnv(home: string): Record<string, string> {
  return {
    HOME: home,
    PATH: agentPath,
    TERM: 'xterm-256color',
    // A modern terminal: without it Gemini shows a "True color not detected" warning.
    COLORTERM: 'truecolor',
    LANG: 'C.UTF-8',
    SHELL: '/bin/bash',
    // Some tools read USER rather than the password database; a neutral name.
    USER: 'bridge-test',
  };
}

/** Writes the agent's config into `home` and returns the environment it needs. */
async function prepareHome(
  agent: AgentTui,
  home: string,
  cwd: string,
  apiUrl: string | undefined,
): Promise<Record<string, string>> {
  switch (agent) {
    case AgentTui.claude:
      return prepareClaude(home, cwd, apiUrl);
    case AgentTui.codex:
      return prepareCodex(home, cwd, apiUrl);
    case AgentTui.gemini:
      return prepareGemini(home, apiUrl);
  }
}

async function prepareClaude(
  home: string,
  cwd: string,
  apiUrl: string | undefined,
): Promise<Record<string, string>> {
  const { version } = JSON.parse(
    await readFile(join(agents, '@anthropic-ai', 'claude-code', 'package.json'), 'utf8'),
  ) as { version: string };
  const config = {
    hasCompletedOnboarding: true,
    lastOnboardingVersion: version,
    autoUpdates: false,
    projects: { [cwd]: { hasTrustDialogAccepted: true } },
    // Otherwise an API key in the environment brings up "Detected a custom API key" (default No).
    customApiKeyResponses: { approved: [claudeApiKey.slice(-20)], rejected: [] },
  };
  await writeFile(join(home, '.claude.json'), JSON.stringify(config, null, 2));
  const env: Record<string, string> = {
    DISABLE_AUTOUPDATER: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
  };
  if (apiUrl !== undefined) {
    env.ANTHROPIC_BASE_URL = apiUrl;
    env.ANTHROPIC_API_KEY = claudeApiKey;
  }
  return env;
}

async function prepareCodex(
  home: string,
  cwd: string,
  apiUrl: string | undefined,
): Promise<Record<string, string>> {
  // The env var alone still shows Codex's login screen; a stored API key does not.
  await execFileWithInput(
    bin('codex'),
    ['login', '--with-api-key'],
    { HOME: home, PATH: agentPath },
    'sk-bridge-fake-key',
  );
  const config = [
    `openai_base_url = ${JSON.stringify(`${apiUrl ?? closedApiUrl}/v1`)}`,
    'check_for_update_on_startup = false',
    '',
    `[projects.${JSON.stringify(cwd)}]`,
    'trust_level = "trusted"',
    '',
  ].join('\n');
  // `codex login` writes only auth.json; Codex adds its own settings to config.toml later.
  await writeFile(join(home, '.codex', 'config.toml'), config);
  await linkCodexRelease(home);
  return {};
}

/**
 * Codex copies its app-server daemon release (424 MB for 0.171) into every new HOME at its first
 * start (`.codex/packages/app-server-daemon/releases/<version>-<target>`) and runs it from there.
 * The first session of a machine keeps its copy here when it stops (`keepCodexRelease`); every
 * later HOME gets the release as hard links (`cp -al`: no bytes copied) and its own `current`
 * link and small files, and Codex finds its release installed. Keyed by Codex's version.
 */
async function codexReleaseTemplate(): Promise<string> {
  const { version } = JSON.parse(
    await readFile(join(agents, '@openai', 'codex', 'package.json'), 'utf8'),
  ) as { version: string };
  return join(tmpdir(), 'bridge-test-codex-release', version);
}

const codexDaemonDir = (home: string): string => join(home, '.codex', 'packages', 'app-server-daemon');

async function linkCodexRelease(home: string): Promise<void> {
  const template = await codexReleaseTemplate();
  const [release] = await readdir(join(template, 'releases')).catch(() => []);
  if (release === undefined) return; // none kept yet: Codex copies its own
  const daemon = codexDaemonDir(home);
  await mkdir(join(daemon, 'releases'), { recursive: true });
  await new Promise<void>((resolve, reject) =>
    execFile('cp', ['-al', join(template, 'releases', release), join(daemon, 'releases')], (err) =>
      err ? reject(err) : resolve(),
    ),
  );
  // Codex rewrites these as it runs: copies, never links into the template.
  for (const file of await readdir(template)) {
    if (file !== 'releases') await writeFile(join(daemon, file), await readFile(join(template, file)));
  }
  await symlink(join(daemon, 'releases', release), join(daemon, 'current'));
}

/** Keeps the release a Codex session installed in `home`, if none is kept yet (see above). */
async function keepCodexRelease(home: string): Promise<void> {
  const template = await codexReleaseTemplate();
  const daemon = codexDaemonDir(home);
  if (existsSync(template) || !existsSync(join(daemon, 'releases'))) return;
  await rm(join(daemon, 'current'), { force: true });
  await mkdir(dirname(template), { recursive: true });
  // One rename: a session stopping beside this one finds the template whole, or not at all.
  await rename(daemon, template).catch(() => undefined);
}

async function prepareGemini(home: string, apiUrl: string | undefined): Promise<Record<string, string>> {
  await mkdir(join(home, '.gemini'), { recursive: true });
  const settings = {
    security: { auth: { selectedType: 'gemini-api-key' }, folderTrust: { enabled: false } },
    // The current names; Gemini migrates the older `disableAutoUpdate` / `disableUpdateNag`.
    general: { enableAutoUpdate: false, enableAutoUpdateNotification: false },
  };
  await writeFile(join(home, '.gemini', 'settings.json'), JSON.stringify(settings, null, 2));
  // GOOGLE_GEMINI_BASE_URL is read by the bundled @google/genai client (getBaseUrl).
  return { GEMINI_API_KEY: 'bridge-fake-key', GOOGLE_GEMINI_BASE_URL: apiUrl ?? closedApiUrl };
}

/**
 * Each agent's permission dialog for its shell tool, as the agent draws it: its question at the
 * start of a line (after blanks or a box side). A message may quote these words, and the
 * transcript shows them behind a message header or a continuation mark; only the dialog itself
 * starts a line so.
 */
export const shellDialogOf: Readonly<Record<AgentTui, RegExp>> = {
  claude: /^[ \t]*Do you want to proceed\?/m,
  codex: /^[ \t]*Would you like to run the following command\?/m,
  gemini: /^[ \t│]*Allow execution of \[Shell\]\?/m,
};

/**
 * Any permission dialog the agent draws, for any tool: the shell's above, and the forms the
 * agents use for an MCP tool (Claude asks "Do you want to proceed?" for every tool; Codex asks
 * 'Allow the bridge MCP server to run tool "bridge_send"?' and offers "Run the tool and
 * continue"; Gemini asks "Allow execution of MCP tool …?"), as the pinned releases draw them.
 */
export const anyDialogOf: Readonly<Record<AgentTui, RegExp>> = {
  claude: shellDialogOf.claude,
  codex:
    /^[ \t]*(?:Would you like to (?:run|grant|make)|Allow the \S+ MCP server to run tool)|Run the tool and continue|Approve app tool call\?/m,
  gemini: /^[ \t│]*Allow execution of/m,
};

/** Screens an agent may show instead of its prompt when the pre-seeded config is not enough. */
const blockingScreens: readonly RegExp[] = [
  /Detected a custom API key/,
  /Do you trust the files in this folder\?/,
  /Trust this folder\?/,
  /Do you trust the contents of this directory\?/,
  /Select login method|Sign in with ChatGPT/,
  /How would you like to authenticate/,
  /Choose the text style/,
];

/** Whether the agent's empty prompt is on screen, ready for input. */
export function isAtPrompt(agent: AgentTui, screen: string, cwd: string): boolean {
  const lines = screen.split('\n');
  switch (agent) {
    case AgentTui.claude: {
      // `❯` and a no-break space between two rules, and the shortcuts footer.
      const i = lines.findIndex((line, n) => /^❯\s?$/.test(line) && /^─{20,}$/.test(lines[n - 1] ?? ''));
      return i > 0 && /^─{20,}$/.test(lines[i + 1] ?? '') && /\? for shortcuts/.test(screen);
    }
    case AgentTui.codex: {
      // The placeholder shows at once; the status line with the cwd only once the app-server is up.
      const i = lines.findIndex((line) => line.startsWith('› Ask Codex to do anything'));
      return i >= 0 && lines.slice(i + 1).some((line) => line.includes(` · ${cwd}`));
    }
    case AgentTui.gemini: {
      const i = lines.findIndex((line) => line.startsWith(' >   Type your message or @path/to/file'));
      return i >= 0 && lines.slice(i + 1).some((line) => line.includes(cwd));
    }
  }
}

async function waitForPrompt(
  agent: AgentTui,
  capture: () => Promise<string>,
  cwd: string,
  timeoutMs: number,
): Promise<void> {
  await pollScreen(
    capture,
    `the ${agent} prompt`,
    (screen) => {
      const blocking = blockingScreens.find((pattern) => pattern.test(screen));
      if (blocking) throw new Error(`a first-run screen is up (${blocking.source}); pre-seed its answer`);
      // Gemini draws its input box first and its banner up to a few seconds later.
      const banner = agent !== AgentTui.gemini || /Gemini CLI v\d/.test(screen);
      return banner && isAtPrompt(agent, screen, cwd) ? true : undefined;
    },
    timeoutMs,
  );
}

/** Waits until the screen has not changed for `quietMs` (late banners, footers), at most `maxMs`. */
async function waitForStillScreen(
  capture: () => Promise<string>,
  quietMs = 800,
  maxMs = 5_000,
): Promise<void> {
  const deadline = Date.now() + maxMs;
  let last = await capture();
  let since = Date.now();
  while (Date.now() < deadline && Date.now() - since < quietMs) {
    await sleep(100);
    const screen = await capture();
    if (screen !== last) {
      last = screen;
      since = Date.now();
    }
  }
}

async function pollScreen<T>(
  capture: () => Promise<string>,
  what: string,
  probe: (screen: string) => T | undefined,
  timeoutMs: number,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let screen = '';
  for (;;) {
    screen = await capture();
    const value = probe(screen);
    if (value !== undefined) return value;
    if (Date.now() > deadline) break;
    await sleep(100);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; screen:\n${screen.trimEnd()}`);
}

/**
 * Ends every process started with this HOME, by pid: the agent's own children, Codex's
 * `codex app-server` daemon, which detaches (new session) and outlives the TUI, and Gemini CLI,
 * which ignores the SIGHUP of a killed pane. A process's
 * initial environment is in /proc/<pid>/environ; HOME is a fresh temp dir, so a match is ours.
 */
export async function killProcessesWithHome(home: string): Promise<void> {
  const pids = await processesWithHome(home);
  for (const pid of pids) signal(pid, 'SIGTERM');
  const deadline = Date.now() + 3_000;
  let left = pids;
  while (left.length > 0 && Date.now() < deadline) {
    await sleep(100);
    left = left.filter(isAlive);
  }
  for (const pid of left) signal(pid, 'SIGKILL');
}

/** Pids of live processes whose environment has `HOME=<home>`. */
export async function processesWithHome(home: string): Promise<number[]> {
  const needle = Buffer.from(`\0HOME=${home}\0`);
  const entries = await readdir('/proc').catch(() => [] as string[]);
  const pids: number[] = [];
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    if (pid === process.pid) continue;
    // Another user's process, or one that just exited: not ours either way.
    const environ = await readFile(`/proc/${pid}/environ`).catch(() => undefined);
    if (environ && Buffer.concat([Buffer.from([0]), environ]).includes(needle)) pids.push(pid);
  }
  return pids;
}

function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch {
    // Gone between the scan and now: that is what we wanted.
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Runs one tmux command on the server at `socket`, `input` on its stdin; resolves to its stdout. */
export function runTmux(socket: string, args: readonly string[], input?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    // Without $TMUX a test started from inside tmux cannot reach the user's server by accident.
    const { TMUX: _ignored, ...env } = process.env;
    const child = execFile(
      'tmux',
      ['-S', socket, ...args],
      { env, encoding: 'utf8' },
      (error, stdout, stderr) => {
        if (error)
          reject(
            new Error(`tmux ${args.join(' ')} failed: ${stderr.trim() || error.message}`, { cause: error }),
          );
        else resolve(stdout);
      },
    );
    // A tmux that exits without reading its stdin (an error, or a command that takes none) closes
    // the pipe: its exit status, in the callback above, says what happened.
    child.stdin?.on('error', () => undefined);
    // Only `load-buffer -` reads stdin; closing it at once keeps any other command from waiting.
    child.stdin?.end(input);
  });
}

function execFileWithInput(
  file: string,
  args: readonly string[],
  env: Record<string, string>,
  input: string,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { env, stdio: ['pipe', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8');
    });
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8');
    });
    child.on('error', reject);
    child.on('close', (code) => {
      if (code === 0) resolve(output);
      else reject(new Error(`${file} ${args.join(' ')} exited with ${code}: ${output.trim()}`));
    });
    child.stdin.end(input);
  });
}
