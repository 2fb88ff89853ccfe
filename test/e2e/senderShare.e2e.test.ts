import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp, type DrainedMessage, type Registered } from '../support/mcpClient.js';

const maxLength = 40;
/** The default limits.senderInboxShare: one sender holds at most a quarter of an inbox. */
const share = maxLength / 4;

async function register(g: GatewayProcess, kind: string, name: string): Promise<Registered> {
  const r = await g.cli(['register', '--kind', kind, '--name', name, '--json']);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as Registered;
}

function errorText(r: { content: unknown }): string {
  return (r.content as Array<{ text: string }>)[0]?.text ?? '';
}

async function drainAll(client: Client): Promise<DrainedMessage[]> {
  const all: DrainedMessage[] = [];
  for (;;) {
    const r = await callTool(client, 'bridge_drain', { max: 100 });
    const messages = (r.structuredContent as { messages: DrainedMessage[] }).messages;
    if (messages.length === 0) return all;
    all.push(...messages);
  }
}

/**
 * Issue 29 item 11: one sender could fill every inbox. 80 broadcasts from one worker in under
 * a second filled every inbox on its host, and everyone else's sends were INBOX_FULL after. A
 * sender now holds at most its share of any inbox (limits.senderInboxShare of the caps): past
 * it, its message is refused with INBOX_SHARE_FULL, saying what to do, and the rest of the
 * inbox stays free for the others.
 */
describe('one sender cannot fill every inbox', () => {
  let gateway: GatewayProcess;
  let flooder: Client;
  const mains: Client[] = [];

  beforeAll(async () => {
    gateway = new GatewayProcess({ config: { broker: { inboxMaxLength: maxLength } } });
    await gateway.start();
    const w = await register(gateway, 'worker', 'flooder');
    flooder = await connectMcp(gateway.mcpUrl, w.token);
    for (const name of ['m1', 'm2', 'm3']) {
      const m = await register(gateway, 'main', name);
      mains.push(await connectMcp(gateway.mcpUrl, m.token));
    }
  });

  afterAll(async () => {
    for (const c of [flooder, ...mains]) await c?.close().catch(() => {});
    await gateway?.dispose();
  });

  it('80 broadcasts from one worker leave room in every inbox, and the flood is told why', async () => {
    const results = await Promise.all(
      Array.from({ length: 80 }, (_, i) => callTool(flooder, 'bridge_broadcast', { text: `flood ${i}` })),
    );
    const refused = results.filter((r) => r.isError);
    // Everyone else can still reach everyone.
    const [m1, m2, m3] = mains as [Client, Client, Client];
    const sent = await callTool(m2, 'bridge_send', { to: 'm1', text: 'still reachable?' });
    expect(errorText(sent)).not.toMatch(/INBOX_FULL/);
    expect(sent.isError).toBeFalsy();

    expect(refused.length).toBe(80 - share);
    expect(errorText(refused[0] as { content: unknown })).toMatch(
      /^INBOX_SHARE_FULL: .*holds? 10 of your undelivered messages.*limits\.senderInboxShare/,
    );
    const inbox1 = await drainAll(m1);
    expect(inbox1.filter((m) => m.from.name === 'flooder')).toHaveLength(share);
    expect(inbox1.filter((m) => m.from.name === 'm2').map((m) => m.text)).toEqual(['still reachable?']);
    expect(await drainAll(m3)).toHaveLength(share);

    // Once m1 took its messages, the flooder has its share of m1's inbox again.
    const again = await callTool(flooder, 'bridge_send', { to: 'm1', text: 'after the drain' });
    expect(again.isError).toBeFalsy();
  });
});
