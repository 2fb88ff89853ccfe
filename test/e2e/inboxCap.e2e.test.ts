import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlSpec, inboxName } from '../../src/federation/topology.js';
import { deleteQueues } from '../support/broker.js';
import { brokerEnv, dlqUntilSeen, removeDeadLettersOf, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';

const suffix = Math.random().toString(36).slice(2, 7);

/**
 * R-H1: a main that never drains fills its capped inbox; the next sender is told at once
 * (INBOX_FULL), the refused message is dead-lettered with reason maxlen, a broadcast reaching
 * the full inbox is reported as partial, and an operator can requeue the dead letter.
 */
// quorum (R-TOP2): the inbox refuses with reject-publish and keeps no copy; the sender's
// gateway dead-letters one, so the DLQ and the requeue look the same as in classic mode.
describe.each(['classic', 'quorum'] as const)('a full inbox (%s)', (queueMode) => {
  const gateways: GatewayProcess[] = [];
  const clients: Client[] = [];
  let sender: Client;
  let sink: Client;
  let sinkGid: string;
  let sinkToken: string;
  let receiver: GatewayProcess;
  let origin: GatewayProcess;
  /** Their inboxes (and the gateways' control queues) are removed from the shared broker after. */
  const entityGids: string[] = [];

  beforeAll(async () => {
    origin = new GatewayProcess({
      hostId: `origin-${queueMode}-${suffix}`,
      env: { ...brokerEnv },
      config: { broker: { heartbeatMs: 300, queueMode } },
    });
    // The sink's gateway stops taking messages from the broker once its inbox of 3 could not
    // take the 2 that may be on their way; the broker's queue holds 3 more.
    receiver = new GatewayProcess({
      hostId: `receiver-${queueMode}-${suffix}`,
      env: { ...brokerEnv },
      config: {
        broker: { heartbeatMs: 300, prefetch: 2, inboxMaxLength: 3, queueMode },
        // One sender fills the inbox: the cap itself is under test, not the sender's share.
        limits: { senderInboxShare: 1 },
      },
    });
    gateways.push(origin, receiver);
    await Promise.all(gateways.map((g) => g.start()));
    const s = JSON.parse(
      (await origin.cli(['register', '--kind', 'main', '--name', 'flood', '--json'])).stdout,
    );
    const k = JSON.parse(
      (await receiver.cli(['register', '--kind', 'main', '--name', 'sink', '--json'])).stdout,
    );
    const roomy = JSON.parse(
      (await receiver.cli(['register', '--kind', 'main', '--name', 'roomy', '--json'])).stdout,
    );
    entityGids.push(s.gid, k.gid, roomy.gid);
    sinkGid = k.gid;
    sinkToken = k.token;
    sender = await connectMcp(origin.mcpUrl, s.token);
    sink = await connectMcp(receiver.mcpUrl, k.token);
    clients.push(sender, sink);
    await waitFor('the sink in the origin’s roster', async () => {
      const r = await callTool(sender, 'bridge_roster', {});
      return (r.structuredContent as { entities: Array<{ name: string }> }).entities.some(
        (e) => e.name === 'sink',
      )
        ? true
        : undefined;
    });
  });

  afterAll(async () => {
    for (const c of clients) await c.close().catch(() => {});
    for (const g of gateways) await g.dispose();
    await removeDeadLettersOf(gateways.map((g) => g.hostId));
    await deleteQueues([...entityGids.map(inboxName), ...gateways.map((g) => controlSpec(g.hostId).name)]);
  });

  it('refuses the overflow to the sender, dead-letters it as maxlen, reports a partial broadcast, and can requeue it', async () => {
    const results = [];
    for (let i = 1; i <= 8; i++) {
      const result = await callTool(sender, 'bridge_send', { to: 'sink', text: `m${i}` });
      results.push(result);
      if (result.isError) break;
    }
    const accepted = results.length - 1;
    // At most the cap on the sink's gateway (what was on its way when it stopped taking more).
    expect(accepted, 'one to three on the sink’s gateway, three on the broker').toBeGreaterThanOrEqual(4);
    // A quorum queue takes one more than its cap before it refuses (its overflow check follows the append).
    expect(accepted).toBeLessThanOrEqual(queueMode === 'quorum' ? 7 : 6);
    const refused = results[accepted] as (typeof results)[number];
    expect(refused.isError).toBe(true);
    expect((refused.content as Array<{ text: string }>)[0]?.text).toMatch(
      /^INBOX_FULL: the recipient's inbox is full/,
    );

    const broadcast = await callTool(sender, 'bridge_broadcast', { text: 'all hands' });
    expect(broadcast.isError).toBeFalsy();
    expect(broadcast.structuredContent).toMatchObject({ partial: true });

    const metrics = await (await fetch(`http://127.0.0.1:${origin.port}/metrics`)).text();
    expect(metrics).toMatch(/bridge_dead_letters_total\{reason="maxlen"\} 2/);

    type Letter = {
      msgId: string;
      reason: string;
      routingKey: string;
      body: string;
      sealed?: { to: string[]; opened: boolean };
    };
    const letters = (g: GatewayProcess) =>
      dlqUntilSeen(
        'the refused message in bridge.dlq',
        async () =>
          (JSON.parse((await g.cli(['dlq', 'list', '--max', '10000', '--json'])).stdout) as Letter[]).filter(
            (l) => l.routingKey === sinkGid,
          ),
        (found) => found.length > 0,
      );
    // Its text is sealed to the sink's host: the operator there reads it, here only its fields.
    const last = `m${accepted + 1}`;
    const mine = await letters(origin);
    expect(mine.map((l) => l.reason)).toEqual(['maxlen']);
    expect(mine[0]?.sealed).toEqual({ to: [receiver.hostId], opened: false, why: expect.any(String) });
    // No text field in what it shows (a plain "m6" may well occur in the base64 of the sealed part).
    expect(JSON.parse(mine[0]?.body ?? '{}')).not.toHaveProperty('text');
    const there = await letters(receiver);
    expect(there[0]?.sealed).toMatchObject({ opened: true });
    expect(JSON.parse(there[0]?.body ?? '{}')).toMatchObject({ text: last });

    // The sink drains; the operator sends the dead letter back; it arrives, after the others.
    const drained: string[] = [];
    await waitFor('the accepted ones drained', async () => {
      const r = await callTool(sink, 'bridge_drain', {});
      drained.push(
        ...(r.structuredContent as { messages: Array<{ text: string }> }).messages.map((m) => m.text),
      );
      return drained.filter((t) => t.startsWith('m')).length >= accepted ? true : undefined;
    });
    const requeue = await dlqUntilSeen(
      'a requeue that sees the letter',
      async () =>
        JSON.parse((await origin.cli(['dlq', 'requeue', mine[0]?.msgId as string, '--json'])).stdout),
      (result: { requeued: number }) => result.requeued !== 0,
    );
    expect(requeue).toEqual({ requeued: 1, skipped: {} });
    await waitFor('the requeued one', async () => {
      const r = await callTool(sink, 'bridge_drain', {});
      drained.push(
        ...(r.structuredContent as { messages: Array<{ text: string }> }).messages.map((m) => m.text),
      );
      return drained.includes(last) ? true : undefined;
    });
    expect(drained.filter((t) => t.startsWith('m'))).toEqual(
      Array.from({ length: accepted + 1 }, (_, i) => `m${i + 1}`),
    );
  });
  it('a gateway restarted with a full inbox takes the broker’s messages once the main drains', async () => {
    const sent: string[] = [];
    for (let i = 1; i <= 8; i++) {
      const text = `r${i}`;
      const result = await callTool(sender, 'bridge_send', { to: 'sink', text });
      if (result.isError) break;
      sent.push(text);
    }
    expect(sent.length).toBeGreaterThanOrEqual(4);
    await receiver.stop();
    await receiver.start();
    const again = await connectMcp(receiver.mcpUrl, sinkToken);
    clients.push(again);
    // What it held comes from its store; the rest only if its consumer starts paused and resumes.
    const drained: string[] = [];
    await waitFor('every accepted one drained after the restart', async () => {
      const r = await callTool(again, 'bridge_drain', {});
      drained.push(
        ...(r.structuredContent as { messages: Array<{ text: string }> }).messages.map((m) => m.text),
      );
      return drained.filter((t) => t.startsWith('r')).length >= sent.length ? true : undefined;
    });
    expect(drained.filter((t) => t.startsWith('r'))).toEqual(sent);
  });
});
