import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AgentTui,
  type AgentTuiSession,
  isAtPrompt,
  launchAgentTui,
  processesWithHome,
  runTmux,
} from '../support/agentTuis.js';
import { type FakeModelApi, ModelApi, RequestKind, startFakeModelApi } from '../support/fakeModelApi.js';

/**
 * The harness for real agent TUIs proves itself: Claude Code, Codex and Gemini CLI (pinned in
 * devDependencies) reach their prompts in tmux with nothing but a pre-seeded HOME, take a paste
 * and a separate Enter as one prompt, and, pointed at the fake model API, show their permission
 * dialogs for its shell tool call without running the command until the dialog is answered.
 * The launches run in parallel; afterAll stops every session, the tmux server and Codex's daemon
 * whatever failed.
 */

/** Set in this process before the launches: an agent that sees it got the host's environment. */
const hostOnlyVariable = 'BRIDGE_TEST_HOST_ONLY';

const apiOf = { claude: ModelApi.anthropic, codex: ModelApi.openai, gemini: ModelApi.gemini } as const;
const dialogOf = {
  claude: /Do you want to proceed\?\n ❯ 1\. Yes/,
  codex: /Would you like to run the following command\?[\s\S]*› 1\. Yes, proceed \(y\)/,
  gemini: /Allow execution of \[Shell\]\?[\s\S]*● 1\. Allow once/,
} as const;
const agents = Object.values(AgentTui);
const count = (text: string, part: string): number => text.split(part).length - 1;
/** Claude without an API key: what a fresh machine without a login shows. */
const claudeOffline = 'claude-offline';

