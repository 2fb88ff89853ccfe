import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type AgentHome,
  type AgentTui,
  type AgentTuiSession,
  anyDialogOf,
  killProcessesWithHome,
  launchAgentTui,
  type PaneBeforeStart,
  prepareAgentHome,
  runTmux,
  shellDialogOf,
} from './agentTuis.js';
import { type FakeModelApi, RequestKind, startFakeModelApi, type ToolCall } from './fakeModelApi.js';
import { type CliResult, GatewayProcess, runCli } from './GatewayProcess.js';
import { callTool, connectMcp, type DrainedMessage } from './mcpClient.js';
import { waitFor } from './waitFor.js';

/**
 * A real agent TUI configured for bridge **only** by `agentbridge connect`, driven by a model
 * (the fake model API) that calls bridge's tools: as a main, a person types a request and the
 * agent sends; as a worker in a tmux pane, a message from the lead makes it reply and ask. No
 * permission dialog is ever drawn for bridge's tools (a watcher captures the panes throughout),
 * a shell command still asks, and `disconnect` puts each file back.
 *
 * The model's script, in the words of a prompt (a person's or a delivered message):
 * `please send TEXT to NAME`, `please reply TEXT to NAME`, `please ask NAME: QUESTION` call
 * bridge's tools; `please run WORD` calls the shell tool (`touch <dir>/WORD`).
 */
/** Each agent's own protocol, as a spawn profile names it, and the arguments that start it so. */
const nativePath = {
  claude: { path: 'claude-stream', args: [] },
  codex: { path: 'codex-app-server', args: ['app-server'] },
  gemini: { path: 'acp', args: ['--acp'] },
} as const satisfies Record<AgentTui, { path: string; args: readonly string[] }>;

