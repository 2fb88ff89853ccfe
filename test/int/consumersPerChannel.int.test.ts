import { execFile } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import amqp from 'amqplib';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { BridgeError, ErrorCode } from '../../src/errors.js';
import type { BrokerActor } from '../../src/federation/BrokerActor.js';
import type { ConsumerSpec, InboundMessage } from '../../src/federation/brokerMessages.js';
import { Exchange, inboxLockSpec, inboxName, inboxSpec, QueueMode } from '../../src/federation/topology.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { createBrokerActor } from '../support/brokerActor.js';
import { brokerUri, testDeployment, waitFor } from '../support/federation.js';
import { closeConsumerChannels, consumerCounts } from '../support/rabbit.js';

const run = promisify(execFile);

/** An entity's inbox consumer as Federation opens it: the lock queue first, then the inbox. */
function inboxConsumer(gid: string, onMessage: (message: InboundMessage) => void): ConsumerSpec {
  return {
    queue: inboxSpec({
      deployment: testDeployment,
      gid,
      groups: [],
      mode: QueueMode.classic,
      maxLength: 100,
    }),
    lock: inboxLockSpec(gid),
    prefetch: 10,
    exclusive: true,
    onMessage,
  };
}

/** The broker's connections named after `hostId` (`bridge gateway <host>`, `... #2`, ...). */
async function connectionNames(hostId: string): Promise<string[]> {
  const { stdout } = await run('rabbitmqctl', ['list_connections', '-q', 'client_properties']);
  const names = [...stdout.matchAll(/"(bridge gateway [^"]+)"/g)].map((m) => m[1] ?? '');
  return names
    .filter((name) => name === `bridge gateway ${hostId}` || name.startsWith(`bridge gateway ${hostId} #`))
    .sort();
}

/** A logger that keeps each line's message, to tell a re-open from none. */
function recordingLogger(lines: string[]) {
  return pino(
    { level: 'debug' },
    { write: (line: string) => void lines.push(JSON.parse(line).msg as string) },
  );
}

/**
 * Inbox consumers share channels, and channels a small pool of connections: before, each had a
 * channel of its own on the one connection, and a gateway stopped near RabbitMQ's channel_max
 * (2,047) with "No channels left to allocate".
 */
/** A message published to `gid`'s inbox arrives once its consumer is open again. */
async function deliveredAfterReopen(broker: BrokerActor, gid: string, received: string[]): Promise<void> {
  expect(
    await broker.publish({
      exchange: Exchange.msg,
      routingKey: gid,
      content: Buffer.from('after'),
      messageId: `${gid}/after`,
      mandatory: true,
      persistent: true,
    }),
  ).toEqual({ ok: true });
  await waitFor('delivered after the re-open', () => (received.includes(gid) ? true : undefined));
}

