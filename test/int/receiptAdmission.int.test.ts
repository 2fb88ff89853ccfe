import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/loadConfig.js';
import type { EntityActor } from '../../src/deliver/EntityActor.js';
import { controlKey, controlSpec, Exchange, inboxName } from '../../src/federation/topology.js';
import { Gateway } from '../../src/gateway/Gateway.js';
import { createLogger } from '../../src/log/logger.js';
import { addTrust } from '../../src/security/TrustStore.js';
import type { Envelope } from '../../src/wire/envelope.js';
import { gatewayAddress } from '../../src/wire/gatewayAddress.js';
import { encodeHlc } from '../../src/wire/hlc.js';
import type { Receipt } from '../../src/wire/receipt.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { brokerEnv, brokerUri, removeDeadLettersOf, waitFor } from '../support/federation.js';
import {
  announcePresence,
  type FakePeer,
  fakePeer,
  type LogLine,
  publishConfirmed,
  signedBy,
} from '../support/signedPeer.js';

/**
 * The sender's side of receipts (R-RC1) on the real broker: a RECEIPT arriving in
 * `control.<host>` goes through the control queue's admission (signature, signer = the host it
 * claims, schema, clock) and then is recorded on the send actor only if it names the send's
 * recipient and comes from the host the send went to. The recipient's host here is a fake
 * peer that signs by hand, so forged, misattributed and stale receipts can be published.
 */
