import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/loadConfig.js';
import { type Daemon, startDaemon } from '../../src/daemon/startDaemon.js';
import type { EntityActor } from '../../src/deliver/EntityActor.js';
import { controlSpec, inboxName } from '../../src/federation/topology.js';
import { createLogger } from '../../src/log/logger.js';
import { sign } from '../../src/security/signature.js';
import { addTrust } from '../../src/security/TrustStore.js';
import type { Envelope } from '../../src/wire/envelope.js';
import { encodeHlc } from '../../src/wire/hlc.js';
import { SignatureHeader } from '../../src/wire/signatureHeaders.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { brokerEnv, brokerUri, dlqUntilSeen, removeDeadLettersOf, waitFor } from '../support/federation.js';
import { sendEnvelope } from '../support/sendEnvelope.js';
import {
  announcedTo,
  announcePresence,
  type FakePeer,
  fakePeer,
  type LogLine,
  publishConfirmed,
} from '../support/signedPeer.js';

/**
 * Invariant 6 on the receive path: only messages signed by a trusted host, over their exact
 * bytes, from a sender that lives on that host, within the clock-skew window, are delivered.
 * Everything else is dead-lettered with its reason, loudly, and never reaches the recipient.
 * PRESENCE is signed too: a host can only announce its own entities.
 */
