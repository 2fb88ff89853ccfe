import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { brokerEnv, removeDeadLettersOf, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';
import { startTmuxServer, type TmuxTestServer } from '../support/tmux.js';

const suffix = Math.random().toString(36).slice(2, 7);

/**
 * A message from another host whose delivery keeps failing (its worker's pane is gone) is
 * dead-lettered to bridge.dlq with reason delivery-limit and acked, not redelivered forever.
 */
describe('a cross-host delivery that keeps failing', () => {
  const gateways: GatewayProcess[] = [];
  let tmux: TmuxTestServer;
  let client: Client;

  beforeAll(async () => {
    tmux = await startTmuxServer();
    const config = { broker: { heartbeatMs: 300 }, delivery: { maxAttempts: 2, retryBaseMs: 50 } };
    gateways.push(
      new GatewayProcess({ hostId: `sender-${suffix}`, env: { ...brokerEnv }, config }),
      new GatewayProcess({ hostId: `doomed-${suffix}`, env: { ...brokerEnv }, config }),
    );
    await Promise.all(gateways.map((g) => g.start()));
  });

  afterAll(async () => {
    await client?.close().catch(() => {});
    for (const g of gateways) await g.dispose();
    await tmux?.kill();
    await removeDeadLettersOf(gateways.map((g) => g.hostId));
  });

  it('goes to the DLQ with reason delivery-limit, once, and the inbox is empty', async () => {
    const [sender, doomed] = gateways as [GatewayProcess, GatewayProcess];
    const pane = await tmux.newPane('sleep 600');
    const reg = await doomed.cli([
      'register',
      '--kind',
      'worker',
      '--name',
      'ghost',
      '--tmux',
      pane,
      '--tmux-socket',
      tmux.socket,
      '--json',
    ]);
    expect(reg.code, reg.stderr || reg.stdout).toBe(0);
    await tmux.run('kill-pane', '-t', pane); // the pane is gone: every injection fails
    const main = JSON.parse(
      (await sender.cli(['register', '--kind', 'main', '--name', 'boss', '--json'])).stdout,
    );
    client = await connectMcp(sender.mcpUrl, main.token);
    await waitFor('ghost in the roster', async () => {
      const r = await callTool(client, 'bridge_roster', {});
      return (r.structuredContent as { entities: Array<{ name: string }> }).entities.some(
        (e) => e.name === 'ghost',
      )
        ? true
        : undefined;
    });
    const sent = await callTool(client, 'bridge_send', {
      to: `ghost@${doomed.hostId}`,
      text: 'into the void',
    });
    expect(sent.isError, JSON.stringify(sent.content)).toBeFalsy();
    const msgId = (sent.structuredContent as { msgId: string }).msgId;

    const letter = await waitFor('the dead letter', async () => {
      const list = JSON.parse(
        (await sender.cli(['dlq', 'list', '--max', '10000', '--json'])).stdout,
      ) as Array<{
        msgId: string;
        reason: string;
        detail: string;
        host: string;
      }>;
      return list.find((l) => l.msgId === msgId);
    });
    expect(letter).toMatchObject({ reason: 'delivery-limit', host: doomed.hostId });
    expect(letter.detail).toMatch(/pane|tmux/);

    const status = (await doomed.status()) as {
      broker: { inboxes: Record<string, number> };
      deliveries: Record<string, number>;
      deadLetters: Record<string, number>;
    };
    expect(status.deliveries).toEqual({ 'dead-lettered': 1 });
    expect(status.deadLetters).toMatchObject({ 'delivery-limit': 1 });
    expect(status.broker.inboxes).toEqual({ ghost: 0 });
  });
});