describe('broker actor: many inbox consumers on shared channels', () => {
  const stores: Store[] = [];
  const brokers: BrokerActor[] = [];
  const queues: string[] = [];

  afterEach(async () => {
    for (const broker of brokers.splice(0)) await broker.stop();
    for (const store of stores.splice(0)) await store.close();
    await deleteQueues(queues.splice(0));
  });

  const gateway = (hostId: string, options: Parameters<typeof createBrokerActor>[2]) => {
    const store = openStore({ file: ':memory:' });
    stores.push(store);
    const broker = createBrokerActor(hostId, store, options);
    brokers.push(broker);
    return broker;
  };

  /** `count` inbox consumers (queues noted for deletion), started: the gids and what arrives. */
  const consumeInboxes = async (
    broker: BrokerActor,
    hostId: string,
    count: number,
  ): Promise<{ gids: string[]; received: string[] }> => {
    const gids = Array.from({ length: count }, (_, i) => `${hostId}-e${i}`);
    queues.push(...gids.map(inboxName));
    const received: string[] = [];
    for (const gid of gids)
      await broker.consume(
        inboxConsumer(gid, (message) => {
          received.push(message.routingKey);
          message.ack();
        }),
      );
    await broker.start();
    await waitFor('all consuming', () =>
      gids.every((g) => broker.consuming(inboxName(g))) ? true : undefined,
    );
    return { gids, received };
  };

  it('opens 2,500 inboxes (more than channel_max) on 25 channels over 3 connections, and delivers', async () => {
    const hostId = uniqueHostId('many');
    const fatal: unknown[] = [];
    const broker = gateway(hostId, {
      onFatal: (err) => void fatal.push(err),
      consumersPerChannel: 100,
      channelsPerConnection: 10,
    });
    const received = new Map<string, string>();
    const gids = Array.from({ length: 2_500 }, (_, i) => `${hostId}-e${i}`);
    queues.push(...gids.map(inboxName));
    const consumer = (gid: string) =>
      inboxConsumer(gid, (message) => {
        if (message.messageId) received.set(message.messageId, gid);
        message.ack();
      });

    const started = Date.now();
    // Some registered before the connection (opened by it), the rest while connected.
    for (const gid of gids.slice(0, 500)) await broker.consume(consumer(gid));
    await broker.start();
    await waitFor('the broker actor connected', () => (broker.connected ? true : undefined), 30_000);
    const rest = gids.slice(500);
    for (let i = 0; i < rest.length; i += 250)
      await Promise.all(rest.slice(i, i + 250).map((gid) => broker.consume(consumer(gid))));
    const openedMs = Date.now() - started;

    expect(gids.filter((gid) => !broker.consuming(inboxName(gid)))).toEqual([]);
    const counts = await consumerCounts(gids.map(inboxName));
    expect(gids.filter((gid) => counts.get(inboxName(gid)) !== 1)).toEqual([]);
    expect(broker.usage()).toEqual({ connections: 3, channels: 25, consumers: 2_500 });
    expect(await connectionNames(hostId)).toEqual([
      `bridge gateway ${hostId}`,
      `bridge gateway ${hostId} #2`,
      `bridge gateway ${hostId} #3`,
    ]);

    // One on each connection: the first, the 1,001st, the last.
    const to = [gids[0], gids[1_000], gids[2_499]] as string[];
    for (const gid of to) {
      const outcome = await broker.publish({
        exchange: Exchange.msg,
        routingKey: gid,
        content: Buffer.from('hello'),
        messageId: `${gid}/hello`,
        mandatory: true,
        persistent: true,
      });
      expect(outcome).toEqual({ ok: true });
    }
    await waitFor('the three messages delivered', () =>
      to.every((gid) => received.has(`${gid}/hello`)) ? true : undefined,
    );
    expect(to.map((gid) => received.get(`${gid}/hello`))).toEqual(to);
    expect(fatal).toEqual([]);

    // Cleanup, measured: the gateway gone (its lock queues with its connections), the inboxes deleted.
    await broker.stop();
    brokers.splice(brokers.indexOf(broker), 1);
    const deleting = Date.now();
    await deleteQueues(queues.splice(0));
    const deletedMs = Date.now() - deleting;
    expect(
      (await consumerCounts([...gids.map(inboxName), ...gids.map((g) => inboxLockSpec(g).name)])).size,
    ).toBe(0);
    console.log(`opened 2,500 inbox consumers in ${openedMs} ms; deleted their inboxes in ${deletedMs} ms`);
  }, 180_000);

  it('re-opens the consumers of an extra connection that died alone, and keeps the main one', async () => {
    const hostId = uniqueHostId('pool');
    const fatal: unknown[] = [];
    const lines: string[] = [];
    const broker = gateway(hostId, {
      onFatal: (err) => void fatal.push(err),
      logger: recordingLogger(lines),
      consumersPerChannel: 2,
      channelsPerConnection: 2,
    });
    const { gids, received } = await consumeInboxes(broker, hostId, 6);
    expect(broker.usage()).toEqual({ connections: 2, channels: 3, consumers: 6 });

    const { stdout } = await run('rabbitmqctl', ['list_connections', '-q', 'pid', 'client_properties']);
    const line = stdout.split('\n').find((l) => l.includes(`"bridge gateway ${hostId} #2"`));
    const pid = line?.split('\t')[0];
    expect(pid, stdout).toBeTruthy();
    await run('rabbitmqctl', [
      'close_connection',
      pid ?? '',
      'consumersPerChannel test: an extra connection dies',
    ]);
    // Seen in the log, not by polling for a consumer missing: the re-open can be over before
    // rabbitmqctl has exited.
    await waitFor('the extra connection gone', () =>
      lines.includes('a broker consumer connection closed; re-opening its consumers') ? true : undefined,
    );
    await waitFor('all consuming again', async () => {
      const counts = await consumerCounts(gids.map(inboxName));
      return gids.every((g) => broker.consuming(inboxName(g)) && counts.get(inboxName(g)) === 1)
        ? true
        : undefined;
    });
    expect(broker.connected).toBe(true);
    expect(broker.usage()).toEqual({ connections: 2, channels: 3, consumers: 6 });
    await deliveredAfterReopen(broker, gids[5] as string, received);
    expect(fatal).toEqual([]);
  });

  it('re-opens every consumer of a shared channel the broker closes, each with its lock still held', async () => {
    const hostId = uniqueHostId('shared-close');
    const lines: string[] = [];
    const fatal: unknown[] = [];
    const broker = gateway(hostId, {
      onFatal: (err) => void fatal.push(err),
      logger: recordingLogger(lines),
    });
    const { gids, received } = await consumeInboxes(broker, hostId, 5);
    expect(broker.usage()).toEqual({ connections: 1, channels: 1, consumers: 5 });

    // As a consumer_timeout on one inbox's delivery would: the whole channel goes.
    expect(await closeConsumerChannels([inboxName(gids[2] as string)])).toBe(1);
    await waitFor('all consuming again on a new channel', async () => {
      const counts = await consumerCounts(gids.map(inboxName));
      return lines.includes('the broker closed a consumer channel; re-opening its consumers') &&
        gids.every((g) => broker.consuming(inboxName(g)) && counts.get(inboxName(g)) === 1)
        ? true
        : undefined;
    });
    expect(lines.filter((l) => l.startsWith('the broker closed a consumer channel'))).toHaveLength(1);
    expect(broker.usage()).toEqual({ connections: 1, channels: 1, consumers: 5 });
    await deliveredAfterReopen(broker, gids[4] as string, received);
    expect(fatal).toEqual([]);
  });

  it("refuses a second gateway's consumer loudly without closing the channel its other inboxes are on", async () => {
    const first = uniqueHostId('refuse-a');
    const second = uniqueHostId('refuse-b');
    const shared = `${first}-shared`;
    const own = Array.from({ length: 3 }, (_, i) => `${second}-own${i}`);
    const other = `${first}-other`;
    queues.push(...[shared, other, ...own].map(inboxName));
    const fatal: unknown[] = [];
    const a = gateway(first, { onFatal: (err) => void fatal.push(err) });
    for (const gid of [shared, other]) await a.consume(inboxConsumer(gid, (m) => m.ack()));
    await a.start();
    await waitFor('the first gateway consuming', () => (a.consuming(inboxName(shared)) ? true : undefined));

    const lines: string[] = [];
    const received: string[] = [];
    const b = gateway(second, { onFatal: (err) => void fatal.push(err), logger: recordingLogger(lines) });
    for (const gid of own)
      await b.consume(
        inboxConsumer(gid, (message) => {
          received.push(message.routingKey);
          message.ack();
        }),
      );
    await b.start();
    await waitFor('the second gateway consuming its own', () =>
      own.every((g) => b.consuming(inboxName(g))) ? true : undefined,
    );

    // The shared inbox would go on the channel of b's own three (100 consumers a channel).
    const refusal = await b.consume(inboxConsumer(shared, (m) => m.ack())).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(refusal).toBeInstanceOf(BridgeError);
    expect((refusal as BridgeError).code).toBe(ErrorCode.consumerRefused);
    expect((refusal as BridgeError).message).toMatch(
      /Another gateway already consumes this inbox \(invariant 1/,
    );

    // A beat for a closed channel to show, then: b's others still on their first channel.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(b.usage()).toEqual({ connections: 1, channels: 1, consumers: 3 });
    expect(lines.filter((l) => /closed a consumer channel|consumer channel error/.test(l))).toEqual([]);
    expect(own.every((g) => b.consuming(inboxName(g)))).toBe(true);
    const counts = await consumerCounts([shared, other, ...own].map(inboxName));
    expect([shared, other, ...own].map((g) => counts.get(inboxName(g)))).toEqual([1, 1, 1, 1, 1]);
    expect(a.consuming(inboxName(shared))).toBe(true);
    const target = own[1] as string;
    expect(
      await b.publish({
        exchange: Exchange.msg,
        routingKey: target,
        content: Buffer.from('still here'),
        messageId: `${target}/still`,
        mandatory: true,
        persistent: true,
      }),
    ).toEqual({ ok: true });
    await waitFor('b still receives', () => (received.includes(target) ? true : undefined));
    expect(lines.filter((l) => /re-open/.test(l))).toEqual([]);
    expect(fatal).toEqual([]);
  });

  it('refuses loudly an exclusive consume of an inbox someone outside the lock consumes, and keeps the channel', async () => {
    const hostId = uniqueHostId('refuse-c');
    const own = Array.from({ length: 3 }, (_, i) => `${hostId}-own${i}`);
    const taken = `${hostId}-taken`;
    queues.push(...[...own, taken].map(inboxName));
    const lines: string[] = [];
    const fatal: unknown[] = [];
    const b = gateway(hostId, { onFatal: (err) => void fatal.push(err), logger: recordingLogger(lines) });
    for (const gid of own) await b.consume(inboxConsumer(gid, (m) => m.ack()));
    await b.start();
    await waitFor('consuming its own', () =>
      own.every((g) => b.consuming(inboxName(g))) ? true : undefined,
    );

    // A consumer that takes no lock queue (an older gateway, a tool) holds the inbox exclusively.
    const outsider = await amqp.connect(brokerUri);
    try {
      const channel = await outsider.createChannel();
      const spec = inboxSpec({
        deployment: testDeployment,
        gid: taken,
        groups: [],
        mode: QueueMode.classic,
        maxLength: 100,
      });
      await channel.assertQueue(spec.name, { durable: true, arguments: spec.arguments });
      await channel.consume(spec.name, () => undefined, { exclusive: true });

      const refusal = await b.consume(inboxConsumer(taken, (m) => m.ack())).then(
        () => undefined,
        (err: unknown) => err,
      );
      expect((refusal as BridgeError).code).toBe(ErrorCode.consumerRefused);
      expect((refusal as BridgeError).message).toMatch(/ACCESS.REFUSED.*in exclusive use/);
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(lines.filter((l) => /closed a consumer channel|consumer channel error|re-open/.test(l))).toEqual(
        [],
      );
      expect(b.usage()).toEqual({ connections: 1, channels: 1, consumers: 3 });
      const counts = await consumerCounts([...own, taken].map(inboxName));
      expect([...own, taken].map((g) => counts.get(inboxName(g)))).toEqual([1, 1, 1, 1]);
      expect(fatal).toEqual([]);
    } finally {
      await outsider.close();
    }
  });

  it('each consumer on a shared channel gets its own prefetch, a basic.qos sent only when it differs from the last', async () => {
    const hostId = uniqueHostId('qos');
    const broker = gateway(hostId, { onFatal: () => undefined, consumersPerChannel: 10 });
    // Never acked: each consumer holds as many as its prefetch lets the broker hand it.
    const held = new Map<string, number>();
    const prefetches = [1, 3, 3, 1];
    const gids = prefetches.map((_, i) => `${hostId}-p${i}`);
    queues.push(...gids.map(inboxName));
    for (const [i, gid] of gids.entries())
      await broker.consume({
        ...inboxConsumer(gid, () => held.set(gid, (held.get(gid) ?? 0) + 1)),
        prefetch: prefetches[i] as number,
      });
    await broker.start();
    await waitFor('all consuming', () =>
      gids.every((g) => broker.consuming(inboxName(g))) ? true : undefined,
    );
    expect(broker.usage()).toEqual({ connections: 1, channels: 1, consumers: 4 });
    for (const gid of gids)
      for (let n = 0; n < 5; n++)
        await broker.publish({
          exchange: Exchange.msg,
          routingKey: gid,
          content: Buffer.from(String(n)),
          messageId: `${gid}/${n}`,
          mandatory: true,
          persistent: false,
        });
    await waitFor('each holding its prefetch', () =>
      gids.every((gid, i) => held.get(gid) === prefetches[i]) ? true : undefined,
    );
    await sleep(300);
    expect(gids.map((gid) => held.get(gid))).toEqual(prefetches);
  });
});
