import { cpSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { brokerEnv, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';

/**
 * Invariant 1: one consumer per inbox, enforced by the broker. A second gateway started on a
 * copy of the first one's home (so it claims the same entities) must fail at start, loudly,
 * with the broker's refusal — never split the stream. Both queue modes.
 */
describe.each([
  { mode: 'classic', refusal: /405 \(RESOURCE-LOCKED\).*agent\.[0-9a-f-]+\.lock/ },
  { mode: 'quorum', refusal: /405 \(RESOURCE-LOCKED\).*agent\.[0-9a-f-]+\.lock/ },
])('a second consumer on an inbox ($mode queues)', ({ mode, refusal }) => {
  const gateways: GatewayProcess[] = [];
  const suffix = Math.random().toString(36).slice(2, 7);
  const gateway = (name: string) => {
    const g = new GatewayProcess({
      hostId: `${name}-${suffix}`,
      env: { ...brokerEnv },
      config: { broker: { queueMode: mode, heartbeatMs: 500 } },
    });
    gateways.push(g);
    return g;
  };
  afterEach(async () => {
    for (const g of gateways.splice(0)) await g.dispose();
  });

  it('fails at start with the broker’s refusal, and the first gateway keeps its inbox', async () => {
    const first = gateway('first');
    await first.start();
    const worker = JSON.parse(
      (await first.cli(['register', '--kind', 'main', '--name', 'held', '--json'])).stdout,
    );
    const boss = JSON.parse(
      (await first.cli(['register', '--kind', 'main', '--name', 'boss', '--json'])).stdout,
    );
    expect(await first.stop()).toBe(0);

    const second = gateway('second');
    cpSync(first.home, second.home, { recursive: true });
    await first.start();

    await expect(second.start()).rejects.toThrow(refusal);
    expect(second.log).toMatch(
      /CONSUMER_REFUSED: the broker refused to let this gateway consume agent\.[0-9a-f-]+\.inbox/,
    );
    expect(second.log).toMatch(/Another gateway already consumes this inbox/);

    // The first gateway still owns the stream: a message to the inbox reaches it.
    const other = gateway('other');
    await other.start();
    const sender = JSON.parse(
      (await other.cli(['register', '--kind', 'main', '--name', 'sender', '--json'])).stdout,
    );
    const client = await connectMcp(other.mcpUrl, sender.token);
    await waitFor('the roster to show the held inbox', async () => {
      const roster = await callTool(client, 'bridge_roster', {});
      const entities = (roster.structuredContent as { entities: Array<{ gid: string }> }).entities;
      return entities.some((e) => e.gid === worker.gid) ? true : undefined;
    });
    const sent = await callTool(client, 'bridge_send', { to: worker.gid, text: 'still yours' });
    expect(sent.isError, JSON.stringify(sent.content)).toBeFalsy();
    const mine = await connectMcp(first.mcpUrl, worker.token);
    const got = await waitFor('the message on the first gateway', async () => {
      const r = await callTool(mine, 'bridge_drain', {});
      const messages = (r.structuredContent as { messages: Array<{ text: string }> }).messages;
      return messages.length > 0 ? messages : undefined;
    });
    expect(got.map((m) => m.text)).toEqual(['still yours']);
    expect(boss.gid).toBeTruthy();
    await client.close();
    await mine.close();
  });
});
