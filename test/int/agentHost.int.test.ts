import { mkdtemp, rm } from 'node:fs/promises';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { type AgentHost, createAgentHost } from '../../src/agents/agentHost.js';
import {
  agentHostHello,
  agentHostRequest,
  createAgentHostInjector,
} from '../../src/panes/agentHostInjector.js';
import { DeferReason, type PaneInjector } from '../../src/panes/paneInjector.js';
import { agentHostMaxLine, type NativePath } from '../../src/wire/agentHost.js';
import { waitFor } from '../support/waitFor.js';

/**
 * The agent host over stand-ins of the three protocols (test/support/fakeAcpAgent.mjs,
 * fakeClaudeStream.mjs, fakeCodexAppServer.mjs), and the gateway's injector over its socket:
 * the steps of a delivery on each path, holds and the busy policy, the owner's answer to a
 * permission, a person's TUI attached to Codex's app-server, and what the host does with input
 * that is not its protocol.
 */
/** An agent host over a stand-in agent in a temp dir, started before each case and stopped after. */
function hostOver(protocol: NativePath, fake: string) {
  const fixture = {
    dir: '',
    socketPath: '',
    host: undefined as unknown as AgentHost,
    injector: undefined as unknown as PaneInjector,
    mirror: [] as string[],
    /** Every message the agent was given, in order. */
    prompts: () => fixture.mirror.filter((line) => line.startsWith('▶ ')).map((line) => line.slice(2)),
  };
  beforeEach(async () => {
    fixture.dir = await mkdtemp(join(tmpdir(), `bridge-agent-host-${protocol}-`));
    fixture.socketPath = join(fixture.dir, 'agent.sock');
    fixture.mirror = [];
    fixture.host = createAgentHost({
      socketPath: fixture.socketPath,
      protocol,
      command: process.execPath,
      args: [join(import.meta.dirname, '..', 'support', fake)],
      cwd: fixture.dir,
      mirror: (line) => fixture.mirror.push(line),
    });
    await fixture.host.start();
    fixture.injector = createAgentHostInjector({
      socketPath: fixture.socketPath,
      acknowledgeTimeoutMs: 2_000,
    });
  });
  afterEach(async () => {
    await fixture.host.stop();
    await rm(fixture.dir, { recursive: true, force: true });
  });
  return fixture;
}

const message = (marker: string, text: string) => ({ marker, text: `[msg ${marker}] ${text}` });

