import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ConfirmChannel } from 'amqplib';
import { rosterKey } from '../../src/federation/topology.js';
import type { Gateway } from '../../src/gateway/Gateway.js';
import { type GatewayKeys, initKeys, loadSealingKeys } from '../../src/security/keys.js';
import type { SealingKeyString } from '../../src/security/publicKey.js';
import { open, seal } from '../../src/security/sealing.js';
import { sign } from '../../src/security/signature.js';
import { decodeEnvelope } from '../../src/wire/codec.js';
import { type Envelope, schemaVersionString } from '../../src/wire/envelope.js';
import { encodeHlc } from '../../src/wire/hlc.js';
import {
  encodeSealed,
  openedText,
  sealedAad,
  sealedKinds,
  splitForSealing,
} from '../../src/wire/sealedEnvelope.js';
import { SignatureHeader } from '../../src/wire/signatureHeaders.js';
import { uniqueHostId } from './broker.js';
import { testDeployment } from './federation.js';
import { waitFor } from './waitFor.js';

/** A gateway's pino line, as the tests read them back. */
export interface LogLine {
  level: number;
  msg: string;
  reason?: string;
  detail?: string;
  msgId?: string;
  routingKey?: string;
}

/** A host that signs what it publishes, as a peer gateway would, without running one. */
export interface FakePeer {
  host: string;
  keys: GatewayKeys;
  home: string;
  /** Its raw 32-byte public key (for an independent verifier such as @noble/ed25519). */
  raw: Uint8Array;
}

export function fakePeer(prefix: string): FakePeer {
  const home = mkdtempSync(join(tmpdir(), 'bridge-peer-'));
  const keys = initKeys(home);
  const raw = Buffer.from(keys.publicKey.export({ format: 'jwk' }).x as string, 'base64url');
  return { host: uniqueHostId(prefix), keys, home, raw };
}

/** The AMQP headers a gateway signing as `by` puts on `content`. */
export function signedBy(content: Buffer, by: FakePeer): Record<string, string> {
  return {
    [SignatureHeader.signature]: sign(content, by.keys.privateKey),
    [SignatureHeader.signer]: by.host,
  };
}

/** Publishes raw bytes on a confirm channel, as a peer would, and waits for the broker's confirm. */
export function publishConfirmed(
  channel: ConfirmChannel,
  exchange: string,
  key: string,
  content: Buffer,
  headers: Record<string, string>,
  messageId: string,
): Promise<void> {
  return new Promise((resolve, reject) => {
    channel.publish(exchange, key, content, { messageId, persistent: true, headers }, (err) =>
      err ? reject(err) : resolve(),
    );
  });
}

let presenceCounter = 0;
/** Every PRESENCE a fake peer sends is newer than its last (a gateway ignores one that is not). */
function nextPresenceStamp(clockOffsetMs = 0): string {
  presenceCounter += 1;
  return encodeHlc({ wall: Date.now() + clockOffsetMs, counter: presenceCounter });
}

/**
 * Publishes `by`'s signed PRESENCE announcing `entities` (mains, idle) of `host` on that host's
 * roster key, as a peer gateway would. `host` is `by`'s own unless a test forges one;
 * `clockOffsetMs` stamps it as a host whose clock is that far ahead (negative: behind).
 */
export function announcePresence(
  channel: ConfirmChannel,
  by: FakePeer,
  entities: ReadonlyArray<{ gid: string; name: string }>,
  host: string = by.host,
  clockOffsetMs = 0,
  version: string = schemaVersionString,
): Promise<void> {
  const presence = {
    v: version,
    kind: 'PRESENCE',
    host,
    hlc: nextPresenceStamp(clockOffsetMs),
    ttlMs: 600_000,
    entities: entities.map((entity) => ({ ...entity, kind: 'main', groups: [], status: 'active.idle' })),
  };
  const content = Buffer.from(JSON.stringify(presence));
  return publishConfirmed(
    channel,
    'bridge.roster',
    rosterKey(testDeployment, host),
    content,
    signedBy(content, by),
    `presence/${randomUUID()}`,
  );
}

/** `by` announces `entities` (`announcePresence`), and `gateway`'s roster has taken them in. */
export async function announcedTo(
  gateway: Gateway,
  channel: ConfirmChannel,
  by: FakePeer,
  entities: ReadonlyArray<{ gid: string; name: string }>,
): Promise<void> {
  await announcePresence(channel, by, entities);
  await waitFor(`${by.host}'s entities in the roster`, () => {
    const roster = gateway.services.status.roster();
    return entities.every((entity) => roster.some((e) => e.gid === entity.gid)) ? true : undefined;
  });
}

/**
 * Gives an entity of a fake peer what its gateway would: an inbox of its own (bound by its
 * gid; `received` collects what arrives) and a signed PRESENCE naming it, so that a gateway
 * can route answers to it.
 */
export async function listenAsPeerEntity(
  channel: ConfirmChannel,
  peer: FakePeer,
  entity: { gid: string; name: string },
  queue: string,
  received: Envelope[],
): Promise<void> {
  await channel.assertQueue(queue, { exclusive: true, autoDelete: true });
  await channel.bindQueue(queue, 'bridge.msg', entity.gid);
  await channel.consume(queue, (message) => {
    if (!message) return;
    received.push(openedAsPeer(peer, message.content));
    channel.ack(message);
  });
  await announcePresence(channel, peer, [entity]);
}

/** A gateway's current sealing key, read from its home (what its `keys show` gives peers). */
export function sealingKeyOf(home: string): SealingKeyString {
  const keys = loadSealingKeys(home);
  if (!keys) throw new Error(`${home} has no sealing key`);
  return keys.current.publicKeyString;
}

/**
 * `envelope`'s bytes as a peer gateway publishes them with security.encryption required: its
 * text sealed to each host of `to` (a host id and the sealing key it gave); a kind that carries
 * no text (STOP, RECEIPT, …) as it is.
 */
export function sealedBytes(
  envelope: Envelope,
  to: ReadonlyArray<{ host: string; key: SealingKeyString }>,
): Buffer {
  if (!sealedKinds.has(envelope.kind)) return Buffer.from(JSON.stringify(envelope));
  const { headers, content } = splitForSealing(envelope);
  return encodeSealed(headers, seal(content, to, sealedAad(headers)));
}

/** A message as `peer` reads it: parsed, its text opened when it was sealed to the peer. */
export function openedAsPeer(peer: FakePeer, content: Buffer): Envelope {
  const decoded = decodeEnvelope(content, content.length);
  if (!decoded.ok) return JSON.parse(content.toString()) as Envelope;
  if (!decoded.sealed) return decoded.envelope;
  const keys = loadSealingKeys(peer.home);
  if (!keys) throw new Error(`${peer.host} has no sealing key`);
  const text = openedText(
    open(decoded.sealed.sealed, peer.host, keys, decoded.sealed.aad),
    decoded.sealed.size,
  );
  if (!text.ok) throw new Error(`${peer.host} cannot open what it got: ${text.detail}`);
  return { ...decoded.envelope, text: text.text };
}
