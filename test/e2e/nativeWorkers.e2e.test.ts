import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import Database from 'better-sqlite3';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentHostHello } from '../../src/panes/agentHostInjector.js';
import { type AgentHome, type AgentTui, prepareAgentHome, runTmux } from '../support/agentTuis.js';
import { deleteQueues } from '../support/broker.js';
import { findChromium } from '../support/chromium.js';
import { openConsole } from '../support/consolePage.js';
import { type FakeModelApi, RequestKind, startFakeModelApi } from '../support/fakeModelApi.js';
import { removeDeadLettersOf } from '../support/federation.js';
import { cliPath, federatedGateway, type GatewayProcess, repoRoot } from '../support/GatewayProcess.js';
import { callTool, connectMcp, type Registered } from '../support/mcpClient.js';
import { waitFor } from '../support/waitFor.js';

const execFileAsync = promisify(execFile);

interface Sent {
  msgId: string;
  stage: string | null;
}

/** A worker whose agent takes its prompts over the agent's own protocol, behind an agent host. */
interface NativeWorker {
  /** The worker's name on B, and the agent host's tmux session. */
  readonly name: string;
  readonly agent: AgentTui;
  /** `agent-host --protocol`, and what the agent is started with. */
  readonly protocol: 'acp' | 'claude-stream' | 'codex-app-server';
  readonly args: readonly string[];
  /** The agent takes a message into a running turn (else it waits for the turn to end). */
  readonly midTurn: boolean;
  /** Where its owner approves its permission request. */
  readonly answerFrom: 'console' | 'cli';
  /**
   * The agent acknowledges a message seconds after it is given one (when the model answers, or
   * at the running turn's next boundary), so the gateway can be killed in between; Codex's
   * app-server accepts a turn/start or turn/steer at once, leaving no window to aim at.
   */
  readonly slowAcknowledgement: boolean;
}

/** Screenshots of the console go here. */
const artifacts = join(repoRoot, 'test-artifacts');

const workers: readonly NativeWorker[] = [
  {
    name: 'gemini',
    agent: 'gemini',
    protocol: 'acp',
    args: ['--acp'],
    midTurn: false,
    answerFrom: 'console',
    slowAcknowledgement: true,
  },
  {
    name: 'claude',
    agent: 'claude',
    protocol: 'claude-stream',
    args: [],
    midTurn: true,
    answerFrom: 'cli',
    slowAcknowledgement: true,
  },
  {
    name: 'codex',
    agent: 'codex',
    protocol: 'codex-app-server',
    args: ['app-server'],
    midTurn: true,
    answerFrom: 'cli',
    slowAcknowledgement: false,
  },
];

/**
 * Workers that take their prompts over their agents' own protocols (issue 33): Gemini CLI as
 * `gemini --acp` (ACP), Claude Code in its stream-json mode and Codex CLI's app-server, all from
 * the npm registry, each
 * run by `agentbridge agent-host` in a real tmux pane (the pane mirrors the session) and
 * registered with `--agent-socket` on gateway B; a main on gateway A (a separate process,
 * federated through the broker) sends over MCP with the official SDK client. The fake model API
 * records what reached the model.
 */