describe('the agent host (ACP) and its injector', () => {
  const f = hostOver('acp', 'fakeAcpAgent.mjs');

  it('hands a message over once, acknowledged; handing it again (a retry, a restarted gateway) gives no second prompt', async () => {
    expect(await agentHostHello(f.socketPath)).toMatchObject({
      path: 'acp',
      agent: 'fake-acp 1.0',
      status: 'idle',
    });
    const m = message('m1', 'hello');
    expect(await f.injector.type(m)).toEqual({ kind: 'typed' });
    expect(await f.injector.submit(m)).toMatchObject({
      kind: 'submitted',
      how: 'fake-acp 1.0 acknowledged the prompt (acp)',
    });
    expect(await f.injector.locate(m)).toBe('submitted');
    expect(await f.injector.type(m)).toMatchObject({ kind: 'submitted' });
    expect(f.prompts()).toEqual(['[msg m1] hello']);
  });

  it('holds a message while the agent is in a turn (busy), and takes it once the turn ends', async () => {
    const slow = message('s1', 'slow one');
    expect(await f.injector.type(slow)).toEqual({ kind: 'typed' });
    expect(await f.injector.inspect()).toMatchObject({ reason: DeferReason.busy });
    expect(await f.injector.type(message('s2', 'next'))).toMatchObject({
      kind: 'deferred',
      reason: DeferReason.busy,
    });
    expect(await f.injector.locate(message('s2', 'next'))).toBe('absent');
    expect(await f.injector.submit(slow)).toMatchObject({ kind: 'submitted' });
    await waitFor('the turn to end', async () =>
      (await f.injector.inspect()) === undefined ? true : undefined,
    );
    expect(await f.injector.type(message('s2', 'next'))).toEqual({ kind: 'typed' });
    expect(f.prompts()).toEqual(['[msg s1] slow one', '[msg s2] next']);
  });

  it('a prompt the agent refuses is not taken: submit says so, and it can be handed again', async () => {
    const m = message('r1', 'refuse this');
    expect(await f.injector.type(m)).toEqual({ kind: 'typed' });
    expect(await f.injector.submit(m)).toMatchObject({ kind: 'deferred', reason: DeferReason.notShown });
    expect(await f.injector.locate(m)).toBe('absent');
    expect(f.mirror.some((line) => line.includes('the prompt was refused'))).toBe(true);
  });

  it('a prompt the agent neither answers nor updates within the wait is not submitted, and stays handed', async () => {
    const quiet = createAgentHostInjector({ socketPath: f.socketPath, acknowledgeTimeoutMs: 300 });
    const m = message('q1', 'hang on this');
    expect(await quiet.type(m)).toEqual({ kind: 'typed' });
    expect(await quiet.submit(m)).toMatchObject({ kind: 'not-submitted' });
    expect(await quiet.locate(m)).toBe('typed');
    // Handed once: a retry does not prompt again.
    expect(await quiet.type(m)).toEqual({ kind: 'typed' });
    expect(f.prompts()).toEqual(['[msg q1] hang on this']);
  });

  it('a turn that ends without an update still took its prompt', async () => {
    const m = message('e1', 'silent one');
    await f.injector.type(m);
    expect(await f.injector.submit(m)).toMatchObject({ kind: 'submitted' });
  });

  it('a permission request holds every message until the owner answers; nothing answers it for them', async () => {
    const asking = message('p1', 'permission please');
    await f.injector.type(asking);
    await f.injector.submit(asking);
    expect(await f.injector.inspect()).toMatchObject({
      reason: DeferReason.blocked,
      detail: expect.stringContaining('touch PWNED'),
    });
    expect(await f.injector.type(message('p2', 'meanwhile'))).toMatchObject({
      kind: 'deferred',
      reason: DeferReason.blocked,
    });
    await sleep(300);
    expect(f.mirror.some((line) => line.startsWith('◀ permission'))).toBe(false);
    expect(await agentHostRequest(f.socketPath, { op: 'answer', decision: 'deny' }, 2_000)).toEqual({
      answered: 1,
    });
    await waitFor('the turn to end', async () =>
      (await f.injector.inspect()) === undefined ? true : undefined,
    );
    expect(f.mirror).toContain('◀ permission: {"outcome":"selected","optionId":"reject"}');
    await expect(agentHostRequest(f.socketPath, { op: 'answer', decision: 'allow' }, 2_000)).rejects.toThrow(
      'asks for no permission now',
    );
    expect(await f.injector.type(message('p2', 'meanwhile'))).toEqual({ kind: 'typed' });
  });

  it('its status, as the gateway watches it: idle, working in a turn, blocked while a permission is asked, unknown once the host is gone', async () => {
    const seen: string[] = [];
    const watcher = createAgentHostInjector({ socketPath: f.socketPath, statusPollMs: 20 });
    const stop = watcher.watchStatus((status) => seen.push(status));
    await waitFor('idle', () => (seen.includes('idle') ? true : undefined));
    const slow = message('w1', 'slow one');
    await f.injector.type(slow);
    await waitFor('working', () => (seen.includes('working') ? true : undefined));
    await f.injector.submit(slow);
    const asking = message('w2', 'permission please');
    await waitFor('idle again', async () =>
      (await f.injector.type(asking)).kind === 'typed' ? true : undefined,
    );
    await waitFor('blocked', () => (seen.includes('blocked') ? true : undefined));
    await agentHostRequest(f.socketPath, { op: 'answer', decision: 'deny' }, 2_000);
    await f.host.stop();
    await waitFor('unknown', () => (seen.at(-1) === 'unknown' ? true : undefined));
    stop();
    expect(seen[0]).toBe('idle');
    // Reported on change only.
    expect(seen.every((status, i) => i === 0 || status !== seen[i - 1])).toBe(true);
  });

  it('input that is not its protocol gets an error answer, and the host goes on', async () => {
    const raw = (line: string) =>
      new Promise<string>((resolve) => {
        const socket = createConnection(f.socketPath, () => socket.write(line));
        let got = '';
        socket.setEncoding('utf8');
        socket.on('data', (chunk: string) => {
          got += chunk;
        });
        socket.on('close', () => resolve(got));
      });
    expect(JSON.parse(await raw('not json\n'))).toEqual({ ok: false, error: 'the request is not JSON' });
    expect(JSON.parse(await raw('{"op":"deliver","marker":""}\n'))).toMatchObject({ ok: false });
    expect(JSON.parse(await raw(`${'x'.repeat(agentHostMaxLine + 10)}\n`))).toMatchObject({
      ok: false,
      error: expect.stringContaining('longer than'),
    });
    expect(await agentHostHello(f.socketPath)).toMatchObject({ status: 'idle' });
  });
});

