import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/loadConfig.js';
import { type Daemon, startDaemon } from '../../src/daemon/startDaemon.js';
import { deliveryKind } from '../../src/deliver/Delivery.js';
import type { EntityActor } from '../../src/deliver/EntityActor.js';
import { controlSpec, inboxName } from '../../src/federation/topology.js';
import { createLogger } from '../../src/log/logger.js';
import { verify } from '../../src/security/signature.js';
import { addTrust } from '../../src/security/TrustStore.js';
import { readActorHead } from '../../src/store/actorHeads.js';
import { deliveryActorId } from '../../src/store/actorIds.js';
import { readOutboxDeadLetters } from '../../src/store/deadLetterOutbox.js';
import { DeadLetterHeader } from '../../src/wire/deadLetterView.js';
import type { Envelope } from '../../src/wire/envelope.js';
import { SignatureHeader } from '../../src/wire/signatureHeaders.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import {
  brokerEnv,
  type HeldLetter,
  removeDeadLettersOf,
  takeDeadLetters,
  waitFor,
} from '../support/federation.js';
import { TcpForwarder } from '../support/netns.js';
import { sendEnvelope } from '../support/sendEnvelope.js';
import {
  announcedTo,
  fakePeer,
  publishConfirmed,
  sealedBytes,
  sealingKeyOf,
  signedBy,
} from '../support/signedPeer.js';

/**
 * A cross-host message dead-lettered by the gateway it reached (issue 34, item 4): its letter
 * in bridge.dlq carries the bytes and signature it came in, so it still verifies as its
 * sender's (a requeue is not refused as bad-signature), and a letter made while the broker is
 * away is kept in the store's outbox, so a gateway that stops before the broker is back
 * publishes it at its next start. The peer seals, as gateways do: the letters stay sealed.
 */