describe('workers on their agents’ own protocols (ACP, Claude stream-json, Codex app-server) on another host', () => {
  let dir: string;
  let tmuxSocket: string;
  let api: FakeModelApi;
  const homes = new Map<string, AgentHome>();
  let a: GatewayProcess;
  let b: GatewayProcess;
  let lead: Client;
  let leadToken: string;
  let browser: Browser;
  /** The agent B spawns for the main on A (Claude Code on its stream-json), and its tmux server. */
  let spawnedHome: AgentHome | undefined;
  let spawnTmux: string;
  const queues: string[] = [];
  /** What the fake model's shell call for `name` creates. */
  const marker = (name: string) => join(dir, `${name}-PWNED`);
  /** A file in each agent's working directory the fake model reads (a tool that asks nothing). */
  const notes = (cwd: string) => join(cwd, 'notes.txt');
  const socketOf = (name: string) => join(dir, `${name}.sock`);

  const send = async (to: string, text: string, extra: Record<string, unknown> = {}): Promise<Sent> => {
    const result = await callTool(lead, 'bridge_send', { to: `${to}@${b.hostId}`, text, ...extra }, 180_000);
    expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
    return result.structuredContent as unknown as Sent;
  };
  const stageOf = async (msgId: string) => {
    const result = await callTool(lead, 'bridge_status', { msg_id: msgId });
    expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
    return (result.structuredContent as { stage: string | null }).stage;
  };
  const promptsWith = (msgId: string): string[] => api.prompts().filter((p) => p.includes(msgId));
  /** The model requests whose conversation holds the message. */
  const requestsWith = (msgId: string) =>
    api.requests.filter((r) => JSON.stringify(r.body ?? '').includes(msgId));
  /** The delivery's steps on B and what B recorded with them. */
  const deliveryOnB = (msgId: string) => {
    const db = new Database(join(b.home, 'events.db'), { readonly: true });
    try {
      const rows = db
        .prepare(
          "SELECT to_state, data FROM event_log WHERE msg_id = ? AND actor_kind = 'delivery' ORDER BY hlc",
        )
        .all(msgId) as Array<{ to_state: string; data: string | null }>;
      return { trail: rows.map((r) => r.to_state), events: rows.map((r) => r.data ?? '').join('\n') };
    } finally {
      db.close();
    }
  };
  /**
   * A message sent while its recipient's agent is in a turn that does not take it: queued, not
   * handed over and at no model meanwhile. B is SIGKILLed then, at the crash point before handing
   * over, and started again; the message is submitted once the turn ended, a prompt of its own,
   * given once (the host's mirror) and at the model once.
   */
  const heldUntilTheTurnEnds = async (name: string, msgId: string): Promise<void> => {
    await sleep(1_500);
    expect(await stageOf(msgId)).toBe('queued');
    expect(requestsWith(msgId)).toHaveLength(0);
    expect(deliveryOnB(msgId).trail).not.toContain('typed');
    await b.kill9();
    await b.start();
    await waitFor(
      'the held message to be submitted after the restart',
      async () => ((await stageOf(msgId)) === 'submitted' ? true : undefined),
      60_000,
    );
    await waitFor('the model to get it', () => (promptsWith(msgId).length > 0 ? true : undefined));
    await sleep(1_000);
    expect(promptsWith(msgId)).toHaveLength(1);
    const given = (await mirror(name))
      .split('\n')
      .filter((line) => line.startsWith('▶') && line.includes(msgId));
    expect(given).toHaveLength(1);
  };
  /** `env -i` arguments: the agent's whole environment and nothing else. */
  const envOf = (home: AgentHome) => Object.entries(home.env).map(([key, value]) => `${key}=${value}`);
  const mirror = (name: string) =>
    runTmux(tmuxSocket, ['capture-pane', '-p', '-J', '-t', name, '-S', '-300']);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'bridge-native-'));
    mkdirSync(artifacts, { recursive: true });
    tmuxSocket = join(dir, 'tmux.sock');
    api = await startFakeModelApi({
      command: (prompt) => {
        const asked = /run the command (\w+)/.exec(prompt)?.[1];
        return asked === undefined ? undefined : `touch ${marker(asked)}`;
      },
      // "look around": a read of the agent's notes, which needs no permission: a turn that goes on
      // after the model's first answer.
      toolCall: (prompt) => {
        const cwd = [...homes.values()].find((home) => prompt.includes(home.cwd))?.cwd;
        return prompt.includes('look around') && cwd
          ? { tool: 'Read', args: { file_path: notes(cwd) } }
          : undefined;
      },
      replyDelayMs: (prompt) => (prompt.includes('take your time') ? 4_000 : 0),
    });
    // The tmux server B spawns into, started with a clean environment (a window gets the server's).
    spawnTmux = join(dir, 'spawn.sock');
    const clean = [`PATH=${process.env.PATH ?? '/usr/bin:/bin'}`, 'tmux', '-S', spawnTmux, '-f', '/dev/null'];
    await execFileAsync('env', ['-i', ...clean, 'new-session', '-d', '-s', 'keep']);
    spawnedHome = await prepareAgentHome('claude', { apiUrl: api.url });
    a = federatedGateway('native-a');
    b = federatedGateway('native-b', {
      spawn: { tmuxSocket: spawnTmux, tmuxSession: 'spawned' },
      profiles: {
        'claude-native': {
          command: spawnedHome.bin,
          agent: 'claude',
          path: 'claude-stream',
          cwd: spawnedHome.cwd,
          env: spawnedHome.env,
        },
      },
    });
    await Promise.all([a.start(), b.start()]);
    browser = await chromium.launch({ executablePath: findChromium('the console approval') });
    for (const worker of workers) {
      const home = await prepareAgentHome(worker.agent, { apiUrl: api.url });
      homes.set(worker.name, home);
      writeFileSync(notes(home.cwd), 'some notes\n');
      // The host in a pane of its own, with the agent's whole environment and nothing else.
      const env = envOf(home);
      const host = [process.execPath, cliPath, 'agent-host', '--socket', socketOf(worker.name)];
      const agent = ['--protocol', worker.protocol, '--cwd', home.cwd, '--', home.bin, ...worker.args];
      const session = [
        '-d',
        '-s',
        worker.name,
        '-x',
        '200',
        '-y',
        '50',
        'env',
        '-i',
        ...env,
        ...host,
        ...agent,
      ];
      await runTmux(tmuxSocket, ['new-session', ...session]);
    }
    for (const worker of workers) {
      await waitFor(
        `the ${worker.name} agent host to answer`,
        async () => (await agentHostHello(socketOf(worker.name)).catch(() => undefined)) ?? undefined,
        90_000,
      );
      const register = ['register', '--kind', 'worker', '--name', worker.name];
      const registered = await b.cli([...register, '--agent-socket', socketOf(worker.name), '--json']);
      queues.push(`agent.${(JSON.parse(registered.stdout) as Registered).gid}.inbox`);
    }
    const main = JSON.parse(
      (await a.cli(['register', '--kind', 'main', '--name', 'lead', '--json'])).stdout,
    ) as Registered;
    queues.push(`agent.${main.gid}.inbox`);
    leadToken = main.token;
    lead = await connectMcp(a.mcpUrl, main.token);
    for (const worker of workers) await a.waitForInRoster(worker.name, b.hostId);
  }, 240_000);

  afterAll(async () => {
    await browser?.close();
    await lead?.close().catch(() => undefined);
    if (tmuxSocket) await runTmux(tmuxSocket, ['kill-server']).catch(() => undefined);
    if (spawnTmux) await runTmux(spawnTmux, ['kill-server']).catch(() => undefined);
    for (const home of homes.values()) await home.remove();
    await spawnedHome?.remove();
    await a?.dispose();
    await b?.dispose();
    await api?.close();
    await deleteQueues(queues);
    await removeDeadLettersOf([a?.hostId, b?.hostId].filter((h): h is string => h !== undefined));
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  for (const worker of workers) {
    const { name, protocol } = worker;

    it(`${name} (${protocol}): a message from a main on A reaches the model exactly once; A records submitted, B the agent's acknowledgement and the path; the mirror pane shows prompt and reply`, async () => {
      const sent = await send(name, `say hello over ${protocol}`, { wait_for: 'submitted' });
      expect(sent.stage, JSON.stringify(deliveryOnB(sent.msgId))).toBe('submitted');
      await waitFor('the model to get it', () => (promptsWith(sent.msgId).length > 0 ? true : undefined));
      await sleep(1_000); // a second hand-over would reach the model now
      expect(promptsWith(sent.msgId)).toHaveLength(1);
      expect(promptsWith(sent.msgId)[0]).toContain(`say hello over ${protocol}`);
      expect(await stageOf(sent.msgId)).toBe('submitted');
      const { trail, events } = deliveryOnB(sent.msgId);
      expect(trail).toEqual(['pending', 'injecting', 'typed', 'submitted', 'acked']);
      expect(events).toContain(`acknowledged the prompt (${protocol})`);
      await waitFor('the mirror to show prompt and reply', async () => {
        const screen = await mirror(name);
        const prompt = `▶ [bridge SEND from lead@${a.hostId} msg ${sent.msgId}] say hello over ${protocol}`;
        return screen.includes(prompt) && screen.includes('◀ ') && screen.includes('session ')
          ? true
          : undefined;
      });
    });

    it(
      worker.midTurn
        ? `${name} (${protocol}): a message sent while the agent is in a turn goes into that turn: the turn's next model request holds it, once`
        : `${name} (${protocol}): a message sent while the agent is in a turn is held until the turn ends, across a SIGKILL of B before it was handed over, then taken once`,
      async () => {
        // The model holds its first answer for 4 s, then reads a file: the turn goes on after it.
        const long = await send(name, `take your time and look around ${homes.get(name)?.cwd}`, {
          wait_for: 'queued',
        });
        await waitFor('the model to get the long one', () =>
          promptsWith(long.msgId).length > 0 ? true : undefined,
        );
        const next = await send(name, 'one more thing', { wait_for: 'queued' });
        if (worker.midTurn) {
          await waitFor('it to be submitted into the turn', async () =>
            (await stageOf(next.msgId)) === 'submitted' ? true : undefined,
          );
          await waitFor('the turn’s next request', () =>
            requestsWith(next.msgId).length > 0 ? true : undefined,
          );
          // One turn took both: in the mirror, the next message was given before the long one's
          // turn ended, and that turn's end is the only one after them.
          const given = await waitFor('the turn to end', async () => {
            const lines = (await mirror(name)).split('\n');
            const at = (id: string) => lines.findIndex((line) => line.startsWith('▶') && line.includes(id));
            const from = at(long.msgId);
            const ends = lines.slice(from).filter((line) => line.startsWith('■'));
            return from >= 0 && ends.length > 0 ? { lines, from, next: at(next.msgId) } : undefined;
          });
          const firstEnd = given.lines.findIndex((line, i) => i > given.from && line.startsWith('■'));
          expect(given.next, given.lines.join('\n')).toBeGreaterThan(given.from);
          expect(given.next, given.lines.join('\n')).toBeLessThan(firstEnd);
          await sleep(1_000);
          expect(
            (await mirror(name))
              .split('\n')
              .slice(given.from)
              .filter((line) => line.startsWith('■')),
          ).toHaveLength(1);
          // Its conversation holds it once.
          const last = requestsWith(next.msgId).at(-1);
          expect(JSON.stringify(last?.body).split(next.msgId)).toHaveLength(2);
          if (worker.agent === 'claude') {
            // Claude: the request that first holds it answers the long one's tool call (the file read).
            expect(requestsWith(next.msgId)[0]?.kind).toBe(RequestKind.toolResult);
            expect(promptsWith(next.msgId)).toHaveLength(0);
          }
        } else await heldUntilTheTurnEnds(name, next.msgId);
        expect(promptsWith(long.msgId)).toHaveLength(1);
      },
    );

    if (worker.midTurn) {
      it(`${name} (${protocol}): a message sent with busy: queue while the agent is in a turn is held until the turn ends, across a SIGKILL of B before it was handed over, then is a turn of its own, once`, async () => {
        const long = await send(name, `take your time and look around ${homes.get(name)?.cwd}`, {
          wait_for: 'queued',
        });
        await waitFor('the model to get the long one', () =>
          promptsWith(long.msgId).length > 0 ? true : undefined,
        );
        const next = await send(name, 'after your turn', { wait_for: 'queued', busy: 'queue' });
        await heldUntilTheTurnEnds(name, next.msgId);
        expect(promptsWith(long.msgId)).toHaveLength(1);
      });
    }

    it(`${name} (${protocol}): a permission request is the owner’s: nothing answers it, the command does not run, messages sent meanwhile are held; the owner approves (${worker.answerFrom === 'console' ? 'from the console in Chromium' : 'with the CLI'}), recorded on B; the agent runs the command and the held message follows`, async () => {
      const asking = await send(name, `please run the command ${name}`, { wait_for: 'submitted' });
      expect(asking.stage).toBe('submitted');
      await waitFor('the mirror to show the permission request', async () =>
        (await mirror(name)).includes('asks for a permission') ? true : undefined,
      );
      const held = await send(name, 'a message while the permission is asked', { wait_for: 'queued' });
      await sleep(3_000);
      expect(existsSync(marker(name))).toBe(false);
      expect(await stageOf(held.msgId)).toBe('queued');
      expect(requestsWith(held.msgId)).toHaveLength(0);
      // The worker reads as blocked, on B and in A's roster (B's presence), with its path and
      // agent; no attach command crosses (it names a socket on B).
      const seen = await waitFor('A’s roster to show the worker blocked', async () => {
        const roster = (await a.roster()) as unknown as Array<{
          name: string;
          host: string;
          status: string;
          agent?: Record<string, unknown>;
        }>;
        const entry = roster.find((e) => e.name === name && e.host === b.hostId);
        return entry?.status === 'active.blocked' ? entry : undefined;
      });
      // The open request and what it asks (the command the model asked for) travel with it.
      expect(seen.agent).toEqual({
        path: protocol,
        agent: expect.any(String),
        permission: { request: expect.any(Number), title: expect.stringContaining(name) },
      });
      let by: string;
      if (worker.answerFrom === 'console') {
        const { page, problems } = await openConsole(b, browser, 'owner');
        const row = page.locator('#roster tbody tr', { hasText: name });
        await row.locator('button', { hasText: 'Approve' }).click({ timeout: 15_000 });
        await page.locator('#roster-note', { hasText: `${name}: request 1 allowed once` }).waitFor();
        expect(await page.locator('#roster-error').textContent()).toBe('');
        await page.screenshot({ path: join(artifacts, 'console-approve.png') });
        expect(problems).toEqual([]);
        await page.close();
        by = 'owner (console)';
      } else {
        const answered = await b.cli(['approve', name, '--json']);
        expect(answered.code, answered.stderr).toBe(0);
        expect(JSON.parse(answered.stdout)).toMatchObject({ worker: name, decision: 'allow' });
        by = '(admin socket)';
      }
      await waitFor('the command to run', () => (existsSync(marker(name)) ? true : undefined), 30_000);
      await waitFor(
        'the held message to be submitted',
        async () => ((await stageOf(held.msgId)) === 'submitted' ? true : undefined),
        30_000,
      );
      await waitFor('the model to get it', () => (requestsWith(held.msgId).length > 0 ? true : undefined));
      // Recorded on B with who answered; a second answer finds nothing to answer.
      const db = new Database(join(b.home, 'events.db'), { readonly: true });
      try {
        const rows = db
          .prepare(
            "SELECT data FROM event_log WHERE actor_kind = 'entity' AND event = 'entity.ownerAnswered'",
          )
          .all() as Array<{ data: string }>;
        expect(rows.map((r) => JSON.parse(r.data))).toContainEqual(
          expect.objectContaining({ decision: 'allow', by: expect.stringContaining(by) }),
        );
      } finally {
        db.close();
      }
      const again = await b.cli(['deny', name]);
      expect(again.code).not.toBe(0);
      expect(again.stderr).toContain('asks for no permission now');
    });

    it(`${name} (${protocol}): SIGKILL of B ${worker.slowAcknowledgement ? 'after the message was given to the agent and before B recorded its acknowledgement' : 'as soon as its log says the message was given to the agent'}: after the restart it is submitted, and the model got it once`, async () => {
      // The agent acknowledges seconds after it is given the message, so B is killed in between:
      // Gemini with the model's answer, which it holds 4 s; Claude, given it in a turn whose model
      // holds its answer 4 s, at the turn's next boundary (it acknowledges a turn's own first
      // message at once).
      if (worker.midTurn) {
        const long = await send(name, `take your time and look around ${homes.get(name)?.cwd}`, {
          wait_for: 'queued',
        });
        await waitFor('the model to get the long one', () =>
          promptsWith(long.msgId).length > 0 ? true : undefined,
        );
      }
      const text = worker.midTurn ? 'we will survive a crash' : 'take your time, we will survive a crash';
      const sent = await send(name, text, { wait_for: 'queued' });
      const db = new Database(join(b.home, 'events.db'), { readonly: true });
      try {
        const typed = db.prepare("SELECT 1 FROM event_log WHERE msg_id = ? AND event = 'delivery.typed'");
        const deadline = Date.now() + 30_000;
        while (!typed.get(sent.msgId) && Date.now() < deadline) await sleep(10);
      } finally {
        db.close();
      }
      await b.kill9();
      await b.start();
      await waitFor(
        'submitted after the restart',
        async () => ((await stageOf(sent.msgId)) === 'submitted' ? true : undefined),
        60_000,
      );
      await waitFor('the model to get it', () => (requestsWith(sent.msgId).length > 0 ? true : undefined));
      await sleep(1_000);
      // Once: in the conversation of every later request once, and never a turn of its own twice.
      expect(JSON.stringify(requestsWith(sent.msgId).at(-1)?.body).split(sent.msgId)).toHaveLength(2);
      expect(promptsWith(sent.msgId).length).toBeLessThanOrEqual(1);
      // Given once: the host's mirror shows it once; B looked before giving it again.
      const given = (await mirror(name))
        .split('\n')
        .filter((line) => line.startsWith('▶') && line.includes(sent.msgId));
      expect(given).toHaveLength(1);
      const { trail } = deliveryOnB(sent.msgId);
      if (worker.slowAcknowledgement) {
        expect(trail.slice(0, 4), trail.join(' → ')).toEqual(['pending', 'injecting', 'typed', 'verifying']);
      }
      expect(trail.at(-1)).toBe('acked');
      expect(await agentHostHello(socketOf(name))).toMatchObject({ path: protocol });
    });
  }

  it("a worker B spawned for the main on A: its agent's permission requests are answered from A, refused to another main there, taken from the spawner with the CLI and from an operator in A's console in Chromium, each recorded on B with who answered; a worker registered by hand on B is not answered from A", async () => {
    const other = JSON.parse(
      (await a.cli(['register', '--kind', 'main', '--name', 'other', '--json'])).stdout,
    ) as Registered;
    queues.push(`agent.${other.gid}.inbox`);
    const spawned = await callTool(
      lead,
      'bridge_spawn',
      {
        host: b.hostId,
        profile: 'claude-native',
        name: 'helper',
        brief: 'please run the command spawnedone',
        wait_ms: 120_000,
      },
      180_000,
    );
    expect(spawned.isError, JSON.stringify(spawned.content)).toBeFalsy();
    const { gid } = spawned.structuredContent as { gid: string };
    queues.push(`agent.${gid}.inbox`);
    const address = `helper@${b.hostId}`;
    const blockedOnA = () =>
      waitFor(
        'A’s roster to show the spawned worker blocked',
        async () => {
          const roster = (await a.roster()) as Array<{
            name: string;
            host: string;
            status: string;
            spawned?: boolean;
            agent?: { permission?: { request: number } };
          }>;
          const entry = roster.find((e) => e.name === 'helper' && e.host === b.hostId);
          return entry?.status === 'active.blocked' ? entry : undefined;
        },
        90_000,
      );
    // What it asks shows on A: the request an answer from A names, and the command.
    expect(await blockedOnA()).toMatchObject({
      spawned: true,
      agent: {
        path: 'claude-stream',
        permission: { request: 1, title: expect.stringContaining('spawnedone') },
      },
    });

    // Not another main of A's; not without saying who answers.
    const refused = await a.cli(['approve', address, '--token', other.token]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain(`other@${a.hostId} may not answer helper's agent`);
    const anonymous = await a.cli(['approve', address]);
    expect(anonymous.code).not.toBe(0);
    expect(anonymous.stderr).toContain('--token');
    const byHand = await a.cli(['approve', `claude@${b.hostId}`, '--token', leadToken]);
    expect(byHand.code).not.toBe(0);
    expect(byHand.stderr).toContain('registered by hand');
    await sleep(1_000);
    expect(existsSync(marker('spawnedone'))).toBe(false);

    // The spawner, with the CLI on A.
    const answered = await a.cli(['approve', address, '--token', leadToken, '--json']);
    expect(answered.code, answered.stderr).toBe(0);
    expect(JSON.parse(answered.stdout)).toMatchObject({ worker: address, decision: 'allow', request: 1 });
    await waitFor('the command to run', () => (existsSync(marker('spawnedone')) ? true : undefined), 30_000);

    // An operator in A's console.
    const next = await send('helper', 'please run the command spawnedtwo', { wait_for: 'submitted' });
    expect(next.stage).toBe('submitted');
    await blockedOnA();
    const { page, problems } = await openConsole(a, browser, 'owner-a');
    const row = page.locator('#roster tbody tr', { hasText: 'helper' });
    await row.locator('td', { hasText: 'worker · claude-stream' }).waitFor({ timeout: 15_000 });
    await row
      .locator('td', { hasText: /^active\.blocked: request 2, .*spawnedtwo/ })
      .waitFor({ timeout: 15_000 });
    await row.locator('button', { hasText: 'Approve' }).click({ timeout: 15_000 });
    await page.locator('#roster-note', { hasText: `helper@${b.hostId}: request 2 allowed once` }).waitFor();
    expect(await page.locator('#roster-error').textContent()).toBe('');
    expect(problems).toEqual([]);
    await page.close();
    await waitFor(
      'the second command to run',
      () => (existsSync(marker('spawnedtwo')) ? true : undefined),
      30_000,
    );

    // B recorded both on the worker, with who answered from where, and marked them on the spawn.
    const db = new Database(join(b.home, 'events.db'), { readonly: true });
    try {
      const onWorker = db
        .prepare(
          "SELECT data FROM event_log WHERE actor_kind = 'entity' AND actor_id = ? AND event = 'entity.ownerAnswered' ORDER BY hlc",
        )
        .all(gid) as Array<{ data: string }>;
      expect(onWorker.map((r) => JSON.parse(r.data).by)).toEqual([`lead@${a.hostId}`, `owner-a@${a.hostId}`]);
      const onSpawn = db
        .prepare(
          "SELECT event FROM event_log WHERE actor_kind = 'spawn' AND event LIKE 'spawn.ownerAnswer%' ORDER BY hlc",
        )
        .all() as Array<{ event: string }>;
      expect(onSpawn.map((r) => r.event)).toEqual([
        'spawn.ownerAnswering',
        'spawn.ownerAnswered',
        'spawn.ownerAnswering',
        'spawn.ownerAnswered',
      ]);
    } finally {
      db.close();
    }
  });

  it("codex (codex-app-server): a person attached with `codex --remote` sees each delivered message in Codex's TUI; a turn the person starts there takes a message steered into it", async () => {
    const home = homes.get('codex');
    if (!home) throw new Error('no codex worker');
    const hello = await agentHostHello(socketOf('codex'));
    expect(hello.attach).toMatch(/^\S+ resume \S+ --remote unix:\/\/\S+$/);
    expect(await mirror('codex')).toContain(`to watch and take part: ${hello.attach}`);
    // B's status says it too, for each worker behind an agent host.
    const status = (await b.cli(['status'])).stdout;
    expect(status).toContain(
      `  codex: codex-app-server (${hello.agent}); to watch and take part: ${hello.attach}`,
    );
    expect(status).toMatch(/ {2}gemini: acp \(.+\)\n/);
    const [bin = '', ...args] = (hello.attach ?? '').split(' ');
    const tui = 'codex-tui';
    const session = ['-d', '-s', tui, '-x', '160', '-y', '50', 'env', '-i', ...envOf(home), bin, ...args];
    await runTmux(tmuxSocket, ['new-session', ...session]);
    const screen = () => runTmux(tmuxSocket, ['capture-pane', '-p', '-J', '-t', tui, '-S', '-300']);
    await waitFor(
      'the TUI to attach',
      async () => ((await screen()).includes('OpenAI Codex') ? true : undefined),
      60_000,
    );

    const sent = await send('codex', 'shown to the person too', { wait_for: 'submitted' });
    expect(sent.stage).toBe('submitted');
    await waitFor('the TUI to show the message', async () =>
      (await screen()).includes(`msg ${sent.msgId}] shown to the person too`) ? true : undefined,
    );

    // The person starts a turn in the TUI (the model holds its answer, then reads a file).
    const words = `take your time and look around ${home.cwd}, asks the person`;
    await runTmux(tmuxSocket, ['send-keys', '-t', tui, '-l', words]);
    await sleep(500);
    await runTmux(tmuxSocket, ['send-keys', '-t', tui, 'Enter']);
    await waitFor('the host to see the person’s turn', async () =>
      (await agentHostHello(socketOf('codex'))).status === 'working' ? true : undefined,
    );
    const steered = await send('codex', 'into the person’s turn', { wait_for: 'submitted' });
    expect(steered.stage).toBe('submitted');
    await waitFor('the turn’s next request', () =>
      requestsWith(steered.msgId).length > 0 ? true : undefined,
    );
    // One conversation: the person's words and the message in it, once.
    const body = JSON.stringify(requestsWith(steered.msgId).at(-1)?.body);
    expect(body).toContain('asks the person');
    expect(body.split(steered.msgId)).toHaveLength(2);
    await waitFor('the TUI to show it', async () =>
      (await screen()).includes(`msg ${steered.msgId}]`) ? true : undefined,
    );
    await waitFor(
      'the turn to end',
      async () => ((await agentHostHello(socketOf('codex'))).status === 'idle' ? true : undefined),
      30_000,
    );
    await runTmux(tmuxSocket, ['kill-session', '-t', tui]);
  });
});
