import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlSpec, inboxName, rosterQueueName } from '../../src/federation/topology.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { brokerEnv, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp, type DrainedMessage, type Registered } from '../support/mcpClient.js';
import { consumerCounts, restoreRabbitSetting, setRabbitSetting } from '../support/rabbit.js';

/** The broker's consumer_timeout for this test, far below its default of 30 minutes. */
const consumerTimeoutMs = 3_000;
/**
 * How often the broker's channels look at their consumers' deliveries against that timeout, far
 * below its default of a minute: the one broker-wide timer this test must outwait.
 */
const channelTickMs = 1_000;
/** Well past the timeout, spanning several of the channels' looks. */
const holdMs = consumerTimeoutMs + 6 * channelTickMs;

async function register(g: GatewayProcess, name: string): Promise<Registered> {
  const r = await g.cli(['register', '--kind', 'main', '--name', name, '--json']);
  expect(r.code, r.stderr || r.stdout).toBe(0);
  return JSON.parse(r.stdout) as Registered;
}

/**
 * Issue: a main goes deaf after the broker's consumer timeout. Messages held for a main that
 * does not drain stayed unacked on the broker; after `consumer_timeout` RabbitMQ closed the
 * inbox consumer's channel (406), and from then on the inbox had no consumer: a message sent
 * afterwards was confirmed to its sender and never reached the main. Now the gateway acks a
 * message once its local store has it, so a long hold provokes no timeout, for classic and
 * quorum inboxes alike (a quorum queue would also count a delivery attempt per timeout).
 */
describe('a main that drains only after several consumer timeouts', () => {
  let previousTimeout: string | undefined;
  let previousTick: string | undefined;
  const gateways: GatewayProcess[] = [];
  const clients: Client[] = [];
  const queues: string[] = [];
  let alpha: GatewayProcess;
  let sender: Client;
  const mains: Array<{ mode: 'classic' | 'quorum'; gateway: GatewayProcess; client: Client; gid: string }> =
    [];

  beforeAll(async () => {
    // Before any consumer's channel opens: a channel takes the timeout in force when it opens.
    previousTimeout = await setRabbitSetting('consumer_timeout', consumerTimeoutMs);
    previousTick = await setRabbitSetting('channel_tick_interval', channelTickMs);
    const broker = { heartbeatMs: 500, retryBaseMs: 200 };
    alpha = new GatewayProcess({
      hostId: uniqueHostId('ct-a'),
      env: { ...brokerEnv },
      config: { broker },
    });
    gateways.push(alpha);
    for (const mode of ['classic', 'quorum'] as const) {
      gateways.push(
        new GatewayProcess({
          hostId: uniqueHostId(`ct-${mode}`),
          env: { ...brokerEnv },
          config: { broker: { ...broker, queueMode: mode } },
        }),
      );
    }
    await Promise.all(gateways.map((g) => g.start()));
    const s = await register(alpha, 'src');
    sender = await connectMcp(alpha.mcpUrl, s.token);
    clients.push(sender);
    for (const [i, mode] of (['classic', 'quorum'] as const).entries()) {
      const gateway = gateways[i + 1] as GatewayProcess;
      const lead = await register(gateway, 'lead');
      const client = await connectMcp(gateway.mcpUrl, lead.token);
      clients.push(client);
      mains.push({ mode, gateway, client, gid: lead.gid });
    }
    for (const g of gateways) queues.push(controlSpec(g.hostId).name, rosterQueueName(g.hostId));
    queues.push(inboxName(s.gid), ...mains.map((m) => inboxName(m.gid)));
    await waitFor('both leads in alpha’s roster', async () => {
      const r = (await alpha.roster()) as Array<{ host: string }>;
      return mains.every((m) => r.some((e) => e.host === m.gateway.hostId)) ? true : undefined;
    });
  }, 120_000);

  afterAll(async () => {
    // Put the broker's default back first, whatever happened: the next test and CI share it.
    if (previousTimeout !== undefined) await restoreRabbitSetting('consumer_timeout', previousTimeout);
    if (previousTick !== undefined) await restoreRabbitSetting('channel_tick_interval', previousTick);
    for (const c of clients) await c.close().catch(() => {});
    for (const g of gateways) await g.dispose();
    await deleteQueues(queues);
  });

  const send = async (m: (typeof mains)[number], text: string) => {
    const r = await callTool(sender, 'bridge_send', { to: `lead@${m.gateway.hostId}`, text });
    expect(r.isError, JSON.stringify(r.content)).toBeFalsy();
  };

  it(
    'gets every message sent before and after, exactly once, with no restart (classic and quorum)',
    async () => {
      for (const m of mains) for (const text of ['before 1', 'before 2']) await send(m, text);
      for (const m of mains) {
        await waitFor(`both held on the ${m.mode} main’s gateway`, async () => {
          const s = (await m.gateway.status()) as {
            deliveries: Record<string, number>;
          };
          return (s.deliveries.held ?? 0) === 2 ? true : undefined;
        });
      }
      // The mains do not drain while the broker looks at its consumers, several times.
      await sleep(holdMs);
      for (const m of mains) for (const text of ['after 1', 'after 2']) await send(m, text);

      for (const m of mains) {
        const texts: string[] = [];
        await waitFor(
          `the ${m.mode} main drains all four`,
          async () => {
            const r = await callTool(m.client, 'bridge_drain', {});
            texts.push(
              ...(r.structuredContent as { messages: DrainedMessage[] }).messages.map((x) => x.text),
            );
            return texts.length >= 4 ? true : undefined;
          },
          20_000,
        );
        await sleep(500);
        const r = await callTool(m.client, 'bridge_drain', {});
        texts.push(...(r.structuredContent as { messages: DrainedMessage[] }).messages.map((x) => x.text));
        expect(texts, m.mode).toEqual(['before 1', 'before 2', 'after 1', 'after 2']);
        // No channel was closed for a timed-out acknowledgement, and the inbox still has its consumer.
        expect(m.gateway.log, m.mode).not.toMatch(/delivery acknowledgement on channel \d+ timed out/);
        expect((await consumerCounts([inboxName(m.gid)])).get(inboxName(m.gid)), m.mode).toBe(1);
        // One connection all along: nothing was recovered by reconnecting.
        expect(m.gateway.log.split('\n').filter((l) => l.includes('"msg":"broker connected')).length).toBe(1);
      }
    },
    holdMs + 120_000,
  );
});
