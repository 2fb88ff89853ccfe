import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlSpec, inboxName } from '../../src/federation/topology.js';
import { deleteQueues } from '../support/broker.js';
import { brokerEnv, removeDeadLettersOf, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp, type DrainedMessage, type Registered } from '../support/mcpClient.js';

const maxLength = 40;
/** The default limits.senderInboxShare: one sender holds at most a quarter of an inbox. */
const share = maxLength / 4;

async function register(g: GatewayProcess, kind: string, name: string): Promise<Registered> {
  const r = await g.cli(['register', '--kind', kind, '--name', name, '--json']);
  expect(r.code, r.stderr || r.stdout).toBe(0);
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

/**
 * The same flood across hosts: the broadcasts go through the broker, and the receiving gateway
 * holds the sender to its share of each inbox when the copies arrive. Past it, a copy is
 * dead-lettered as maxlen, the share named in its detail; another host's sender still reaches
 * the same inbox.
 */
describe('one sender on another host cannot fill every inbox (federated)', () => {
  const suffix = Math.random().toString(36).slice(2, 7);
  let origin: GatewayProcess;
  let receiver: GatewayProcess;
  const clients: Client[] = [];
  const gids: string[] = [];

  const registered = async (g: GatewayProcess, kind: string, name: string): Promise<Client> => {
    const r = await register(g, kind, name);
    gids.push(r.gid);
    const client = await connectMcp(g.mcpUrl, r.token);
    clients.push(client);
    return client;
  };

  beforeAll(async () => {
    origin = new GatewayProcess({
      hostId: `share-origin-${suffix}`,
      env: { ...brokerEnv },
      config: { broker: { heartbeatMs: 300 } },
    });
    receiver = new GatewayProcess({
      hostId: `share-receiver-${suffix}`,
      env: { ...brokerEnv },
      config: { broker: { heartbeatMs: 300, inboxMaxLength: maxLength } },
    });
    await Promise.all([origin.start(), receiver.start()]);
  });

  afterAll(async () => {
    for (const c of clients) await c.close().catch(() => {});
    for (const g of [origin, receiver]) await g?.dispose();
    await removeDeadLettersOf([origin, receiver].map((g) => g.hostId));
    await deleteQueues([
      ...gids.map(inboxName),
      ...[origin, receiver].map((g) => controlSpec(g.hostId).name),
    ]);
  });

  it("80 broadcasts from a worker on one host take only its share of another host's inboxes", async () => {
    const flooder = await registered(origin, 'worker', 'flooder');
    const peer = await registered(origin, 'main', 'peer');
    const m1 = await registered(receiver, 'main', `far1-${suffix}`);
    const m2 = await registered(receiver, 'main', `far2-${suffix}`);
    await waitFor('both far mains in the origin roster', async () => {
      const r = await callTool(flooder, 'bridge_roster', {});
      const names = (r.structuredContent as { entities: Array<{ name: string }> }).entities.map(
        (e) => e.name,
      );
      return names.includes(`far1-${suffix}`) && names.includes(`far2-${suffix}`) ? true : undefined;
    });

    let partial = 0;
    for (let i = 0; i < 80; i++) {
      const r = await callTool(flooder, 'bridge_broadcast', { text: `flood ${i}` });
      expect(r.isError, errorText(r)).toBeFalsy();
      if ((r.structuredContent as { partial: boolean }).partial) partial++;
    }
    // Another sender still reaches the flooded inbox. While the receiving gateway is still
    // working through the flood the broker's own cap may refuse it, and says so (INBOX_FULL,
    // the broker's cap, not the flooder's share); once through, nothing of the flood is left.
    const sent = await waitFor('the peer to reach far1', async () => {
      const r = await callTool(peer, 'bridge_send', { to: `far1-${suffix}`, text: 'still reachable?' });
      if (!r.isError) return r;
      expect(errorText(r)).toMatch(/^INBOX_FULL: .*the broker nacked the publish/);
      await new Promise((resolve) => setTimeout(resolve, 200));
      return undefined;
    });
    expect(sent.isError).toBeFalsy();

    const inbox1: DrainedMessage[] = [];
    await waitFor('the peer message in far1', async () => {
      inbox1.push(...(await drainAll(m1)));
      return inbox1.some((m) => m.text === 'still reachable?') ? true : undefined;
    });
    expect(inbox1.filter((m) => m.from.name === 'flooder')).toHaveLength(share);
    expect(inbox1.filter((m) => m.from.name === 'peer').map((m) => m.text)).toEqual(['still reachable?']);
    expect((await drainAll(m2)).filter((m) => m.from.name === 'flooder')).toHaveLength(share);

    // The copies past the share are dead letters with the reason and the share named, none lost.
    const letters = await waitFor(
      'the refused copies dead-lettered',
      async () => {
        const listed = JSON.parse(
          (await receiver.cli(['dlq', 'list', '--max', '10000', '--json'])).stdout,
        ) as Array<{ reason: string; detail: string; host: string; queue: string }>;
        const ours = listed.filter(
          (l) =>
            l.host === receiver.hostId &&
            (l.queue === inboxName(gids[2] as string) || l.queue === inboxName(gids[3] as string)),
        );
        return ours.length >= 2 * (80 - share - partial) ? ours : undefined;
      },
      30_000,
    );
    // A copy the broker refused when the flood outran the receiver is dead-lettered by the origin
    // and the broadcast reported partial; every other copy past the share is a letter here.
    expect(letters.length).toBeLessThanOrEqual(2 * (80 - share));
    expect(letters.length).toBeGreaterThanOrEqual(2 * (80 - share - partial));
    for (const letter of letters) {
      expect(letter.reason).toBe('maxlen');
      expect(letter.detail).toMatch(/your whole share of it \(limits\.senderInboxShare 0\.25/);
    }
  });
});
