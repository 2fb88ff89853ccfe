import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import amqp, { type ChannelModel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestCluster } from '../../support/cluster.js';

const MESSAGES = 200;

/**
 * tools/cluster.mjs makes a real RabbitMQ cluster on this machine (three nodes of the Debian
 * package, ports and data of their own, the shared broker on 5672 untouched), and a quorum
 * queue on it keeps every confirmed message, in order, when the node that declared it (and led
 * it) is killed with SIGKILL; the killed node comes back into the same cluster.
 */
export function brokerClusterSuite(sharedCluster: () => TestCluster): void {
  describe('a three-node RabbitMQ cluster on one machine', () => {
    let cluster: TestCluster | undefined;
    const connections: ChannelModel[] = [];
    const queue = `bridge-cluster-test-${randomBytes(4).toString('hex')}`;
    const figures: Record<string, number> = {};

    /** A connection to node k (1-based) whose loss (the node killed) is expected, not an error. */
    const connectTo = async (k: number): Promise<ChannelModel> => {
      const uri = cluster?.uris[k - 1];
      if (!uri) throw new Error(`no node ${k}`);
      const connection = await amqp.connect(uri);
      connection.on('error', () => {
        // the connection to a killed node dies with it: that is the point of the test
      });
      connections.push(connection);
      return connection;
    };

    beforeAll(async () => {
      cluster = sharedCluster();
      figures.startMs = cluster.startMs;
    });

    afterAll(async () => {
      for (const connection of connections) await connection.close().catch(() => undefined);
      console.log(`BROKER_CLUSTER_SUMMARY ${JSON.stringify(figures)}`);
    }, 120_000);

    it('runs three nodes in one cluster, each taking AMQP logins as guest', async () => {
      const status = await cluster!.status();
      expect(status.nodes).toHaveLength(3);
      for (const node of status.nodes) {
        expect(node, node.name).toMatchObject({ running: true, inCluster: true });
        expect(node.uri).toBe(`amqp://guest:guest@127.0.0.1:${node.amqpPort}`);
      }
      expect(new Set(status.nodes.map((node) => node.amqpPort)).size).toBe(3);
      expect(status.nodes.map((node) => node.amqpPort)).not.toContain(5672);

      // One cluster, not three brokers: a queue declared through node 1 exists on nodes 2 and 3.
      const probe = `${queue}-probe`;
      const first = await (await connectTo(1)).createChannel();
      await first.assertQueue(probe, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
      for (const k of [2, 3]) {
        const channel = await (await connectTo(k)).createChannel();
        await expect(channel.checkQueue(probe)).resolves.toMatchObject({ queue: probe });
        await channel.close();
      }
      await first.deleteQueue(probe);
      await first.close();
    });

    it('keeps every confirmed message of a quorum queue, in order, when a node is killed; the node rejoins', async () => {
      const c = cluster!;
      const status1 = await c.status();
      const declared = await (await connectTo(1)).createChannel();
      await declared.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum' } });

      const publisher = await (await connectTo(2)).createConfirmChannel();
      for (let i = 0; i < MESSAGES; i++) {
        publisher.sendToQueue(queue, Buffer.from(String(i)), { persistent: true });
      }
      await publisher.waitForConfirms();

      // Declared through node 1, led by node 1 (RabbitMQ's default leader locator: client-local).
      const leaders = JSON.parse(
        await c.rabbitmqctl(2, 'list_queues', '-q', 'name', 'leader', 'members', '--formatter', 'json'),
      ) as Array<{ name: string; leader: string; members: string[] }>;
      const placed = leaders.find((entry) => entry.name === queue);
      expect(placed?.leader).toBe(status1.nodes[0]?.name);
      expect(placed?.members).toHaveLength(3);

      await c.kill(1);
      const killedAt = Date.now();
      const afterKill = await c.status();
      expect(afterKill.nodes.map((node) => node.running)).toEqual([false, true, true]);

      // Through node 3, while node 1 is down: the queue elects a leader among the two left.
      const received: number[] = [];
      const consumer = await (await connectTo(3)).createChannel();
      await consumer.prefetch(50);
      await consumer.consume(queue, (message) => {
        if (!message) return;
        received.push(Number(message.content.toString()));
        consumer.ack(message);
      });
      const deadline = Date.now() + 60_000;
      while (received.length < MESSAGES && Date.now() < deadline) await sleep(50);
      figures.drainedAfterKillMs = Date.now() - killedAt;
      expect(received).toEqual(Array.from({ length: MESSAGES }, (_, i) => i));

      figures.rejoinMs = await c.startNode(1);
      const back = await c.status();
      for (const node of back.nodes)
        expect(node, node.name).toMatchObject({ running: true, inCluster: true });
      // Back in the same cluster, not a broker of its own: it sees the queue, drained.
      const again = await (await connectTo(1)).createChannel();
      await expect(again.checkQueue(queue)).resolves.toMatchObject({ queue, messageCount: 0 });
      await again.deleteQueue(queue);
    });
  });
}
