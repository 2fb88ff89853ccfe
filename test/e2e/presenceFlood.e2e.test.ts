import { randomUUID } from 'node:crypto';
import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Exchange, rosterKey } from '../../src/federation/topology.js';
import { addTrust } from '../../src/security/TrustStore.js';
import { schemaVersionString } from '../../src/wire/envelope.js';
import { brokerEnv, brokerUri, testDeployment, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { rssMb } from '../support/processMemory.js';
import { announcePresence, fakePeer, publishConfirmed } from '../support/signedPeer.js';

const suffix = Math.random().toString(36).slice(2, 7);
/** Far more than the gateway's own resident set: on main the flood took it from ~330 to ~1,200 MB. */
const rssGrowthLimitMb = 250;
/** A refusal is one short line; on main the flood's zod issues made one line of ~27 MB. */
const longestLogLine = 8 * 1024;

/**
 * A PRESENCE of 28.8 MB as a provisioned login (here guest) can publish it into every roster
 * queue: unsigned, 150,000 entries, none of them valid. Every gateway's roster queue binds
 * `roster.#`, so each one received it.
 */
function hostilePresence(host: string): Buffer {
  const entity = {
    gid: 'not-a-uuid-'.repeat(8),
    name: 'flood',
    kind: 'worker',
    groups: Array.from({ length: 4 }, (_, i) => `g${i}`),
    status: 's'.repeat(40),
  };
  const presence = {
    v: schemaVersionString,
    kind: 'PRESENCE',
    host,
    hlc: '0000000000000:0000',
    ttlMs: 600_000,
    entities: Array.from({ length: 150_000 }, () => entity),
  };
  return Buffer.from(JSON.stringify(presence));
}

/**
 * Issue 29 item 6: an unsigned PRESENCE was parsed whole before its signature was checked. One
 * 28.8 MB PRESENCE took a gateway from 331 to 1,210 MB (never returned), failed /healthz once
 * and wrote a 27 MB log line. Every arrival is now size-checked before anything reads it and
 * verified over its raw bytes before it is decoded: the flood is refused `oversized` in one
 * short line, the gateway stays small and healthy, and a peer's PRESENCE is taken as before.
 */
describe('a 28 MB PRESENCE is refused before it is parsed', () => {
  let alpha: GatewayProcess;
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  const peer = fakePeer('pres-peer');
  const floodHost = `flood-${suffix}`;

  const ignoredLines = (): string[] =>
    alpha.log
      .split('\n')
      .filter((l) => l.includes('ignored a PRESENCE announcement') && l.includes(`roster.${floodHost}`));

  beforeAll(async () => {
    alpha = new GatewayProcess({ hostId: `alpha-${suffix}`, env: { ...brokerEnv } });
    addTrust(alpha.home, peer.host, peer.keys.publicKeyString);
    await alpha.start();
    connection = await amqp.connect(brokerUri);
    channel = await connection.createConfirmChannel();
  });

  afterAll(async () => {
    await connection?.close().catch(() => {});
    await alpha?.dispose();
  });

  it('refuses it as oversized in one short line, without the payload, and the gateway stays small', async () => {
    const pid = alpha.pid as number;
    const rssBefore = rssMb(pid);
    let rssPeak = rssBefore;
    const content = hostilePresence(floodHost);
    expect(content.length).toBeGreaterThan(28 * 1024 * 1024);
    await publishConfirmed(
      channel,
      Exchange.roster,
      rosterKey(testDeployment, floodHost),
      content,
      {},
      `flood/${randomUUID()}`,
    );
    const line = await waitFor('the flood refused', async () => {
      rssPeak = Math.max(rssPeak, rssMb(pid));
      return ignoredLines()[0];
    });
    expect(JSON.parse(line)).toMatchObject({
      reason: 'oversized',
      routingKey: rosterKey(testDeployment, floodHost),
    });
    expect(JSON.parse(line).detail).toMatch(/limits\.maxPresenceBytes/);
    expect(await alpha.healthy()).toBe(true);
    rssPeak = Math.max(rssPeak, rssMb(pid));
    const longest = Math.max(...alpha.log.split('\n').map((l) => l.length));
    console.log(
      `PRESENCE_FLOOD ${JSON.stringify({ bytes: content.length, rssBefore, rssPeak, rssAfter: rssMb(pid), longest })}`,
    );
    expect(longest).toBeLessThan(longestLogLine);
    expect(rssPeak - rssBefore).toBeLessThan(rssGrowthLimitMb);
    expect(alpha.log).not.toContain('not-a-uuid-not-a-uuid');

    // The roster queue's consumer is still there: a trusted peer's PRESENCE is taken.
    await announcePresence(channel, peer, [{ gid: randomUUID(), name: 'peermain' }]);
    await waitFor('the peer in the roster', async () => {
      return (await alpha.roster()).some((e) => e.name === 'peermain') ? true : undefined;
    });
  });
});