describe("the agent host over Claude Code's stream-json (a stand-in) and its injector", () => {
  const f = hostOver('claude-stream', 'fakeClaudeStream.mjs');

  it('a message is submitted when the agent takes it (the init of its turn, or its replay), once; handing it again writes nothing', async () => {
    expect(await agentHostHello(f.socketPath)).toMatchObject({ path: 'claude-stream', status: 'idle' });
    const m = message('c1', 'hello');
    expect(await f.injector.type(m)).toEqual({ kind: 'typed' });
    expect(await f.injector.submit(m)).toMatchObject({ kind: 'submitted' });
    expect(await f.injector.type(m)).toMatchObject({ kind: 'submitted' });
    expect(f.prompts()).toEqual(['[msg c1] hello']);
    expect(await agentHostHello(f.socketPath)).toMatchObject({ agent: 'Claude Code 0.0-fake' });
  });

  it('a message for an agent in a turn is given at once and taken into that turn', async () => {
    const slow = message('c2', 'slow one');
    await f.injector.type(slow);
    expect(await f.injector.submit(slow)).toMatchObject({ kind: 'submitted' });
    expect(await f.injector.inspect()).toBeUndefined();
    const mid = message('c3', 'mid-turn');
    expect(await f.injector.type(mid)).toEqual({ kind: 'typed' });
    expect(await f.injector.submit(mid)).toMatchObject({ kind: 'submitted' });
    await waitFor('the turn to end', () => (f.mirror.some((l) => l.startsWith('■')) ? true : undefined));
    // One turn: the second message joined the first's.
    expect(f.mirror.filter((l) => l.startsWith('■'))).toHaveLength(1);
    expect(f.prompts()).toEqual(['[msg c2] slow one', '[msg c3] mid-turn']);
  });

  it('a message that says busy: queue waits for the turn to end and is a turn of its own; the host refuses it mid-turn too', async () => {
    const slow = message('q1', 'slow one');
    await f.injector.type(slow);
    expect(await f.injector.submit(slow)).toMatchObject({ kind: 'submitted' });
    const queued = { ...message('q2', 'after the turn'), busy: 'queue' as const };
    expect(await f.injector.inspect(queued)).toMatchObject({ reason: DeferReason.busy });
    expect(await f.injector.type(queued)).toMatchObject({ kind: 'deferred', reason: DeferReason.busy });
    // The host's own check, whatever the gateway read before: a queue message is not steered.
    expect(
      await agentHostRequest(
        f.socketPath,
        { op: 'deliver', marker: 'q2', text: queued.text, busy: 'queue' },
        2_000,
      ),
    ).toMatchObject({ state: 'absent', held: { status: 'working' } });
    await waitFor('the turn to end', async () =>
      (await f.injector.inspect(queued)) === undefined ? true : undefined,
    );
    expect(await f.injector.type(queued)).toEqual({ kind: 'typed' });
    expect(await f.injector.submit(queued)).toMatchObject({ kind: 'submitted' });
    await waitFor('the second turn to end', () =>
      f.mirror.filter((l) => l.startsWith('■')).length === 2 ? true : undefined,
    );
    expect(f.prompts()).toEqual(['[msg q1] slow one', '[msg q2] after the turn']);
  });

  it("a worker whose policy is queue reads working while its agent is in a turn, and a message's own steer still goes in", async () => {
    const queueing = createAgentHostInjector({ socketPath: f.socketPath, busy: 'queue', statusPollMs: 50 });
    const seen: string[] = [];
    const unwatch = queueing.watchStatus((status) => seen.push(status));
    try {
      const slow = message('w1', 'slow one');
      await queueing.type(slow);
      expect(await queueing.submit(slow)).toMatchObject({ kind: 'submitted' });
      await waitFor('the worker to read working', () => (seen.includes('working') ? true : undefined));
      expect(await queueing.type(message('w2', 'held'))).toMatchObject({ kind: 'deferred' });
      const steer = { ...message('w3', 'steered in'), busy: 'steer' as const };
      expect(await queueing.type(steer)).toEqual({ kind: 'typed' });
      await waitFor('the turn to end', () => (f.mirror.some((l) => l.startsWith('■')) ? true : undefined));
      expect(f.mirror.filter((l) => l.startsWith('■'))).toHaveLength(1);
      expect(f.prompts()).toEqual(['[msg w1] slow one', '[msg w3] steered in']);
      await waitFor('the worker to read idle again', () => (seen.at(-1) === 'idle' ? true : undefined));
    } finally {
      unwatch();
    }
  });

  it("a tool permission is the owner's: messages are held, the owner allows once, the turn goes on", async () => {
    const asking = message('c4', 'permission please');
    await f.injector.type(asking);
    await f.injector.submit(asking);
    await waitFor('the permission request', async () =>
      (await f.injector.inspect())?.reason === DeferReason.blocked ? true : undefined,
    );
    expect(await f.injector.type(message('c5', 'meanwhile'))).toMatchObject({
      kind: 'deferred',
      reason: DeferReason.blocked,
    });
    expect(await agentHostRequest(f.socketPath, { op: 'answer', decision: 'allow' }, 2_000)).toEqual({
      answered: 1,
    });
    await waitFor('the answer to reach the agent', () =>
      f.mirror.includes('◀ permission: allow') ? true : undefined,
    );
    expect(await f.injector.type(message('c5', 'meanwhile'))).toEqual({ kind: 'typed' });
  });

  it('a message the agent never takes is not submitted, and stays handed', async () => {
    const quiet = createAgentHostInjector({ socketPath: f.socketPath, acknowledgeTimeoutMs: 300 });
    const m = message('c6', 'ignore this');
    expect(await quiet.type(m)).toEqual({ kind: 'typed' });
    expect(await quiet.submit(m)).toMatchObject({ kind: 'not-submitted' });
    expect(await quiet.locate(m)).toBe('typed');
  });
});