describe('signed envelopes', () => {
  let daemon: Daemon;
  let home: string;
  let target: EntityActor;
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  const logLines: LogLine[] = [];
  const peer = fakePeer('peer');
  const evil = fakePeer('evil');
  const sender = { gid: randomUUID(), name: 'sender' };
  const published: Record<string, string> = {};

  const envelope = (overrides: Partial<Envelope> = {}): Envelope =>
    sendEnvelope({ ...sender, host: peer.host, kind: 'main' }, target.gid, overrides);

  const publish = (
    exchange: string,
    key: string,
    content: Buffer,
    headers: Record<string, string>,
    messageId: string,
  ): Promise<void> => publishConfirmed(channel, exchange, key, content, headers, messageId);

  /** Publishes an envelope signed by `by` (or with the given headers), remembering its case. */
  const send = async (
    name: string,
    env: Envelope,
    options: { by?: FakePeer; tamper?: boolean; headers?: Record<string, string> } = {},
  ) => {
    const by = options.by ?? peer;
    const bytes = Buffer.from(JSON.stringify(env));
    const signature = sign(bytes, by.keys.privateKey);
    const content = options.tamper
      ? Buffer.from(JSON.stringify({ ...env, text: 'changed in transit' }))
      : bytes;
    const headers = options.headers ?? {
      [SignatureHeader.signature]: signature,
      [SignatureHeader.signer]: by.host,
    };
    published[env.msgId] = name;
    await publish('bridge.msg', env.to, content, headers, env.msgId);
  };

  const drained = async () => {
    const handover = await daemon.gateway.services.drains.drain(target);
    handover.confirm();
    return handover.envelopes;
  };

  beforeAll(async () => {
    home = mkdtempSync(join(tmpdir(), 'bridge-sig-'));
    const hostId = uniqueHostId('verifier');
    addTrust(home, peer.host, peer.keys.publicKeyString);
    const { config } = loadConfig({
      env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: hostId, ...brokerEnv, BRIDGE_MCP_PORT: '0' },
    });
    daemon = await startDaemon({
      // Its peers publish in clear (security.encryption off): this file is about signatures;
      // sealed arrivals are test/int/sealedWire.int.test.ts's.
      config: { ...config, security: { ...config.security, encryption: 'off', unknownSenderGraceMs: 300 } },
      logger: createLogger({
        level: 'info',
        host: hostId,
        destination: { write: (line: string) => void logLines.push(JSON.parse(line) as LogLine) },
      }),
    });
    const registration = await daemon.gateway.services.registrations.register({
      kind: 'main',
      name: 'target',
    });
    target = daemon.gateway.directory.authenticate(registration.token) as EntityActor;
    connection = await amqp.connect(brokerUri);
    channel = await connection.createConfirmChannel();
    await announcedTo(daemon.gateway, channel, peer, [sender]);
  });

  afterAll(async () => {
    await channel?.close().catch(() => {});
    await connection?.close().catch(() => {});
    const gid = target?.gid;
    const hostId = daemon?.gateway.host;
    await daemon?.stop();
    if (gid && hostId) {
      await deleteQueues([inboxName(gid), controlSpec(hostId).name]);
      await removeDeadLettersOf([hostId]);
    }
    for (const dir of [home, peer.home, evil.home]) rmSync(dir, { recursive: true, force: true });
  });

  it('delivers a message signed by a trusted host for a sender in its roster, once even when replayed', async () => {
    const good = envelope({ text: 'properly signed' });
    await send('good', good);
    await send('replayed', good);
    const got = await waitFor('the good message', async () => {
      const messages = await drained();
      return messages.length > 0 ? messages : undefined;
    });
    expect(got.map((m) => m.msgId)).toEqual([good.msgId]);
    await sleep(300);
    expect(await drained()).toEqual([]);
  });

  it('dead-letters forged, untrusted, tampered, misattributed, stale and unknown-sender messages with their reasons', async () => {
    const cases: Array<[string, Envelope, Parameters<typeof send>[2], string, RegExp]> = [
      [
        'forged',
        envelope(),
        { headers: { [SignatureHeader.signature]: 'A'.repeat(86), [SignatureHeader.signer]: peer.host } },
        'bad-signature',
        /does not match/,
      ],
      ['unsigned', envelope(), { headers: {} }, 'bad-signature', /unsigned/],
      [
        'untrusted',
        envelope({ from: { gid: sender.gid, name: 'sender', host: evil.host, kind: 'main' } }),
        { by: evil },
        'bad-signature',
        /not in this gateway's trust store/,
      ],
      ['tampered', envelope(), { tamper: true }, 'bad-signature', /does not match/],
      [
        'misattributed',
        envelope({ from: { gid: randomUUID(), name: 'alice', host: 'somewhere-else', kind: 'main' } }),
        {},
        'unknown-sender',
        /signed by/,
      ],
      [
        'stale',
        envelope({ hlc: encodeHlc({ wall: Date.now() - 3 * 24 * 3600_000, counter: 0 }) }),
        {},
        'expired',
        /older than any live message/,
      ],
      [
        'future',
        envelope({ hlc: encodeHlc({ wall: Date.now() + 3600_000, counter: 0 }) }),
        {},
        'rejected',
        /in the future/,
      ],
      [
        'unknown sender',
        envelope({ from: { gid: randomUUID(), name: 'stranger', host: peer.host, kind: 'main' } }),
        {},
        'unknown-sender',
        /not in .* roster/,
      ],
    ];
    for (const [name, env, options] of cases) await send(name, env, options);

    await waitFor('every refusal to be logged', () =>
      cases.every(([, env]) => logLines.some((l) => l.msgId === env.msgId)) ? true : undefined,
    );
    for (const [name, env, , reason, detail] of cases) {
      const line = logLines.find((l) => l.msgId === env.msgId);
      expect(line, name).toMatchObject({
        level: 50,
        reason,
        msg: 'refused a message from the broker; dead-lettered with its reason',
      });
      expect(line?.detail, name).toMatch(detail);
    }
    expect(await drained()).toEqual([]); // none of them reached the recipient

    const letters = await dlqUntilSeen(
      'every case in bridge.dlq',
      () => daemon.gateway.services.deadLetters.listDeadLetters(10_000),
      (listed) => cases.every(([, env]) => listed.some((l) => l.msgId === env.msgId)),
    );
    for (const [name, env, , reason] of cases) {
      expect(letters.find((l) => l.msgId === env.msgId)?.reason, name).toBe(reason);
    }
    const status = await daemon.gateway.services.status.status();
    // At least ours (broadcasts from other tests' untrusted gateways land here too).
    const counts = status.deadLetters as Record<string, number>;
    for (const [reason, n] of Object.entries({
      'bad-signature': 4,
      'unknown-sender': 2,
      expired: 1,
      rejected: 1,
    })) {
      expect(counts[reason] ?? 0, reason).toBeGreaterThanOrEqual(n);
    }
  });

  it('holds a sender the roster does not know yet, in order, without holding up anyone else', async () => {
    const late = { gid: randomUUID(), name: 'late-joiner' };
    const from = { gid: late.gid, name: late.name, host: peer.host, kind: 'main' as const };
    await send('late first', envelope({ from, text: 'first' }));
    await send('late second', envelope({ from, text: 'second' }));
    await send('known', envelope({ text: 'from a known sender' }));
    const meanwhile = await waitFor('the known sender’s message', async () => {
      const messages = await drained();
      return messages.length > 0 ? messages : undefined;
    });
    expect(meanwhile.map((m) => m.text)).toEqual(['from a known sender']); // not stuck behind the stranger
    await announcePresence(channel, peer, [sender, late]);
    const got = await waitFor('the held messages', async () => {
      const messages = await drained();
      return messages.length > 0 ? messages : undefined;
    });
    const rest = await drained();
    expect([...got, ...rest].map((m) => m.text)).toEqual(['first', 'second']);
  });

  it('ignores a PRESENCE that claims another host’s entities, or is signed by an untrusted key', async () => {
    const victim = uniqueHostId('victim');
    const claimed = { gid: randomUUID(), name: 'impostor' };
    await announcePresence(channel, peer, [claimed], victim); // a trusted peer announcing for someone else
    const untrustedGid = randomUUID();
    await announcePresence(channel, evil, [{ gid: untrustedGid, name: 'evil-twin' }]);
    await sleep(500);
    const roster = daemon.gateway.services.status.roster();
    expect(roster.some((e) => e.gid === claimed.gid || e.host === victim)).toBe(false);
    expect(roster.some((e) => e.gid === untrustedGid)).toBe(false);
    const metrics = await daemon.gateway.metrics.registry.getSingleMetricAsString(
      'bridge_presence_ignored_total',
    );
    // Every gateway on the shared broker hears every PRESENCE (other tests' too): count ours by
    // what the log says about them.
    expect(metrics).toMatch(/reason="wrong-host"} [1-9]/);
    expect(metrics).toMatch(/reason="bad-signature"} [1-9]/);
    const ignored = logLines.filter((l) => l.msg === 'ignored a PRESENCE announcement');
    expect(ignored.find((l) => l.detail?.includes(`announces host ${victim}`))).toMatchObject({
      reason: 'wrong-host',
    });
    expect(ignored.find((l) => l.detail?.includes(`signed by ${evil.host}`))).toMatchObject({
      reason: 'bad-signature',
    });
  });
});