describe('agent TUI harness (real Claude Code, Codex, Gemini CLI in tmux, offline)', () => {
  let dir: string;
  let socket: string;
  let api: FakeModelApi;
  const launches = new Map<string, Promise<AgentTuiSession>>();
  const marker = (agent: string): string => join(dir, `${agent}-PWNED`);
  const session = (name: string): Promise<AgentTuiSession> => {
    const launch = launches.get(name);
    if (!launch) throw new Error(`no launch named ${name}`);
    return launch;
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'bridge-tuis-e2e-'));
    socket = join(dir, 'tmux.sock');
    api = await startFakeModelApi({
      command: (prompt) => {
        const match = /run the command for (\w+)/.exec(prompt);
        return match ? `touch ${marker(match[1] ?? 'unknown')}` : undefined;
      },
    });
    process.env[hostOnlyVariable] = 'must not reach an agent';
    const start = (name: string, agent: AgentTui, apiUrl?: string) => {
      const launch = launchAgentTui(agent, { socket, timeoutMs: 120_000, ...(apiUrl ? { apiUrl } : {}) });
      // Awaited by the tests and afterAll; this only keeps a failed launch from being "unhandled".
      launch.catch(() => undefined);
      launches.set(name, launch);
    };
    start(claudeOffline, AgentTui.claude);
    for (const agent of agents) start(agent, agent, api.url);
    await Promise.allSettled(launches.values());
  }, 240_000);

  afterAll(async () => {
    delete process.env[hostOnlyVariable];
    const sessions = await Promise.allSettled(launches.values());
    await Promise.allSettled(sessions.map((s) => (s.status === 'fulfilled' ? s.value.stop() : undefined)));
    // Stopped sessions leave no server behind; this is for a launch that failed half-way.
    await runTmux(socket, ['kill-server']).catch(() => undefined);
    await api?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 60_000);

  async function submit(s: AgentTuiSession, text: string): Promise<void> {
    await s.paste(text);
    await s.waitForScreen('the pasted text in the input', (screen) => screen.includes(text) || undefined);
    // Enter as its own command, a moment after the paste: Gemini takes an Enter within ~40 ms
    // of a paste as a newline.
    await sleep(150);
    await s.sendKeys('Enter');
  }

  it.each([claudeOffline, ...agents])(
    '%s reaches its prompt with a fresh HOME and none of the host environment',
    async (name) => {
      const s = await session(name);
      const screen = await s.capture();
      expect(isAtPrompt(s.agent, screen, s.cwd)).toBe(true);
      expect(screen).toContain(
        { claude: '? for shortcuts', codex: '› Ask Codex to do anything', gemini: 'Type your message' }[
          s.agent
        ],
      );
      if (name === claudeOffline) expect(screen).toContain('Not logged in · Run /login');

      const pid = (await runTmux(socket, ['display-message', '-p', '-t', s.target, '#{pane_pid}'])).trim();
      const environ = (await readFile(`/proc/${pid}/environ`, 'utf8')).split('\0').filter(Boolean);
      expect(environ).toContain(`HOME=${s.home}`);
      expect(environ.filter((entry) => /^(TMUX|TMUX_PANE|BRIDGE_TEST_HOST_ONLY)=/.test(entry))).toEqual([]);
    },
  );

  it('Claude offline: a paste and a separate Enter submit; it answers "Not logged in"', async () => {
    const s = await session(claudeOffline);
    await submit(s, 'hello from bridge');
    const screen = await s.waitForScreen('the answer and an empty input', (x) =>
      /⎿\s+Not logged in · Please run \/login/.test(x) && isAtPrompt(s.agent, x, s.cwd) ? x : undefined,
    );
    expect(screen).toMatch(/^❯ hello from bridge$/m);
  });

  it.each(agents)(
    '%s: a paste and a separate Enter reach the fake model as exactly one prompt',
    async (agent) => {
      const s = await session(agent);
      const text = `hello from bridge to ${agent}`;
      await submit(s, text);
      await s.waitForScreen('the answer and an empty input', (x) =>
        x.includes('Done.') && isAtPrompt(agent, x, s.cwd) ? true : undefined,
      );
      expect(api.prompts(apiOf[agent])).toEqual([text]);
    },
  );

  it.each(agents)(
    '%s shows its permission dialog for the fake tool call and runs nothing until it is answered',
    async (agent) => {
      const s = await session(agent);
      await submit(s, `please run the command for ${agent}`);
      await s.waitForScreen('the permission dialog', (x) => dialogOf[agent].test(x) || undefined);
      const asked = api.requests.filter((r) => r.api === apiOf[agent] && r.command !== undefined);
      expect(asked.map((r) => r.command)).toEqual([`touch ${marker(agent)}`]);
      // Open for a while, and still nothing ran.
      await sleep(1_000);
      expect(dialogOf[agent].test(await s.capture())).toBe(true);
      expect(existsSync(marker(agent))).toBe(false);

      // Enter picks the highlighted default: yes. This is the danger a bare Enter poses.
      const answersBefore = count(await s.capture(), 'Done.');
      await s.sendKeys('Enter');
      await s.waitForScreen('the end of the turn', (x) =>
        count(x, 'Done.') > answersBefore && isAtPrompt(agent, x, s.cwd) ? true : undefined,
      );
      expect(existsSync(marker(agent))).toBe(true);
      const last = api.requests.filter((r) => r.api === apiOf[agent] && r.kind !== RequestKind.side).at(-1);
      expect(last?.kind).toBe(RequestKind.toolResult);
    },
  );

  it.each([claudeOffline, ...agents])(
    'stopping %s ends its processes (Codex: its app-server daemon) and removes its HOME',
    async (name) => {
      const s = await session(name);
      const before = await processesWithHome(s.home);
      expect(before.length).toBeGreaterThan(0);
      if (s.agent === AgentTui.codex) {
        const commands = await Promise.all(
          before.map((pid) => readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')),
        );
        expect(commands.some((command) => command.includes('app-server'))).toBe(true);
      }
      await s.stop();
      expect(await processesWithHome(s.home)).toEqual([]);
      expect(existsSync(s.home)).toBe(false);
      await expect(runTmux(socket, ['has-session', '-t', `=${s.session}`])).rejects.toThrow();
    },
  );
});