describe('cross-host dead letters keep their bytes', () => {
  const peer = fakePeer('dl-peer');
  const sender = { gid: randomUUID(), name: 'far-sender' };
  const hostId = uniqueHostId('dl-keeper');
  const home = mkdtempSync(join(tmpdir(), 'bridge-dl-keep-'));
  let forwarder: TcpForwarder;
  let daemon: Daemon;
  let target: EntityActor;
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  const created: string[] = [];

  const start = async (brokerUri: string): Promise<Daemon> => {
    const { config } = loadConfig({
      env: {
        BRIDGE_HOME: home,
        BRIDGE_HOST_ID: hostId,
        ...brokerEnv,
        BRIDGE_BROKER_URI: brokerUri,
        BRIDGE_MCP_PORT: '0',
      },
    });
    return startDaemon({
      config: { ...config, broker: { ...config.broker, retryBaseMs: 100, retryMaxMs: 500 } },
      logger: createLogger({ level: 'silent', host: hostId }),
    });
  };

  /** The peer's signed SEND to `to`, published as a peer gateway would: its exact bytes. */
  const send = async (to: string, overrides: Partial<Envelope> = {}) => {
    const envelope = sendEnvelope({ ...sender, host: peer.host, kind: 'main' }, to, {
      text: `a brief ${randomUUID()}`,
      ...overrides,
    });
    const content = sealedBytes(envelope, [{ host: hostId, key: sealingKeyOf(home) }]);
    const headers = signedBy(content, peer);
    await publishConfirmed(channel, 'bridge.msg', to, content, headers, envelope.msgId);
    return { envelope, content, headers };
  };

  /** Takes this gateway's letter for `msgId` out of bridge.dlq once it is there. */
  const letterOf = (msgId: string, reason?: string): Promise<HeldLetter> =>
    waitFor(
      `the dead letter of ${msgId}`,
      async () => {
        const [letter] = await takeDeadLetters(
          (headers, messageId) =>
            messageId === msgId &&
            headers[DeadLetterHeader.host] === hostId &&
            (reason === undefined || headers[DeadLetterHeader.reason] === reason),
        );
        return letter;
      },
      20_000,
    );

  const verifiesAsPeer = (letter: HeldLetter): boolean =>
    verify(letter.content, String(letter.headers[SignatureHeader.signature]), [peer.keys.publicKeyString]);

  const stateOf = (msgId: string, gid: string): string | undefined =>
    readActorHead(daemon.gateway.store, deliveryKind, deliveryActorId(msgId, gid))?.state;

  beforeAll(async () => {
    addTrust(home, peer.host, peer.keys.publicKeyString);
    forwarder = await TcpForwarder.start('127.0.0.1', 0, '127.0.0.1', 5672);
    daemon = await start(`amqp://guest:guest@127.0.0.1:${forwarder.port}`);
    const registration = await daemon.gateway.services.registrations.register({
      kind: 'main',
      name: 'target',
    });
    target = daemon.gateway.directory.authenticate(registration.token) as EntityActor;
    created.push(inboxName(target.gid), controlSpec(hostId).name);
    connection = await amqp.connect(brokerEnv.BRIDGE_BROKER_URI);
    channel = await connection.createConfirmChannel();
    await announcedTo(daemon.gateway, channel, peer, [sender]);
  });

  afterAll(async () => {
    await channel?.close().catch(() => {});
    await connection?.close().catch(() => {});
    await daemon?.stop();
    await forwarder?.close();
    await deleteQueues(created);
    await removeDeadLettersOf([hostId]);
    rmSync(home, { recursive: true, force: true });
    rmSync(peer.home, { recursive: true, force: true });
  });

  it('an expired one carries the bytes it came in: it verifies, and a requeue is not refused for its signature', async () => {
    const { envelope, content, headers } = await send(target.gid, { expiresAt: Date.now() + 1_500 });
    await waitFor('dead-lettered here', () =>
      stateOf(envelope.msgId, target.gid) === 'dead-lettered' ? true : undefined,
    );
    // Back to the inbox, not forced: verified as the peer's, and refused again for its expiry.
    await waitFor('requeued', async () =>
      (await daemon.gateway.services.deadLetters.requeueDeadLetters(envelope.msgId, false)).requeued === 1
        ? true
        : undefined,
    );
    const again = await letterOf(envelope.msgId);
    expect(again.headers[DeadLetterHeader.reason]).not.toBe('bad-signature');
    expect(again.content.equals(content)).toBe(true);
    expect(again.headers[SignatureHeader.signature]).toBe(headers[SignatureHeader.signature]);
    expect(again.headers[SignatureHeader.signer]).toBe(peer.host);
    expect(verifiesAsPeer(again)).toBe(true);
    expect(readOutboxDeadLetters(daemon.gateway.store)).toEqual([]);
  });

  it('a recipient deregistered with messages held: each letter is its original, to its inbox', async () => {
    const registration = await daemon.gateway.services.registrations.register({
      kind: 'main',
      name: 'leaving',
    });
    const leaving = daemon.gateway.directory.authenticate(registration.token) as EntityActor;
    created.push(inboxName(leaving.gid));
    const sent = [await send(leaving.gid), await send(leaving.gid)];
    await waitFor('both accepted', () =>
      sent.every((s) => stateOf(s.envelope.msgId, leaving.gid) !== undefined) ? true : undefined,
    );
    await daemon.gateway.services.registrations.deregister(leaving.gid);
    for (const { envelope, content } of sent) {
      const letter = await letterOf(envelope.msgId, 'recipient-gone');
      expect(letter.content.equals(content)).toBe(true);
      expect(verifiesAsPeer(letter)).toBe(true);
      expect(letter.headers[DeadLetterHeader.routingKey]).toBe(leaving.gid);
      expect(letter.headers[DeadLetterHeader.queue]).toBe(inboxName(leaving.gid));
    }
  });

  it('one made while the broker is away is kept in the outbox and published by the next start', async () => {
    const { envelope, content } = await send(target.gid, { expiresAt: Date.now() + 3_000 });
    await waitFor('accepted', () => (stateOf(envelope.msgId, target.gid) !== undefined ? true : undefined));
    await forwarder.close();
    await waitFor('the broker away', async () => {
      const { broker } = (await daemon.gateway.services.status.status()) as { broker: { state: string } };
      return broker.state === 'connected' ? undefined : true;
    });
    await waitFor('dead-lettered here', () =>
      stateOf(envelope.msgId, target.gid) === 'dead-lettered' ? true : undefined,
    );
    await waitFor('kept in the outbox', () =>
      readOutboxDeadLetters(daemon.gateway.store).some((l) => l.msgId === envelope.msgId) ? true : undefined,
    );
    // Stopped before the broker is back: what it had in memory is gone, the store is not.
    await daemon.stop();
    daemon = await start(brokerEnv.BRIDGE_BROKER_URI);
    const letter = await letterOf(envelope.msgId, 'expired');
    expect(letter.content.equals(content)).toBe(true);
    expect(verifiesAsPeer(letter)).toBe(true);
    await waitFor('the outbox emptied', () =>
      readOutboxDeadLetters(daemon.gateway.store).length === 0 ? true : undefined,
    );
  });
});
