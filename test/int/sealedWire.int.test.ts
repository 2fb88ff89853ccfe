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
import { newPrivateKey, sealingKeyString } from '../../src/security/publicKey.js';
import { addTrust } from '../../src/security/TrustStore.js';
import type { Envelope } from '../../src/wire/envelope.js';
import type { Sealed } from '../../src/wire/sealed.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { brokerEnv, removeDeadLettersOf, waitFor } from '../support/federation.js';
import { sendEnvelope } from '../support/sendEnvelope.js';
import {
  announcedTo,
  announcePresence,
  fakePeer,
  type LogLine,
  publishConfirmed,
  sealedBytes,
  sealingKeyOf,
  signedBy,
} from '../support/signedPeer.js';

/**
 * Sealed envelopes on the receive path (issue 34): a gateway that requires sealing opens what
 * was sealed to it and delivers it intact; one it cannot open (sealed to another host, to a
 * key it does not keep, changed on the way) or that came unsealed is dead-lettered with a
 * reason that says which, and nothing of it reaches the recipient.
 */
describe('sealed envelopes', () => {
  const peer = fakePeer('seal-peer');
  const other = fakePeer('seal-other');
  const sender = { gid: randomUUID(), name: 'far-sender' };
  const hostId = uniqueHostId('sealed');
  const home = mkdtempSync(join(tmpdir(), 'bridge-sealed-'));
  const logLines: LogLine[] = [];
  let daemon: Daemon;
  let target: EntityActor;
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  let mine: { host: string; key: ReturnType<typeof sealingKeyOf> };

  const envelope = (overrides: Partial<Envelope> = {}): Envelope =>
    sendEnvelope({ ...sender, host: peer.host, kind: 'main' }, target.gid, overrides);

  /** Publishes `content` as the peer signs it (its bytes, whatever they hold). */
  const publish = (content: Buffer, msgId: string) =>
    publishConfirmed(channel, 'bridge.msg', target.gid, content, signedBy(content, peer), msgId);

  /** A sealed envelope's bytes with `change` made to its parsed JSON. */
  const rewritten = (bytes: Buffer, change: (json: { sealed: Sealed }) => void): Buffer => {
    const json = JSON.parse(bytes.toString('utf8')) as { sealed: Sealed };
    change(json);
    return Buffer.from(JSON.stringify(json));
  };

  const drained = async () => {
    const handover = await daemon.gateway.services.drains.drain(target);
    handover.confirm();
    return handover.envelopes;
  };

  beforeAll(async () => {
    addTrust(home, peer.host, peer.keys.publicKeyString);
    const { config } = loadConfig({
      env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: hostId, ...brokerEnv, BRIDGE_MCP_PORT: '0' },
    });
    expect(config.security.encryption).toBe('required');
    daemon = await startDaemon({
      config,
      logger: createLogger({
        level: 'info',
        host: hostId,
        destination: { write: (line: string) => void logLines.push(JSON.parse(line) as LogLine) },
      }),
    });
    mine = { host: hostId, key: sealingKeyOf(home) };
    const registration = await daemon.gateway.services.registrations.register({
      kind: 'main',
      name: 'target',
    });
    target = daemon.gateway.directory.authenticate(registration.token) as EntityActor;
    connection = await amqp.connect(brokerEnv.BRIDGE_BROKER_URI);
    channel = await connection.createConfirmChannel();
    await announcedTo(daemon.gateway, channel, peer, [sender]);
  });

  afterAll(async () => {
    await channel?.close().catch(() => {});
    await connection?.close().catch(() => {});
    const gid = target?.gid;
    await daemon?.stop();
    if (gid) await deleteQueues([inboxName(gid), controlSpec(hostId).name]);
    await removeDeadLettersOf([hostId]);
    for (const dir of [home, peer.home, other.home]) rmSync(dir, { recursive: true, force: true });
  });

  it('opens what was sealed to it, to it and others, and delivers the text intact', async () => {
    const text = `brief ${randomUUID()}: ünïcödé, "quotes", \\ and a newline\nsecond line`;
    const first = envelope({ text });
    // Sealed to this host and another: each opens its own entry.
    const otherKey = { host: other.host, key: sealingKeyString(newPrivateKey('x25519')) };
    await publish(sealedBytes(first, [otherKey, mine]), first.msgId);
    const got = await waitFor('the sealed message', async () => {
      const messages = await drained();
      return messages.length > 0 ? messages : undefined;
    });
    expect(got.map((m) => [m.msgId, m.text])).toEqual([[first.msgId, text]]);
  });

  it('dead-letters what it cannot open, or what came unsealed, with a reason that says which', async () => {
    const stranger = { host: other.host, key: sealingKeyString(newPrivateKey('x25519')) };
    const cases: Array<[string, Envelope, Buffer, string, RegExp]> = [];
    const add = (name: string, reason: string, detail: RegExp, bytes: (env: Envelope) => Buffer) => {
      const env = envelope({ text: `secret of ${name}` });
      cases.push([name, env, bytes(env), reason, detail]);
    };
    add('unsealed', 'unsealed', /unsealed.*security\.encryption: required/, (env) =>
      Buffer.from(JSON.stringify(env)),
    );
    add('replayed to another host', 'not-sealed-to-this-host', /sealed to .*, not to/, (env) =>
      sealedBytes(env, [stranger]),
    );
    add('sealed to a key this host does not keep', 'unknown-sealing-key', /does not keep/, (env) =>
      sealedBytes(env, [{ host: hostId, key: stranger.key }]),
    );
    add('another host’s entry renamed to this one', 'tampered', /does not check/, (env) =>
      rewritten(sealedBytes(env, [stranger, mine]), (json) => {
        const [theirs, ours] = json.sealed.recipients;
        if (!theirs || !ours) throw new Error('two recipients');
        json.sealed.recipients = [{ ...ours, epk: theirs.epk, key: theirs.key }];
      }),
    );
    add('one byte of the sealed text changed, then signed', 'tampered', /does not check/, (env) =>
      rewritten(sealedBytes(env, [mine]), (json) => {
        const ct = Buffer.from(json.sealed.ct, 'base64url');
        ct[0] = (ct[0] ?? 0) ^ 1;
        json.sealed.ct = ct.toString('base64url');
      }),
    );
    add('its declared size changed', 'tampered', /does not check/, (env) =>
      rewritten(sealedBytes(env, [mine]), (json) => {
        (json as unknown as { size: number }).size += 1;
      }),
    );
    for (const [, env, bytes] of cases) await publish(bytes, env.msgId);
    // Changed after it was signed: refused for its signature before anything is opened.
    const late = envelope({ text: 'changed after signing' });
    const signed = sealedBytes(late, [mine]);
    const changed = rewritten(signed, (json) => {
      json.sealed.iv = Buffer.alloc(12, 7).toString('base64url');
    });
    await publishConfirmed(channel, 'bridge.msg', target.gid, changed, signedBy(signed, peer), late.msgId);
    cases.push(['changed after signing', late, changed, 'bad-signature', /does not match/]);

    await waitFor('every refusal logged', () =>
      cases.every(([, env]) => logLines.some((l) => l.msgId === env.msgId)) ? true : undefined,
    );
    for (const [name, env, , reason, detail] of cases) {
      const line = logLines.find((l) => l.msgId === env.msgId);
      expect(line, name).toMatchObject({
        reason,
        msg: 'refused a message from the broker; dead-lettered with its reason',
      });
      expect(line?.detail, name).toMatch(detail);
    }
    await sleep(200);
    expect(await drained()).toEqual([]);
  });

  it('seals to no host when two announce the same gid, nor to a host whose release cannot open it', async () => {
    addTrust(home, other.host, other.keys.trustString);
    const old = fakePeer('seal-old');
    addTrust(home, old.host, old.keys.trustString);
    const oldMain = { gid: randomUUID(), name: 'old-main' };
    // Announced until taken: the trust store is re-read within half a second of the change.
    await waitFor('both in the roster', async () => {
      await announcePresence(channel, other, [sender]);
      await announcePresence(channel, old, [oldMain], old.host, 0, '1.5');
      const roster = daemon.gateway.services.status.roster();
      return roster.some((e) => e.host === other.host) && roster.some((e) => e.gid === oldMain.gid)
        ? true
        : undefined;
    });
    const send = (to: string) =>
      daemon.gateway.services.sends.send(target, { kind: 'SEND', to, text: 'secret' });
    // Refused before anything is sealed (the router's resolution, and the sealing's own check).
    await expect(send(sender.gid)).rejects.toMatchObject({ code: 'AMBIGUOUS_RECIPIENT' });
    await expect(send(oldMain.gid)).rejects.toMatchObject({
      code: 'BAD_CONFIG',
      message: expect.stringMatching(
        /cannot open sealed messages \(its PRESENCE is schema 1\.5\).*upgrade it/,
      ),
    });
    rmSync(old.home, { recursive: true, force: true });
  });
});