export function describeConnectedAgent(agent: AgentTui): void {
  describe(`${agent} connected by agentbridge connect only, driven by a model that calls bridge's tools`, () => {
    let dir: string;
    let socket: string;
    let api: FakeModelApi;
    let gateway: GatewayProcess;
    let lead: Client;
    let main: AgentTuiSession;
    let worker: AgentTuiSession;
    /** The HOME of the agent the gateway spawns (its profile names the agent). */
    let spawnedHome: AgentHome;
    const mainName = `${agent}-main`;
    const workerName = `${agent}-worker`;
    /** Per HOME: each file connect edits, as it was before connect and as connect left it. */
    const files = new Map<string, Array<{ path: string; before: string | null; connected: string }>>();
    /** Screens that showed a permission dialog while only bridge's tools were called. */
    const dialogs: string[] = [];
    const watching = new AbortController();
    let watcher: Promise<void> | undefined;

    const cli = (args: string[], home: string): Promise<CliResult> =>
      runCli(args, gateway.cliEnv({ HOME: home, CODEX_HOME: '' }));
    const ok = (result: CliResult): string => {
      expect(result.code, result.stderr || result.stdout).toBe(0);
      return result.stdout;
    };
    const readOrNull = (path: string): string | null =>
      existsSync(path) ? readFileSync(path, 'utf8') : null;

    /** `connect` for the pane about to start: what it would write (`--print`) first, then the real thing. */
    const connect =
      (as: 'main' | 'worker', name: string) =>
      async ({ target, socket: tmuxSocket, home }: PaneBeforeStart): Promise<void> => {
        const pane = as === 'worker' ? ['--tmux', target, '--tmux-socket', tmuxSocket] : [];
        const args = ['connect', agent, '--as', as, name, ...pane, '--json'];
        const printed = JSON.parse(ok(await cli([...args, '--print'], home))) as {
          files: Array<{ path: string }>;
        };
        const before = printed.files.map((f) => ({ path: f.path, before: readOrNull(f.path) }));
        const connected = JSON.parse(ok(await cli(args, home))) as { files: string[] };
        expect(connected.files).toEqual(printed.files.map((f) => f.path));
        files.set(
          home,
          before.map((f) => ({ ...f, connected: readFileSync(f.path, 'utf8') })),
        );
      };

    /** Captures both panes until stopped, keeping any screen with a permission dialog on it. */
    const watchForDialogs = async (): Promise<void> => {
      while (!watching.signal.aborted) {
        for (const session of [main, worker]) {
          const screen = await session.capture().catch(() => '');
          if (anyDialogOf[agent].test(screen)) dialogs.push(screen);
        }
        await sleep(200);
      }
    };

    /** What the lead drained so far (a wait takes its message out). */
    const inbox: DrainedMessage[] = [];
    /** Drains the lead's inbox until a message of `kind` whose text holds `text` is in it. */
    const leadGets = (kind: string, text: string): Promise<DrainedMessage> =>
      waitFor(
        `the lead to get a ${kind} with ${text}`,
        async () => {
          const at = inbox.findIndex((m) => m.kind === kind && m.text.includes(text));
          if (at >= 0) return inbox.splice(at, 1)[0];
          const result = await callTool(lead, 'bridge_drain', { wait_ms: 2_000 });
          expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
          inbox.push(...((result.structuredContent?.messages ?? []) as DrainedMessage[]));
          return undefined;
        },
        120_000,
      ).catch(async (err: unknown) => {
        throw new Error(
          `${(err as Error).message}; the lead got ${JSON.stringify(inbox)}${await evidence()}`,
        );
      });
    /** The panes and what the model was asked and answered, for a failure's message. */
    const evidence = async (): Promise<string> => {
      const turns = api.requests
        .filter((r) => r.kind !== RequestKind.other)
        .map(
          (r) =>
            `${r.kind} ${JSON.stringify(r.prompt ?? r.toolResult ?? '').slice(0, 200)} -> ${r.tool ?? r.command ?? 'text'}`,
        );
      const screens = await Promise.all([main, worker].map((s) => s.capture().catch(() => '')));
      const spawned = await runTmux(socket, ['capture-pane', '-p', '-t', `=spawned-${agent}:`]).catch(
        () => '',
      );
      return `\n--- model turns ---\n${turns.join('\n')}\n--- main ---\n${screens[0]}\n--- worker ---\n${screens[1]}\n--- spawned ---\n${spawned}`;
    };
    const send = async (to: string, text: string): Promise<string> => {
      const result = await callTool(lead, 'bridge_send', { to, text, wait_for: 'submitted' }, 180_000);
      expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
      const sent = result.structuredContent as { msgId: string; stage: string };
      expect(sent.stage).toBe('submitted');
      return sent.msgId;
    };
    const token = (what: string): string => `${what}-${agent}-${Math.random().toString(36).slice(2, 8)}`;

    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), `bridge-connected-${agent}-`));
      socket = join(dir, 'tmux.sock');
      api = await startFakeModelApi({
        toolCall: (prompt): ToolCall | undefined => {
          const send = /please (send|reply) (\S+) to ([\w.@-]+)/.exec(prompt);
          if (send) return { tool: `bridge_${send[1]}`, args: { to: send[3], text: send[2] } };
          const ask = /please ask ([\w.@-]+): (\S+)/.exec(prompt);
          if (ask) return { tool: 'bridge_ask', args: { to: ask[1], question: ask[2], timeout_ms: 120_000 } };
          return undefined;
        },
        command: (prompt) => {
          const run = /please run (\w[\w-]*)/.exec(prompt);
          return run ? `touch ${join(dir, run[1] ?? 'unknown')}` : undefined;
        },
      });
      // The tmux server the gateway spawns into, started with a clean environment: a window gets
      // the server's, and Gemini CLI under the runner's CI=true would not run interactively.
      await new Promise<void>((resolve, reject) =>
        execFile(
          'env',
          [
            '-i',
            `PATH=${process.env.PATH ?? '/usr/bin:/bin'}`,
            'tmux',
            '-S',
            socket,
            '-f',
            '/dev/null',
            'new-session',
            '-d',
            '-s',
            'keep',
          ],
          (err) => (err ? reject(err) : resolve()),
        ),
      );
      spawnedHome = await prepareAgentHome(agent, { apiUrl: api.url });
      gateway = new GatewayProcess({
        config: {
          spawn: { tmuxSocket: socket, tmuxSession: `spawned-${agent}` },
          profiles: {
            [agent]: { command: spawnedHome.bin, agent, cwd: spawnedHome.cwd, env: spawnedHome.env },
            // The same agent behind an agent host, on its own protocol.
            [`${agent}-native`]: {
              command: [spawnedHome.bin, ...nativePath[agent].args].join(' '),
              agent,
              path: nativePath[agent].path,
              cwd: spawnedHome.cwd,
              env: spawnedHome.env,
            },
          },
        },
      });
      await gateway.start();
      const registered = JSON.parse(
        ok(await gateway.cli(['register', '--kind', 'main', '--name', 'lead', '--json'])),
      ) as {
        token: string;
      };
      lead = await connectMcp(gateway.mcpUrl, registered.token);
      [main, worker] = await Promise.all([
        launchAgentTui(agent, {
          socket,
          apiUrl: api.url,
          timeoutMs: 120_000,
          beforeStart: connect('main', mainName),
        }),
        launchAgentTui(agent, {
          socket,
          apiUrl: api.url,
          timeoutMs: 120_000,
          beforeStart: connect('worker', workerName),
        }),
      ]);
      watcher = watchForDialogs();
    }, 300_000);

    afterAll(async () => {
      watching.abort();
      await watcher;
      await lead?.close().catch(() => undefined);
      await Promise.all([main?.stop(), worker?.stop(), spawnedHome?.remove()]);
      if (socket) await runTmux(socket, ['kill-server']).catch(() => undefined);
      await gateway?.dispose();
      await api?.close();
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it('as a main: a person asks it to send, the model calls bridge_send, the message arrives from it', async () => {
      const text = token('hello');
      await main.paste(`please send ${text} to lead`);
      await sleep(500);
      await main.sendKeys('Enter');
      const got = await leadGets('SEND', text);
      expect(got.from.name).toBe(mainName);
      expect(api.requests.some((r) => r.tool?.endsWith('bridge_send'))).toBe(true);
    });

    it('as a worker in a tmux pane: a message asks for a reply, the model calls bridge_reply, the lead gets it', async () => {
      const text = token('answer');
      await send(workerName, `please reply ${text} to lead`);
      const got = await leadGets('REPLY', text);
      expect(got.from.name).toBe(workerName);
    });

    it('as a worker: it asks the lead with bridge_ask, the lead answers, the answer reaches the model as the tool result', async () => {
      const question = token('question');
      const answer = token('fortytwo');
      await send(workerName, `please ask lead: ${question}`);
      const ask = await leadGets('ASK', question);
      expect(ask.from.name).toBe(workerName);
      const answered = await callTool(lead, 'bridge_answer', { ask_id: ask.msgId, text: answer });
      expect(answered.isError, JSON.stringify(answered.content)).toBeFalsy();
      await waitFor('the answer to reach the model', () =>
        api.requests.some((r) => r.kind === RequestKind.toolResult && r.toolResult?.includes(answer))
          ? true
          : undefined,
      );
    });

    it("spawned from a profile that names the agent, it comes connected as itself (though its HOME has the user's own connection): the brief asks for a reply, the lead gets it", async () => {
      // The user who runs the spawning host connected the same agent, in the same HOME, as a main.
      const mine = JSON.parse(
        ok(await cli(['connect', agent, '--as', 'main', `${agent}-mine`, '--json'], spawnedHome.home)),
      ) as {
        files: string[];
      };
      const text = token('spawned');
      const result = await callTool(lead, 'bridge_spawn', {
        host: gateway.hostId,
        profile: agent,
        name: `${agent}-spawned`,
        brief: `please reply ${text} to lead`,
        wait_ms: 60_000,
      });
      expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
      const got = await leadGets('REPLY', text);
      expect(got.from.name, 'the spawned identity, not the user-scope one').toBe(`${agent}-spawned`);
      // The user's own files keep the user's connection; the spawned one is in its command line
      // and environment (Gemini's in its working directory, naming the variable, never the token).
      for (const file of mine.files) expect(readFileSync(file, 'utf8'), file).toMatch(/bridge/);
      ok(await cli(['disconnect', agent], spawnedHome.home));
      if (agent === 'gemini')
        expect(readFileSync(join(spawnedHome.cwd, '.gemini', 'settings.json'), 'utf8')).toContain(
          `Bearer \${BRIDGE_TOKEN}`,
        );
    });

    it(`spawned from a profile on its own protocol (${nativePath[agent].path}), it comes connected behind an agent host: the brief reaches it over that protocol and asks for a reply, the lead gets it`, async () => {
      const text = token('native');
      const name = `${agent}-native`;
      const result = await callTool(lead, 'bridge_spawn', {
        host: gateway.hostId,
        profile: name,
        name,
        brief: `please reply ${text} to lead`,
        wait_ms: 60_000,
      });
      expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
      // Codex's TUI can attach to its thread: the result says how; the others have no such command.
      const { attach } = result.structuredContent as { attach?: string };
      if (agent === 'codex') expect(attach).toMatch(/ resume \S+ --remote unix:\/\/\S+\.sock\.agent$/);
      else expect(attach).toBeUndefined();
      const got = await leadGets('REPLY', text);
      expect(got.from.name).toBe(name);
      // Its window is the agent host's: the brief was handed over the agent's protocol (its
      // mirror's ▶ line), not typed into a TUI.
      const window = await runTmux(socket, [
        'capture-pane',
        '-p',
        '-J',
        '-t',
        `=spawned-${agent}:${name}`,
        '-S',
        '-200',
      ]);
      expect(
        window
          .split('\n')
          .some((line) => line.startsWith('▶') && line.includes(`please reply ${text} to lead`)),
        window,
      ).toBe(true);
    });

    it("no permission dialog was drawn for bridge's tools; a shell command still asks", async () => {
      watching.abort();
      await watcher;
      expect(dialogs, 'a permission dialog for a bridge tool').toEqual([]);
      const word = token('shell');
      await send(workerName, `please run ${word}`);
      await worker.waitForScreen('the shell permission dialog', (s) =>
        shellDialogOf[agent].test(s) ? s : undefined,
      );
      await worker.sendKeys('Escape');
      await worker.waitForScreen('the dialog to close', (s) =>
        shellDialogOf[agent].test(s) ? undefined : s,
      );
      expect(existsSync(join(dir, word)), 'the command was refused, not run').toBe(false);
    });

    it('disconnect leaves each file as it was: byte for byte, or without bridge where the agent rewrote it', async () => {
      for (const session of [main, worker]) {
        // Quit first, as a person would: a running agent may write its config back.
        await runTmux(session.socket, ['kill-session', '-t', `=${session.session}`]).catch(() => undefined);
        await killProcessesWithHome(session.home);
        const edited = files.get(session.home) ?? [];
        expect(edited.length).toBeGreaterThan(0);
        const atDisconnect = edited.map((f) => readOrNull(f.path));
        ok(await cli(['disconnect', agent], session.home));
        edited.forEach((file, i) => {
          const now = readOrNull(file.path);
          if (atDisconnect[i] === file.connected) {
            expect(now, file.path).toBe(file.before);
            return;
          }
          // The agent rewrote it while it ran (Claude's two files, Codex's config.toml): bridge's
          // part is gone, and every line the agent added is still there.
          expect(now ?? '', file.path).not.toMatch(
            /agentbridge connect|"bridge"|mcp__bridge|mcp_servers|Bearer /,
          );
          const lines = (text: string | null) =>
            new Set((text ?? '').split('\n').map((l) => l.trim().replace(/,$/, '')));
          const connected = lines(file.connected);
          const added = [...lines(atDisconnect[i] ?? null)].filter((l) => !connected.has(l));
          expect(
            added.filter((l) => !lines(now).has(l)),
            `${file.path}: the agent's own lines`,
          ).toEqual([]);
        });
      }
      const roster = ok(await gateway.cli(['roster', '--json']));
      expect(roster).not.toContain(workerName);
    });
  });
}