describe('receipt admission at the sender', () => {
  let home: string;
  let gateway: Gateway;
  let lead: EntityActor;
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  const logLines: Array<LogLine & { outcome?: string; stage?: string }> = [];
  const peerB = fakePeer('rcpt-b');
  const peerC = fakePeer('rcpt-c');
  const evil = fakePeer('rcpt-evil');
  const bob = { gid: randomUUID(), name: 'bob' };
  const carol = { gid: randomUUID(), name: 'carol' };
  let msgId: string;
  let traceId: string;

  const announce = (by: FakePeer, entity: { gid: string; name: string }) =>
    announcePresence(channel, by, [entity]);

  const publish = (
    exchange: string,
    key: string,
    content: Buffer,
    headers: Record<string, string>,
    messageId: string,
  ): Promise<void> => publishConfirmed(channel, exchange, key, content, headers, messageId);

  /**
   * A RECEIPT as a recipient's gateway writes it, signed by `by`, claiming to come from
   * `fromHost`, carrying one receipt (or several: `more`).
   */
  const sendReceipt = async (
    by: FakePeer,
    fromHost: string,
    receipt: Partial<Receipt> = {},
    more: Array<Partial<Receipt>> = [],
  ) => {
    const envelope: Envelope = {
      v: '1.2',
      kind: 'RECEIPT',
      msgId: randomUUID(),
      traceId,
      hlc: encodeHlc({ wall: Date.now(), counter: 0 }),
      from: gatewayAddress(fromHost),
      to: gateway.host,
      text: '',
      receipts: [receipt, ...more].map((r) => ({
        msgId,
        recipient: bob.gid,
        stage: 'queued' as const,
        at: Date.now(),
        ...r,
      })),
    };
    const content = Buffer.from(JSON.stringify(envelope));
    await publish(Exchange.control, controlKey(gateway.host), content, signedBy(content, by), envelope.msgId);
  };

  const count = async (outcome: string) =>
    (await gateway.metrics.receipts.get()).values.find((v) => v.labels.outcome === outcome)?.value ?? 0;
  const deadLetters = async (reason: string) =>
    (await gateway.metrics.deadLetters.get()).values.find((v) => v.labels.reason === reason)?.value ?? 0;
  const sendEvents = () => {
    const db = new Database(join(home, 'events.db'), { readonly: true });
    try {
      return db
        .prepare(
          "SELECT event, to_state, data FROM event_log WHERE actor_kind = 'send' AND actor_id = ? ORDER BY hlc",
        )
        .all(msgId) as Array<{ event: string; to_state: string; data: string | null }>;
    } finally {
      db.close();
    }
  };

  beforeAll(async () => {
    home = mkdtempSync(join(tmpdir(), 'bridge-rcpt-adm-'));
    const hostId = uniqueHostId('rcpt-a');
    addTrust(home, peerB.host, peerB.keys.publicKeyString);
    addTrust(home, peerC.host, peerC.keys.publicKeyString);
    const { config } = loadConfig({
      env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: hostId, ...brokerEnv },
    });
    gateway = new Gateway({
      // Its peers publish in clear (encryption off there too): receipts are never sealed, and
      // what this file sends besides is about receipts, not sealing.
      config: {
        ...config,
        broker: { ...config.broker, heartbeatMs: 300 },
        security: { ...config.security, encryption: 'off' },
      },
      logger: createLogger({
        level: 'debug',
        host: hostId,
        destination: { write: (line: string) => void logLines.push(JSON.parse(line) as LogLine) },
      }),
      createInjector: () => {
        throw new Error('no panes here');
      },
    });
    await gateway.start();
    lead = gateway.directory.authenticate(
      (await gateway.services.registrations.register({ kind: 'main', name: 'lead' })).token,
    ) as EntityActor;
    connection = await amqp.connect(brokerUri);
    channel = await connection.createConfirmChannel();
    // bob lives on B: his inbox is on the broker, and B's presence says so.
    await channel.assertQueue(inboxName(bob.gid), { durable: false, autoDelete: false });
    await channel.bindQueue(inboxName(bob.gid), 'bridge.msg', bob.gid);
    await announce(peerB, bob);
    await announce(peerC, carol);
    await waitFor('bob and carol in the roster', () =>
      gateway.services.status.roster().filter((e) => e.gid === bob.gid || e.gid === carol.gid).length === 2
        ? true
        : undefined,
    );
    const sent = await gateway.services.sends.send(lead, {
      kind: 'SEND',
      to: `bob@${peerB.host}`,
      text: 'review this',
    });
    msgId = sent.msgId;
    traceId = sent.traceId;
  });

  afterAll(async () => {
    await channel?.close().catch(() => {});
    await connection?.close().catch(() => {});
    const hostId = gateway?.host;
    await gateway?.stop();
    await deleteQueues([
      inboxName(bob.gid),
      ...(hostId ? [inboxName(lead.gid), controlSpec(hostId).name] : []),
    ]);
    if (hostId) await removeDeadLettersOf([hostId]);
    for (const dir of [home, peerB.home, peerC.home, evil.home])
      rmSync(dir, { recursive: true, force: true });
  });

  it('a genuine receipt from the recipient’s host is recorded on the send', async () => {
    expect((await gateway.services.messageStatus(lead, msgId)).sendState).toBe('confirmed');
    await sendReceipt(peerB, peerB.host, { stage: 'queued' });
    const status = await waitFor('queued at the sender', async () => {
      const s = await gateway.services.messageStatus(lead, msgId);
      return s.stage === 'queued' ? s : undefined;
    });
    expect(status).toMatchObject({
      to: { gid: bob.gid, name: 'bob', host: peerB.host },
      sendState: 'queued',
    });
  });

  it('forged, misattributed and misaddressed receipts are refused, logged and counted; nothing is recorded', async () => {
    // Signed by C, which the sender trusts, but the message went to B: refused at the send.
    await sendReceipt(peerC, peerC.host, { stage: 'submitted' });
    // Claims to be B's gateway but C signed it: admission refuses it (unknown-sender).
    await sendReceipt(peerC, peerB.host, { stage: 'submitted' });
    // A host nobody trusts: bad signature.
    await sendReceipt(evil, evil.host, { stage: 'submitted' });
    // B's own signature, but for a recipient the message did not go to.
    await sendReceipt(peerB, peerB.host, { stage: 'submitted', recipient: carol.gid });
    // B's own signature, for a message this host never sent: logged and acked.
    await sendReceipt(peerB, peerB.host, { stage: 'submitted', msgId: randomUUID() });
    // One RECEIPT with a bad receipt among good ones: each is judged on its own.
    await sendReceipt(peerB, peerB.host, { stage: 'submitted', recipient: carol.gid }, [
      { stage: 'queued' },
      { stage: 'submitted', msgId: randomUUID() },
    ]);

    await waitFor('every forged receipt handled', async () =>
      (await count('wrong-host')) === 1 &&
      (await count('wrong-recipient')) === 2 &&
      (await count('unknown-message')) === 2 &&
      (await count('stale')) === 1 &&
      (await deadLetters('unknown-sender')) >= 1 &&
      (await deadLetters('bad-signature')) >= 1
        ? true
        : undefined,
    );
    expect((await gateway.services.messageStatus(lead, msgId)).stage).toBe('queued');
    expect(sendEvents().filter((e) => e.event === 'send.receipt')).toHaveLength(1);
    const refused = logLines.filter((l) => l.msg.startsWith('refused a receipt'));
    expect(refused.map((l) => l.reason).sort()).toEqual(['wrong-host', 'wrong-recipient', 'wrong-recipient']);
    expect(refused.find((l) => l.reason === 'wrong-host')?.msg).toContain(`${peerC.host} wrote it`);
    expect(logLines.some((l) => l.msg.includes('receipt for a message this host did not send'))).toBe(true);
  });

  it('the final receipt is recorded; a stale one after it changes nothing; the control queue is left empty', async () => {
    await sendReceipt(peerB, peerB.host, { stage: 'handed-over' });
    await waitFor('handed-over at the sender', async () =>
      (await gateway.services.messageStatus(lead, msgId)).stage === 'handed-over' ? true : undefined,
    );
    await sendReceipt(peerB, peerB.host, { stage: 'queued' });
    await waitFor('the stale receipt seen', async () => ((await count('stale')) === 2 ? true : undefined));
    await sleep(200);
    const receipts = sendEvents().filter((e) => e.event === 'send.receipt');
    expect(receipts.map((e) => [e.to_state, JSON.parse(e.data ?? '{}').stage])).toEqual([
      ['queued', 'queued'],
      ['handed-over', 'handed-over'],
    ]);
    const status = await gateway.services.messageStatus(undefined, msgId);
    expect(status.stages.map((s) => s.stage)).toEqual(['queued', 'handed-over']);
    expect(status.sendState).toBe('handed-over');
    const depth = await channel.checkQueue(controlSpec(gateway.host).name);
    expect(depth.messageCount).toBe(0);
  });

  it('only the sender, a main or an orchestrator may ask; an unknown msg id is UNKNOWN_MESSAGE', async () => {
    const main = gateway.directory.authenticate(
      (await gateway.services.registrations.register({ kind: 'main', name: 'other-main' })).token,
    ) as EntityActor;
    const worker = gateway.directory.authenticate(
      (await gateway.services.registrations.register({ kind: 'worker', name: 'a-worker' })).token,
    ) as EntityActor;
    expect((await gateway.services.messageStatus(main, msgId)).stage).toBe('handed-over');
    await expect(gateway.services.messageStatus(worker, msgId)).rejects.toMatchObject({ code: 'FORBIDDEN' });
    await expect(gateway.services.messageStatus(lead, randomUUID())).rejects.toMatchObject({
      code: 'UNKNOWN_MESSAGE',
    });
    await deleteQueues([inboxName(main.gid), inboxName(worker.gid)]);
  });
});