describe("the agent host over Codex's app-server on a unix socket (a stand-in) and its injector", () => {
  const f = hostOver('codex-app-server', 'fakeCodexAppServer.mjs');
  /** A client of the same app-server beside the host: a person's TUI attached to it. */
  const attachTui = async () => {
    const ws = new WebSocket(`ws+unix://${f.socketPath}.agent:/`);
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    let id = 0;
    return {
      startTurn: (text: string) =>
        ws.send(
          JSON.stringify({
            id: ++id,
            method: 'turn/start',
            params: { threadId: 'fake-thread-1', input: [{ type: 'text', text }] },
          }),
        ),
      close: () => ws.close(),
    };
  };

  it('speaks to the app-server over its socket, which a person can attach to: hello prints the command', async () => {
    const hello = await agentHostHello(f.socketPath);
    expect(hello).toMatchObject({ path: 'codex-app-server', agent: 'Codex CLI 0.0-fake', status: 'idle' });
    expect(hello.attach).toBe(
      `${process.execPath} resume fake-thread-1 --remote unix://${f.socketPath}.agent`,
    );
    expect(f.mirror).toContain(`── to watch and take part: ${hello.attach}`);
    const m = message('x1', 'hello');
    expect(await f.injector.type(m)).toEqual({ kind: 'typed' });
    expect(await f.injector.submit(m)).toMatchObject({
      kind: 'submitted',
      how: expect.stringContaining('codex-app-server'),
    });
    expect(f.prompts()).toEqual(['[msg x1] hello']);
  });

  it('a message for an agent in a turn steers into it; one that says busy: queue waits for the turn to end', async () => {
    const slow = message('x2', 'slow one');
    await f.injector.type(slow);
    expect(await f.injector.submit(slow)).toMatchObject({ kind: 'submitted' });
    const queued = { ...message('x3', 'after it'), busy: 'queue' as const };
    expect(await f.injector.type(queued)).toMatchObject({ kind: 'deferred', reason: DeferReason.busy });
    const steered = message('x4', 'into it');
    expect(await f.injector.type(steered)).toEqual({ kind: 'typed' });
    expect(await f.injector.submit(steered)).toMatchObject({ kind: 'submitted' });
    await waitFor('the turn to end', async () =>
      (await f.injector.inspect(queued)) === undefined ? true : undefined,
    );
    expect(await f.injector.type(queued)).toEqual({ kind: 'typed' });
    expect(f.mirror.filter((l) => l.startsWith('■'))).toHaveLength(1);
  });

  it('a turn a person starts in an attached TUI reads as working: a queue message waits for it, a steer one goes into it', async () => {
    const tui = await attachTui();
    try {
      tui.startTurn('slow, from the person');
      await waitFor('the host to see the person’s turn', async () =>
        (await agentHostHello(f.socketPath)).status === 'working' ? true : undefined,
      );
      const queued = { ...message('p1', 'after the person'), busy: 'queue' as const };
      expect(await f.injector.inspect(queued)).toMatchObject({ reason: DeferReason.busy });
      const steered = message('p2', 'into the person’s turn');
      expect(await f.injector.type(steered)).toEqual({ kind: 'typed' });
      expect(await f.injector.submit(steered)).toMatchObject({ kind: 'submitted' });
      await waitFor('the person’s turn to end', async () =>
        (await agentHostHello(f.socketPath)).status === 'idle' ? true : undefined,
      );
      expect(f.prompts()).toEqual(['[msg p2] into the person’s turn']);
    } finally {
      tui.close();
    }
  });
});
