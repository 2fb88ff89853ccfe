import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import amqp from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { namedUuid } from '../../src/wire/ids.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { brokerEnv, brokerUri, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';

interface Entity {
  gid: string;
  token: string;
}
interface Message {
  msgId: string;
  text: string;
}

/** Messages live this long: what a main that never drains holds dead-letters as expired. */
const ttlMs = 4_000;
const flood = 300;

/**
 * Takes every dead letter with one of `msgIds` out of the shared `bridge.dlq` (the rest go
 * back), with its reason: the gateway's `x-bridge-reason`, else the broker's `x-death` reason.
 */
async function takeDeadLetters(msgIds: ReadonlySet<string>): Promise<Map<string, string[]>> {
  const connection = await amqp.connect(brokerUri);
  const found = new Map<string, string[]>();
  try {
    const channel = await connection.createChannel();
    for (;;) {
      const message = await channel.get('bridge.dlq', { noAck: false });
      if (message === false) break;
      const id = message.properties.messageId as string | undefined;
      if (id === undefined || !msgIds.has(id)) continue;
      const headers = message.properties.headers ?? {};
      const deaths = headers['x-death'] as Array<{ reason?: string }> | undefined;
      const reason = String(headers['x-bridge-reason'] ?? deaths?.[0]?.reason ?? '');
      found.set(id, [...(found.get(id) ?? []), reason]);
      channel.ack(message);
    }
    await channel.close();
  } finally {
    await connection.close();
  }
  return found;
}

/**
 * R-H1 under load: a main on another host never drains. Its gateway holds what its prefetch
 * allows, its capped inbox takes a few more, and the broker refuses the rest to the sender at
 * once (INBOX_FULL). Nothing vanishes: every message the sender tried ends either delivered to
 * a main that drains, or in bridge.dlq exactly once with a reason (maxlen for the refused,
 * expired for what outlived its TTL unread), and the gateways stay healthy throughout.
 */
