import { statSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { brokerEnv, dlqUntilSeen, removeDeadLettersOf } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp, type DrainedMessage, type Registered } from '../support/mcpClient.js';
import { rssMb } from '../support/processMemory.js';

const maxLength = 300;
const maxBytes = 1024 * 1024;
const kb8 = 'x'.repeat(8 * 1024);

async function register(g: GatewayProcess, name: string): Promise<Registered> {
  const r = await g.cli(['register', '--kind', 'main', '--name', name, '--json']);
  expect(r.code, r.stderr || r.stdout).toBe(0);
  return JSON.parse(r.stdout) as Registered;
}

async function drainAll(client: Client): Promise<string[]> {
  const texts: string[] = [];
  for (;;) {
    const r = await callTool(client, 'bridge_drain', { max: 100 });
    const messages = (r.structuredContent as { messages: DrainedMessage[] }).messages;
    if (messages.length === 0) return texts;
    texts.push(...messages.map((m) => m.text));
  }
}

/**
 * Issue: same-host holds are unbounded. A flood from a main to another main on the same host
 * was all queued (no INBOX_FULL) and grew the gateway's memory and events.db without end. A
 * local inbox now has the caps a broker inbox has, by count (broker.inboxMaxLength) and by
 * bytes (limits.inboxMaxBytes): the sender is refused with INBOX_FULL, the refusal counts as
 * a maxlen dead letter, and what was accepted is all there, in order, once.
 */
describe('same-host holds are bounded like a broker inbox', () => {
  let gateway: GatewayProcess;
  let sender: Client;
  let sink: Client;
  let other: Client;

  beforeAll(async () => {
    gateway = new GatewayProcess({
      // One sender fills the inbox: the caps themselves are under test, not the sender's share.
      config: {
        broker: { inboxMaxLength: maxLength },
        limits: { inboxMaxBytes: maxBytes, senderInboxShare: 1 },
      },
    });
    await gateway.start();
    const s = await register(gateway, 'flood');
    const k = await register(gateway, 'sink');
    const o = await register(gateway, 'bystander');
    sender = await connectMcp(gateway.mcpUrl, s.token);
    sink = await connectMcp(gateway.mcpUrl, k.token);
    other = await connectMcp(gateway.mcpUrl, o.token);
  });

  afterAll(async () => {
    for (const c of [sender, sink, other]) await c?.close().catch(() => {});
    await gateway?.dispose();
  });

  it('refuses the message past broker.inboxMaxLength with INBOX_FULL and keeps the rest in order', async () => {
    const outcomes: string[] = [];
    for (let i = 0; i < maxLength + 50; i++) {
      const r = await callTool(sender, 'bridge_send', { to: 'sink', text: `m${i}` });
      outcomes.push(r.isError ? (r.structuredContent as { error: { code: string } }).error.code : 'ok');
    }
    expect(outcomes.slice(0, maxLength).every((o) => o === 'ok')).toBe(true);
    expect(outcomes.slice(maxLength)).toEqual(Array(50).fill('INBOX_FULL'));
    const refused = await callTool(sender, 'bridge_send', { to: 'sink', text: 'one more' });
    expect((refused.content as Array<{ text: string }>)[0]?.text).toMatch(
      /^INBOX_FULL: sink's inbox is full: it holds 300 undelivered messages \(broker.inboxMaxLength is 300\)/,
    );
    const metrics = await (await fetch(`http://127.0.0.1:${gateway.port}/metrics`)).text();
    expect(metrics).toMatch(/bridge_dead_letters_total\{reason="maxlen"\} 51/);

    // Someone else's inbox is not affected; a broadcast reaches it and reports the full one.
    const broadcast = await callTool(sender, 'bridge_broadcast', { text: 'all hands' });
    expect(broadcast.structuredContent).toMatchObject({ partial: true, localCopies: 1 });
    expect(await drainAll(other)).toEqual(['all hands']);

    const drained = await drainAll(sink);
    expect(drained).toEqual(Array.from({ length: maxLength }, (_, i) => `m${i}`));
    const after = await callTool(sender, 'bridge_send', { to: 'sink', text: 'room again' });
    expect(after.isError).toBeFalsy();
    expect(await drainAll(sink)).toEqual(['room again']);
  });

  it('refuses by bytes past limits.inboxMaxBytes, and the gateway stays small', async () => {
    const pid = gateway.pid as number;
    const rssBefore = rssMb(pid);
    let accepted = 0;
    let refused = 0;
    for (let i = 0; i < 600; i++) {
      const r = await callTool(sender, 'bridge_send', { to: 'sink', text: `${i} ${kb8}` });
      if (r.isError) {
        expect((r.content as Array<{ text: string }>)[0]?.text).toMatch(/limits.inboxMaxBytes is 1048576/);
        refused++;
      } else accepted++;
    }
    // 1 MiB holds 127 messages of 8 KiB and a few bytes.
    expect(accepted).toBe(127);
    expect(refused).toBe(600 - 127);
    const rssAfter = rssMb(pid);
    const dbMb = statSync(join(gateway.home, 'events.db')).size / (1024 * 1024);
    console.log(
      `LOCAL_INBOX_CAP ${JSON.stringify({ accepted, refused, rssBefore, rssAfter, eventsDbMb: dbMb })}`,
    );
    expect(rssAfter - rssBefore).toBeLessThan(100);
    expect((await drainAll(sink)).length).toBe(127);
  });
});

/** Federated, a same-host refusal leaves its copy in bridge.dlq, as the broker's own refusal would. */
describe('a same-host refusal on a federated gateway', () => {
  let gateway: GatewayProcess;
  let sender: Client;

  beforeAll(async () => {
    gateway = new GatewayProcess({
      hostId: `localcap-${Math.random().toString(36).slice(2, 7)}`,
      env: { ...brokerEnv },
      config: { broker: { inboxMaxLength: 2 }, limits: { senderInboxShare: 1 } },
    });
    await gateway.start();
    const s = await register(gateway, 'flood');
    await register(gateway, 'sink');
    sender = await connectMcp(gateway.mcpUrl, s.token);
  });

  afterAll(async () => {
    await sender?.close().catch(() => {});
    await gateway?.dispose();
    await removeDeadLettersOf([gateway.hostId]);
  });

  it('is dead-lettered to bridge.dlq with reason maxlen', async () => {
    for (const text of ['a', 'b'])
      expect((await callTool(sender, 'bridge_send', { to: 'sink', text })).isError).toBeFalsy();
    const refused = await callTool(sender, 'bridge_send', { to: 'sink', text: 'c' });
    expect((refused.structuredContent as { error: { code: string } }).error.code).toBe('INBOX_FULL');
    type Letter = { msgId: string; reason: string; host: string; body: string };
    const mine = await dlqUntilSeen(
      'the refused message in bridge.dlq',
      async () =>
        (
          JSON.parse((await gateway.cli(['dlq', 'list', '--max', '10000', '--json'])).stdout) as Letter[]
        ).filter((l) => l.host === gateway.hostId),
      (letters) => letters.length > 0,
    );
    expect(mine.map((l) => [l.reason, JSON.parse(l.body).text])).toEqual([['maxlen', 'c']]);
  });
});
