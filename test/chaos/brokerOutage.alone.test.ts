import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { brokerEnv, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';
import { startBroker, stopBroker } from '../support/rabbit.js';

interface Message {
  msgId: string;
  text: string;
}

const suffix = Math.random().toString(36).slice(2, 7);

/**
 * R-H5 under traffic: RabbitMQ's app is stopped and started while two senders stream, one to
 * a main on the same host and one to a main on another host. Same-host delivery continues;
 * remote sends fail fast with a clear error; after the broker returns, both gateways have
 * their topology and consumers back without a restart, and every remote message (retried
 * under its idempotency key, as an agent would) arrives exactly once.
 */
describe('broker outage during traffic', () => {
  const gateways: GatewayProcess[] = [];
  const clients: Client[] = [];
  let alpha: GatewayProcess;
  let beta: GatewayProcess;
  const tokens: Record<string, string> = {};

  const gateway = (name: string) => {
    const g = new GatewayProcess({
      hostId: `${name}-${suffix}`,
      env: { ...brokerEnv },
      config: { broker: { heartbeatMs: 300, retryBaseMs: 200, retryMaxMs: 1_000 } },
    });
    gateways.push(g);
    return g;
  };
  const status = async (g: GatewayProcess) => (await g.status()) as { broker: { state: string } };

  beforeAll(async () => {
    alpha = gateway('alpha');
    beta = gateway('beta');
    await Promise.all([alpha.start(), beta.start()]);
    for (const [g, name] of [
      [alpha, 'sender'],
      [alpha, 'near'],
      [beta, 'far'],
    ] as const) {
      tokens[name] = JSON.parse(
        (await g.cli(['register', '--kind', 'main', '--name', name, '--json'])).stdout,
      ).token;
    }
    await waitFor('beta in alpha’s roster', async () => {
      const roster = (await alpha.roster()) as Array<{ name: string }>;
      return roster.some((e) => e.name === 'far') ? true : undefined;
    });
  });

  afterAll(async () => {
    await startBroker(); // whatever happened, leave the shared broker running
    for (const c of clients) await c.close().catch(() => {});
    for (const g of gateways) await g.dispose();
  });

  it('keeps same-host traffic flowing, fails remote sends fast, and recovers without loss or duplicates', async () => {
    const sender = await connectMcp(alpha.mcpUrl, tokens.sender as string);
    clients.push(sender);
    let outage = false;
    let stopped = false;
    const remote = {
      sent: 0,
      failedFast: 0,
      slowestFailureMs: 0,
      errors: new Set<string>(),
      texts: new Set<string>(),
    };
    const local = { sent: 0, duringOutage: 0 };
    const total = 60;

    const remoteLoop = (async () => {
      for (let i = 1; i <= total; i++) {
        for (;;) {
          const started = Date.now();
          const r = await callTool(sender, 'bridge_send', {
            to: 'far',
            text: `far-${i}`,
            idempotency_key: `far-${i}`,
          });
          if (!r.isError) break;
          const text = (r.content as Array<{ text: string }>)[0]?.text ?? '';
          remote.errors.add(text.split(':')[0] as string);
          remote.texts.add(text);
          if (outage) {
            remote.failedFast++;
            remote.slowestFailureMs = Math.max(remote.slowestFailureMs, Date.now() - started);
          }
          await sleep(100);
        }
        remote.sent = i;
        await sleep(40);
      }
    })();
    const localLoop = (async () => {
      for (let i = 1; !stopped || i <= total; i++) {
        const r = await callTool(sender, 'bridge_send', {
          to: 'near',
          text: `near-${i}`,
          idempotency_key: `near-${i}`,
        });
        expect(r.isError, JSON.stringify(r.content)).toBeFalsy();
        local.sent = i;
        if (outage) local.duringOutage++;
        await sleep(40);
      }
    })();

    await waitFor('some traffic', () => (remote.sent >= 10 ? true : undefined));
    try {
      await stopBroker();
      outage = true;
      await waitFor('alpha to see the broker gone', async () =>
        (await status(alpha)).broker.state !== 'connected' ? true : undefined,
      );
      const roster = (await alpha.roster()) as Array<{
        name: string;
        status: string;
      }>;
      expect(roster.find((e) => e.name === 'far')?.status).toBe('unknown');
      await sleep(1_500); // the outage lasts: remote sends keep failing fast, local ones keep flowing
    } finally {
      await startBroker();
    }
    await waitFor(
      'both gateways reconnected',
      async () => {
        const states = await Promise.all([alpha, beta].map(async (g) => (await status(g)).broker.state));
        return states.every((s) => s === 'connected') ? states : undefined;
      },
      60_000,
    );
    outage = false;
    await remoteLoop;
    stopped = true;
    await localLoop;

    expect(local.duringOutage).toBeGreaterThan(0);
    expect(remote.failedFast).toBeGreaterThan(0);
    expect(remote.slowestFailureMs).toBeLessThan(2_000);
    // Never mistaken for a full inbox.
    expect([...remote.errors], [...remote.texts].join('\n')).toEqual(['BROKER_UNAVAILABLE']);

    const far = await connectMcp(beta.mcpUrl, tokens.far as string);
    const near = await connectMcp(alpha.mcpUrl, tokens.near as string);
    clients.push(far, near);
    const drainAll = async (client: Client, count: number) => {
      const got: Message[] = [];
      await waitFor(
        `${count} messages`,
        async () => {
          const r = await callTool(client, 'bridge_drain', { max: 100 });
          got.push(...(r.structuredContent as { messages: Message[] }).messages);
          return got.length >= count ? true : undefined;
        },
        30_000,
      );
      await sleep(500);
      const r = await callTool(client, 'bridge_drain', { max: 100 });
      got.push(...(r.structuredContent as { messages: Message[] }).messages);
      return got.map((m) => m.text);
    };
    const farTexts = await drainAll(far, total);
    expect(farTexts).toEqual(Array.from({ length: total }, (_, i) => `far-${i + 1}`));
    const nearTexts = await drainAll(near, local.sent);
    expect(new Set(nearTexts).size).toBe(nearTexts.length);
    expect(nearTexts.length).toBe(local.sent);
    console.log(JSON.stringify({ remote: { ...remote, errors: [...remote.errors] }, local }));
  });
});
