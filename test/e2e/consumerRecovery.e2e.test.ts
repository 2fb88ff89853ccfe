import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlSpec, inboxName, rosterQueueName } from '../../src/federation/topology.js';
import { brokerEnv, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp, type DrainedMessage, type Registered } from '../support/mcpClient.js';
import { closeConsumerChannels, consumerCounts } from '../support/rabbit.js';

const suffix = Math.random().toString(36).slice(2, 7);

async function register(g: GatewayProcess, name: string): Promise<Registered> {
  const r = await g.cli(['register', '--kind', 'main', '--name', name, '--json']);
  expect(r.code, r.stderr || r.stdout).toBe(0);
  return JSON.parse(r.stdout) as Registered;
}

/**
 * Issue: a main goes deaf after the broker closes its consumer's channel. RabbitMQ closes a
 * channel on its own for a consumer timeout or any channel-level error; the connection stays
 * up, so nothing reconnected, and the inbox had no consumer from then on: later messages were
 * confirmed to their sender and never reached the main. Every consumer whose channel the
 * server closes is now opened again (R-H6). The broker is made to close the channels (406
 * PRECONDITION_FAILED, as for a consumer timeout) of beta's inbox, control and roster queues.
 */
describe('a consumer whose channel the broker closes is recovered', () => {
  let alpha: GatewayProcess;
  let beta: GatewayProcess;
  let sender: Client;
  let lead: Client;
  let leadGid: string;

  beforeAll(async () => {
    const config = { broker: { heartbeatMs: 300, retryBaseMs: 200 } };
    alpha = new GatewayProcess({ hostId: `rec-a-${suffix}`, env: { ...brokerEnv }, config });
    beta = new GatewayProcess({ hostId: `rec-b-${suffix}`, env: { ...brokerEnv }, config });
    await Promise.all([alpha.start(), beta.start()]);
    const s = await register(alpha, 'src');
    const l = await register(beta, 'lead');
    leadGid = l.gid;
    sender = await connectMcp(alpha.mcpUrl, s.token);
    lead = await connectMcp(beta.mcpUrl, l.token);
    await waitFor('lead in alpha’s roster', async () => {
      const r = (await alpha.roster()) as Array<{ name: string }>;
      return r.some((e) => e.name === 'lead') ? true : undefined;
    });
  });

  afterAll(async () => {
    for (const c of [sender, lead]) await c?.close().catch(() => {});
    await alpha?.dispose();
    await beta?.dispose();
  });

  it('opens the inbox, control and roster consumers again, and the main gets what came before and after', async () => {
    const to = `lead@${beta.hostId}`;
    const first = await callTool(sender, 'bridge_send', { to, text: 'before' });
    expect(first.isError, JSON.stringify(first.content)).toBeFalsy();
    await waitFor('the first message held on beta', async () => {
      const s = (await beta.status()) as {
        deliveries: Record<string, number>;
      };
      return (s.deliveries.held ?? 0) === 1 ? true : undefined;
    });

    const queues = [inboxName(leadGid), controlSpec(beta.hostId).name, rosterQueueName(beta.hostId)];
    expect(await closeConsumerChannels(queues)).toBe(3);
    await waitFor('beta saw the three channels closed', async () =>
      beta.log.split('\n').filter((l) => l.includes('broker consumer channel error')).length >= 3
        ? true
        : undefined,
    );
    await waitFor(
      'every queue consumed again',
      async () => {
        const counts = await consumerCounts(queues);
        return queues.every((q) => counts.get(q) === 1) ? true : undefined;
      },
      30_000,
    );
    expect(
      beta.log.split('\n').filter((l) => l.includes('the broker closed a consumer channel')),
    ).toHaveLength(3);

    const second = await callTool(sender, 'bridge_send', { to, text: 'after' });
    expect(second.isError, JSON.stringify(second.content)).toBeFalsy();
    const texts: string[] = [];
    await waitFor('both messages drained', async () => {
      const r = await callTool(lead, 'bridge_drain', {});
      texts.push(...(r.structuredContent as { messages: DrainedMessage[] }).messages.map((m) => m.text));
      return texts.length >= 2 ? true : undefined;
    });
    expect(texts).toEqual(['before', 'after']);

    // The roster consumer works again: an entity alpha registers now shows on beta.
    await register(alpha, 'late');
    await waitFor('late in beta’s roster', async () => {
      const r = (await beta.roster()) as Array<{ name: string }>;
      return r.some((e) => e.name === 'late') ? true : undefined;
    });
    expect(await beta.healthy()).toBe(true);

    // Status shows what beta holds on the broker again: the inbox on its shared channel, control
    // and roster on one each, all on the one connection.
    const status = (await beta.status()) as {
      broker: { usage: { connections: number; channels: number; consumers: number } };
    };
    expect(status.broker.usage).toEqual({ connections: 1, channels: 3, consumers: 3 });
    const text = (await beta.cli(['status'])).stdout;
    expect(text).toContain('consumers:    3 on 3 channels, 1 connection');
    // The broker's DLQ is every gateway's: its line says so, apart from this gateway's own count.
    expect(text).toMatch(/^broker DLQ: +\d+ letters in bridge\.dlq, from every gateway on the broker/m);
    expect(text).toMatch(/^dead-lettered here since start: /m);
  });
});
