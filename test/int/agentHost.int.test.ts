import { mkdtemp, rm } from 'node:fs/promises';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type AgentHost, createAgentHost } from '../../src/agents/agentHost.js';
import {
  agentHostHello,
  agentHostRequest,
  createAgentHostInjector,
} from '../../src/panes/agentHostInjector.js';
import { DeferReason, type PaneInjector } from '../../src/panes/paneInjector.js';
import { agentHostMaxLine } from '../../src/wire/agentHost.js';
import { waitFor } from '../support/waitFor.js';

const fakeAgent = join(import.meta.dirname, '..', 'support', 'fakeAcpAgent.mjs');

/**
 * The agent host over a stand-in ACP agent (test/support/fakeAcpAgent.mjs), and the gateway's
 * injector over its socket: the steps of a delivery on the ACP path, holds, the owner's answer
 * to a permission, and what the host does with input that is not its protocol.
 */
describe('the agent host (ACP) and its injector', () => {
  let dir: string;
  let socketPath: string;
  let host: AgentHost;
  let injector: PaneInjector;
  let mirror: string[];
  /** Every prompt the agent got, in order. */
  const prompts = () => mirror.filter((line) => line.startsWith('▶ ')).map((line) => line.slice(2));
  const message = (marker: string, text: string) => ({ marker, text: `[msg ${marker}] ${text}` });

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'bridge-agent-host-'));
    socketPath = join(dir, 'agent.sock');
    mirror = [];
    host = createAgentHost({
      socketPath,
      command: process.execPath,
      args: [fakeAgent],
      cwd: dir,
      mirror: (line) => mirror.push(line),
    });
    await host.start();
    injector = createAgentHostInjector({ socketPath, acknowledgeTimeoutMs: 2_000 });
  });
  afterEach(async () => {
    await host.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('hands a message over once, acknowledged; handing it again (a retry, a restarted gateway) gives no second prompt', async () => {
    expect(await agentHostHello(socketPath)).toMatchObject({
      path: 'acp',
      agent: 'fake-acp 1.0',
      status: 'idle',
    });
    const m = message('m1', 'hello');
    expect(await injector.type(m)).toEqual({ kind: 'typed' });
    expect(await injector.submit(m)).toMatchObject({
      kind: 'submitted',
      how: 'fake-acp 1.0 acknowledged the prompt (ACP)',
    });
    expect(await injector.locate(m)).toBe('submitted');
    expect(await injector.type(m)).toMatchObject({ kind: 'submitted' });
    expect(prompts()).toEqual(['[msg m1] hello']);
  });

  it('holds a message while the agent is in a turn (busy), and takes it once the turn ends', async () => {
    const slow = message('s1', 'slow one');
    expect(await injector.type(slow)).toEqual({ kind: 'typed' });
    expect(await injector.inspect()).toMatchObject({ reason: DeferReason.busy });
    expect(await injector.type(message('s2', 'next'))).toMatchObject({
      kind: 'deferred',
      reason: DeferReason.busy,
    });
    expect(await injector.locate(message('s2', 'next'))).toBe('absent');
    expect(await injector.submit(slow)).toMatchObject({ kind: 'submitted' });
    await waitFor('the turn to end', async () =>
      (await injector.inspect()) === undefined ? true : undefined,
    );
    expect(await injector.type(message('s2', 'next'))).toEqual({ kind: 'typed' });
    expect(prompts()).toEqual(['[msg s1] slow one', '[msg s2] next']);
  });

  it('a prompt the agent refuses is not taken: submit says so, and it can be handed again', async () => {
    const m = message('r1', 'refuse this');
    expect(await injector.type(m)).toEqual({ kind: 'typed' });
    expect(await injector.submit(m)).toMatchObject({ kind: 'deferred', reason: DeferReason.notShown });
    expect(await injector.locate(m)).toBe('absent');
    expect(mirror.some((line) => line.includes('the prompt was refused'))).toBe(true);
  });

  it('a prompt the agent neither answers nor updates within the wait is not submitted, and stays handed', async () => {
    const quiet = createAgentHostInjector({ socketPath, acknowledgeTimeoutMs: 300 });
    const m = message('q1', 'hang on this');
    expect(await quiet.type(m)).toEqual({ kind: 'typed' });
    expect(await quiet.submit(m)).toMatchObject({ kind: 'not-submitted' });
    expect(await quiet.locate(m)).toBe('typed');
    // Handed once: a retry does not prompt again.
    expect(await quiet.type(m)).toEqual({ kind: 'typed' });
    expect(prompts()).toEqual(['[msg q1] hang on this']);
  });

  it('a turn that ends without an update still took its prompt', async () => {
    const m = message('e1', 'silent one');
    await injector.type(m);
    expect(await injector.submit(m)).toMatchObject({ kind: 'submitted' });
  });

  it('a permission request holds every message until the owner answers; nothing answers it for them', async () => {
    const asking = message('p1', 'permission please');
    await injector.type(asking);
    await injector.submit(asking);
    expect(await injector.inspect()).toMatchObject({
      reason: DeferReason.blocked,
      detail: expect.stringContaining('touch PWNED'),
    });
    expect(await injector.type(message('p2', 'meanwhile'))).toMatchObject({
      kind: 'deferred',
      reason: DeferReason.blocked,
    });
    await sleep(300);
    expect(mirror.some((line) => line.startsWith('◀ permission'))).toBe(false);
    expect(await agentHostRequest(socketPath, { op: 'answer', decision: 'deny' }, 2_000)).toEqual({
      answered: 1,
    });
    await waitFor('the turn to end', async () =>
      (await injector.inspect()) === undefined ? true : undefined,
    );
    expect(mirror).toContain('◀ permission: {"outcome":"selected","optionId":"reject"}');
    await expect(agentHostRequest(socketPath, { op: 'answer', decision: 'allow' }, 2_000)).rejects.toThrow(
      'asks for no permission now',
    );
    expect(await injector.type(message('p2', 'meanwhile'))).toEqual({ kind: 'typed' });
  });

  it('input that is not its protocol gets an error answer, and the host goes on', async () => {
    const raw = (line: string) =>
      new Promise<string>((resolve) => {
        const socket = createConnection(socketPath, () => socket.write(line));
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
    expect(await agentHostHello(socketPath)).toMatchObject({ status: 'idle' });
  });
});