describe('a main that never drains, under a flood', () => {
  const gateways: GatewayProcess[] = [];
  const clients: Client[] = [];
  const queues: string[] = [];
  let origin: GatewayProcess;
  let receiver: GatewayProcess;
  const entity: Record<string, Entity> = {};
  const mcp: Record<string, Client> = {};

  const register = async (g: GatewayProcess, name: string): Promise<Entity> => {
    const r = await g.cli(['register', '--kind', 'main', '--name', name, '--json']);
    expect(r.code, r.stderr || r.stdout).toBe(0);
    const e = JSON.parse(r.stdout) as Entity;
    queues.push(`agent.${e.gid}.inbox`);
    entity[name] = e;
    return e;
  };

  beforeAll(async () => {
    origin = new GatewayProcess({
      hostId: uniqueHostId('flood-a'),
      env: { ...brokerEnv },
      config: { broker: { heartbeatMs: 300 }, delivery: { ttlMs } },
    });
    receiver = new GatewayProcess({
      hostId: uniqueHostId('flood-b'),
      env: { ...brokerEnv },
      config: {
        broker: { heartbeatMs: 300, prefetch: 20, inboxMaxLength: 30 },
        // One sender fills the inbox here: the caps themselves are under test, not the share.
        limits: { senderInboxShare: 1 },
        remind: { firstMs: 500, maxMs: 1_000 },
      },
    });
    gateways.push(origin, receiver);
    queues.push(`control.${origin.hostId}`, `control.${receiver.hostId}`);
    await Promise.all(gateways.map((g) => g.start()));
    await register(origin, 'sender');
    await register(receiver, 'sink');
    await register(receiver, 'reader');
    for (const [g, name] of [
      [origin, 'sender'],
      [receiver, 'reader'],
    ] as const) {
      const client = await connectMcp(g.mcpUrl, (entity[name] as Entity).token);
      clients.push(client);
      mcp[name] = client;
    }
    await waitFor('the receiver’s mains in the origin’s roster', async () => {
      const r = (await origin.roster()) as Array<{ name: string }>;
      return ['sink', 'reader'].every((n) => r.some((e) => e.name === n)) ? true : undefined;
    });
  });

  afterAll(async () => {
    for (const c of clients) await c.close().catch(() => {});
    for (const g of gateways) await g.dispose();
    await deleteQueues(queues);
  });

  it('refuses the overflow at once, expires what is never read, and loses nothing', async () => {
    const started = Date.now();
    const toSink: { msgId: string; outcome: 'confirmed' | 'inbox-full' }[] = [];
    const toReader: string[] = [];
    const errors = new Map<string, number>();
    const sender = mcp.sender as Client;
    let slowestRefusalMs = 0;
    // The reader drains as it goes (its messages live only ttlMs too).
    const read: Message[] = [];
    let flooding = true;
    const reading = (async () => {
      while (flooding || read.length < toReader.length) {
        const r = await callTool(mcp.reader as Client, 'bridge_drain', {});
        read.push(...(r.structuredContent as { messages: Message[] }).messages);
        await sleep(100);
      }
    })();
    // Interleaved: the flood into the full inbox must not hold up the reader's messages.
    for (let i = 0; i < flood; i++) {
      const sentAt = Date.now();
      const key = `flood-${i}-${randomUUID()}`;
      const result = await callTool(sender, 'bridge_send', {
        to: `sink@${receiver.hostId}`,
        text: `flood ${i}`,
        idempotency_key: key,
      });
      if (result.isError) {
        const code = (result.structuredContent as { error: { code: string } }).error.code;
        errors.set(code, (errors.get(code) ?? 0) + 1);
        expect(code).toBe('INBOX_FULL');
        slowestRefusalMs = Math.max(slowestRefusalMs, Date.now() - sentAt);
        // A keyed send's msgId comes from its key: the dead letter carries it.
        toSink.push({ msgId: namedUuid((entity.sender as Entity).gid, key), outcome: 'inbox-full' });
      } else {
        toSink.push({ msgId: (result.structuredContent as { msgId: string }).msgId, outcome: 'confirmed' });
      }
      if (i % 10 === 0) {
        const sent = await callTool(sender, 'bridge_send', {
          to: `reader@${receiver.hostId}`,
          text: `note ${i}`,
        });
        expect(sent.isError, JSON.stringify(sent.content)).toBeFalsy();
        toReader.push((sent.structuredContent as { msgId: string }).msgId);
      }
    }
    const refused = errors.get('INBOX_FULL') ?? 0;
    expect(refused, 'the capped inbox refused the overflow').toBeGreaterThan(0);

    // The reader got everything addressed to it, in order, once.
    flooding = false;
    await Promise.race([reading, sleep(15_000)]);
    expect(read.map((m) => m.msgId)).toEqual(toReader);

    // The sink never drains: its held messages and its queued ones expire into the DLQ.
    const receiverStatus = async () =>
      (await receiver.status()) as {
        deliveries: Record<string, number>;
        broker: { state: string; inboxes: Record<string, number> };
      };
    await waitFor(
      'every message to the sink dead-lettered',
      async () => {
        const s = await receiverStatus();
        const live = (s.deliveries.held ?? 0) + (s.deliveries.pending ?? 0);
        return live === 0 && (s.broker.inboxes.sink ?? 0) === 0 ? true : undefined;
      },
      ttlMs * 4,
    );
    await sleep(500);
    const confirmed = toSink.filter((m) => m.outcome === 'confirmed').map((m) => m.msgId);
    // Another reader of the shared DLQ may hold some for a moment: take them as they show. The
    // queue can hold thousands of other tests' letters at times (and a reader holds what it reads
    // until it is done with them all), so the moment can be many seconds.
    const dead = new Map<string, string[]>();
    const wanted = new Set(toSink.map((m) => m.msgId));
    await waitFor(
      'the sink’s dead letters',
      async () => {
        for (const [id, list] of await takeDeadLetters(wanted))
          dead.set(id, [...(dead.get(id) ?? []), ...list]);
        return dead.size >= wanted.size ? true : undefined;
      },
      60_000,
    ).catch(() => undefined);
    const reasons = new Map<string, number>();
    for (const list of dead.values())
      for (const reason of list) reasons.set(reason, (reasons.get(reason) ?? 0) + 1);

    // Every message to the sink, confirmed or refused, is in the DLQ once with a reason.
    const lost = toSink.map((m) => m.msgId).filter((id) => !dead.has(id));
    const duplicated = [...dead.entries()].filter(([, list]) => list.length > 1).map(([id]) => id);
    // On failure: what each gateway logged of the first missing ones.
    const trace = lost
      .slice(0, 3)
      .map((id) =>
        [
          `${id} (${toSink.find((m) => m.msgId === id)?.outcome}):`,
          ...[origin, receiver].flatMap((g) => g.log.split('\n').filter((line) => line.includes(id))),
        ].join('\n'),
      )
      .join('\n---\n');
    expect(lost, `confirmed messages to the sink missing from the DLQ\n${trace}`).toEqual([]);
    expect(duplicated, 'dead-lettered twice').toEqual([]);
    expect([...reasons.keys()].every((r) => r !== '')).toBe(true);
    expect(reasons.get('expired') ?? 0).toBe(confirmed.length);
    expect(reasons.get('maxlen') ?? 0).toBe(refused);

    // Both gateways healthy and connected, and the sink's reminders ran while it held messages.
    for (const g of gateways) expect(await g.healthy()).toBe(true);
    expect((await receiverStatus()).broker.state).toBe('connected');
    const metrics = await (await fetch(`http://127.0.0.1:${receiver.port}/metrics`)).text();
    expect(metrics).toMatch(/bridge_nudges_total \d*[1-9]/);

    console.log(
      `NEVER_DRAINS_SUMMARY ${JSON.stringify({
        sent: flood,
        confirmed: confirmed.length,
        refusedInboxFull: refused,
        slowestRefusalMs,
        deadLettered: dead.size,
        reasons: Object.fromEntries(reasons),
        lost: lost.length,
        duplicates: duplicated.length,
        readerDelivered: read.length,
        seconds: Math.round((Date.now() - started) / 1000),
      })}`,
    );
  });
});
