import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { promisify } from 'node:util';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import amqp, { type Channel, type ChannelModel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  broadcastAllKey,
  controlKey,
  controlSpec,
  deploymentKey,
  Exchange,
  inboxName,
} from '../../src/federation/topology.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import {
  brokerEnv,
  brokerUri,
  removeDeadLettersOf,
  takeDeadLetters,
  testDeployment,
  waitFor,
} from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';
import { startTmuxServer, type TmuxTestServer } from '../support/tmux.js';

const run = promisify(execFile);

interface Registered {
  gid: string;
  token: string;
  name: string;
}

interface Drained {
  msgId: string;
  kind: string;
  text: string;
}

/** Where RabbitMQ keeps its queues' files on this machine (`rabbit_mnesia:dir()`). */
async function brokerDataDir(): Promise<string> {
  const { stdout } = await run('rabbitmqctl', ['eval', 'rabbit_mnesia:dir().']);
  return stdout.trim().replace(/^"|"$/g, '');
}

/** The files under `dir` whose bytes hold `marker` (grep, binary files included). */
async function filesHolding(dir: string, marker: string): Promise<string[]> {
  try {
    const { stdout } = await run('grep', ['-rlaF', marker, dir], { maxBuffer: 1 << 24 });
    return stdout.split('\n').filter(Boolean);
  } catch (err) {
    if ((err as { code?: number }).code === 1) return []; // grep: nothing found
    throw err;
  }
}

/**
 * Issue 34: what the broker holds of a message is sealed. Two gateway processes on the shared
 * broker, with their default security.encryption (required): a SEND, a BROADCAST, an ASK and its
 * ANSWER and a SPAWN brief, each with a marker in its text, arrive intact; a queue of the test's
 * own, bound to every key they travel on, gets a copy of each, and neither those bytes, nor the
 * dead letter one of them becomes, nor RabbitMQ's files on disk hold the marker. The same grep
 * finds a marker published in clear, so it would see one that leaked.
 */
describe('the broker holds no readable text', () => {
  const marker = `MARK${randomUUID().replaceAll('-', '')}`;
  const tap = `test.tap.${randomUUID()}`;
  const queues: string[] = [tap];
  const clients: Client[] = [];
  let tmux: TmuxTestServer;
  let a: GatewayProcess;
  let b: GatewayProcess;
  let mainA: Registered;
  let mainB: Registered;
  let mcpA: Client;
  let mcpB: Client;
  let connection: ChannelModel;
  let channel: Channel;

  const register = async (g: GatewayProcess, name: string): Promise<Registered> => {
    const registered = await g.register('main', name);
    queues.push(inboxName(registered.gid));
    return registered;
  };

  const drainUntil = (client: Client, count: number): Promise<Drained[]> => {
    const got: Drained[] = [];
    return waitFor(`${count} message(s)`, async () => {
      const result = await callTool(client, 'bridge_drain', {});
      got.push(...(result.structuredContent as { messages: Drained[] }).messages);
      return got.length >= count ? got : undefined;
    });
  };

  const call = async (client: Client, tool: string, args: Record<string, unknown>) => {
    const result = await callTool(client, tool, args);
    expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
    return result.structuredContent as Record<string, unknown>;
  };

  /** Every message the tap queue holds now, as bytes (taken and acked). */
  const tapped = async (): Promise<Buffer[]> => {
    const out: Buffer[] = [];
    for (;;) {
      const message = await channel.get(tap, { noAck: true });
      if (message === false) return out;
      out.push(message.content);
    }
  };

  beforeAll(async () => {
    tmux = await startTmuxServer();
    a = new GatewayProcess({ hostId: uniqueHostId('sealA'), env: { ...brokerEnv } });
    b = new GatewayProcess({
      hostId: uniqueHostId('sealB'),
      env: { ...brokerEnv },
      config: {
        spawn: { tmuxSocket: tmux.socket, tmuxSession: `sealed-${randomUUID().slice(0, 8)}` },
        profiles: { idle: { command: 'sleep 600' } },
      },
    });
    await Promise.all([a.start(), b.start()]);
    queues.push(controlSpec(a.hostId).name, controlSpec(b.hostId).name);
    mainA = await register(a, 'mainA');
    mainB = await register(b, 'mainB');
    connection = await amqp.connect(brokerUri);
    channel = await connection.createChannel();
    // The test's own tap: a copy of everything sent to the two mains, their broadcasts and the
    // two hosts' control queues, kept (durable, persistent) as the broker keeps any message.
    await channel.assertQueue(tap, { durable: true });
    for (const key of [mainA.gid, mainB.gid, deploymentKey(testDeployment, broadcastAllKey)])
      await channel.bindQueue(tap, Exchange.msg, key);
    for (const host of [a.hostId, b.hostId]) await channel.bindQueue(tap, Exchange.control, controlKey(host));
    mcpA = await connectMcp(a.mcpUrl, mainA.token);
    mcpB = await connectMcp(b.mcpUrl, mainB.token);
    clients.push(mcpA, mcpB);
    await a.waitForInRoster('mainB', b.hostId);
    await b.waitForInRoster('mainA', a.hostId);
  }, 120_000);

  afterAll(async () => {
    for (const c of clients) await c.close().catch(() => {});
    await channel?.close().catch(() => {});
    await connection?.close().catch(() => {});
    for (const g of [a, b]) await g?.dispose();
    await tmux?.kill();
    await deleteQueues(queues);
    await removeDeadLettersOf([a.hostId, b.hostId]);
  });

  it('a SEND, a BROADCAST, an ASK and its ANSWER, a SPAWN brief: intact at their recipients, sealed on the broker and on its disk', async () => {
    await call(mcpA, 'bridge_send', { to: `mainB@${b.hostId}`, text: `send ${marker}` });
    await call(mcpA, 'bridge_broadcast', { text: `broadcast ${marker}` });
    const asking = callTool(mcpA, 'bridge_ask', {
      to: `mainB@${b.hostId}`,
      question: `ask ${marker}`,
      timeout_ms: 30_000,
    });
    const got = await drainUntil(mcpB, 3);
    expect(got.map((m) => [m.kind, m.text]).sort()).toEqual(
      [
        ['ASK', `ask ${marker}`],
        ['BROADCAST', `broadcast ${marker}`],
        ['SEND', `send ${marker}`],
      ].sort(),
    );
    const ask = got.find((m) => m.kind === 'ASK') as Drained;
    await call(mcpB, 'bridge_answer', { ask_id: ask.msgId, text: `answer ${marker}` });
    const answered = await asking;
    expect(JSON.stringify(answered.structuredContent)).toContain(`answer ${marker}`);
    const spawned = await call(mcpA, 'bridge_spawn', {
      host: b.hostId,
      profile: 'idle',
      brief: `spawn ${marker}`,
      wait_ms: 30_000,
    });
    expect(spawned).toMatchObject({ status: 'running' });

    // What the broker routed: SEND, BROADCAST, ASK, ANSWER, SPAWN, and receipts and results.
    const held = await waitFor('the tap holding every kind', async () => {
      const bytes = await tapped();
      return bytes.length > 0 ? bytes : undefined;
    });
    await new Promise((resolve) => setTimeout(resolve, 500));
    held.push(...(await tapped()));
    const kinds = held.map((bytes) => (JSON.parse(bytes.toString('utf8')) as { kind: string }).kind);
    for (const kind of ['SEND', 'BROADCAST', 'ASK', 'ANSWER', 'SPAWN']) expect(kinds).toContain(kind);
    expect(held.filter((bytes) => bytes.includes(marker))).toEqual([]);
    for (const bytes of held) {
      const json = JSON.parse(bytes.toString('utf8')) as { v: string; kind: string; sealed?: unknown };
      if (['SEND', 'BROADCAST', 'ASK', 'ANSWER', 'SPAWN'].includes(json.kind)) {
        expect(json.v).toBe('2.0');
        expect(json.sealed).toBeDefined();
      }
    }
  }, 120_000);

  it('a dead letter stays sealed in bridge.dlq, and RabbitMQ’s files hold no marker (one in clear is found)', async () => {
    // An ask that expires unanswered on B: B dead-letters it with the bytes it came in.
    const asked = await callTool(mcpA, 'bridge_ask', {
      to: `mainB@${b.hostId}`,
      question: `expiring ${marker}`,
      timeout_ms: 1_000,
    });
    const sent = {
      msgId: (asked.structuredContent as { error: { details: { askId: string } } }).error.details.askId,
    };
    const [letter] = await waitFor(
      'the dead letter',
      async () => {
        const letters = await takeDeadLetters(
          (headers, messageId) => messageId === sent.msgId && headers['x-bridge-host'] === b.hostId,
        );
        return letters.length > 0 ? letters : undefined;
      },
      20_000,
    );
    expect(letter?.headers['x-bridge-reason']).toBe('expired');
    expect(letter?.content.includes(marker)).toBe(false);
    expect(letter?.content.includes('"sealed"')).toBe(true);

    // Back in a queue the broker keeps on disk, beside a control message published in clear.
    const clear = `CLEAR${randomUUID().replaceAll('-', '')}`;
    await channel.close();
    const confirm = await connection.createConfirmChannel();
    const put = (content: Buffer) =>
      new Promise<void>((resolve, reject) =>
        confirm.sendToQueue(tap, content, { persistent: true }, (err) => (err ? reject(err) : resolve())),
      );
    await put(letter?.content as Buffer);
    await put(Buffer.from(`a control in clear: ${clear}`));
    channel = confirm;
    const dir = await brokerDataDir();
    // Confirmed persistent messages are on disk; the clear one shows the grep would see a leak.
    await waitFor('the clear control on disk', async () =>
      (await filesHolding(dir, clear)).length > 0 ? true : undefined,
    );
    expect(await filesHolding(dir, marker)).toEqual([]);
  }, 60_000);
});
