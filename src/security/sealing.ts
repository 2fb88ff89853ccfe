import { createCipheriv, createDecipheriv, diffieHellman, hkdfSync, randomBytes } from 'node:crypto';
import {
  type Opened,
  OpenFailure,
  type Sealed,
  type SealedRecipient,
  sealedAlgorithm,
} from '../wire/sealed.js';
import type { SealingKeys } from './keys.js';
import {
  keyBytes,
  newPrivateKey,
  type SealingKeyString,
  sealingKeyId,
  sealingKeyObject,
  sealingKeyPrefix,
  sealingKeyString,
} from './publicKey.js';

/**
 * Sealing a message's content to the hosts that may read it (issue 34), from node:crypto only:
 *
 * - the content is encrypted once with AES-256-GCM under a fresh 32-byte content key and a
 *   random nonce, its additional data the readable headers the caller names (so a header moved
 *   to another message, or changed, does not open);
 * - for each recipient host, an ephemeral X25519 key agreement with the host's sealing key; the
 *   shared secret goes through HKDF-SHA256 (salt: both public keys; info: the algorithm, the
 *   host id and the key id), and the key it gives wraps the content key (AES-256-GCM under a
 *   random nonce, its own additional data the host id). An entry copied onto another host's
 *   name, or sealed to another host's key, does not open: the host and the key are in what
 *   derives the key.
 *
 * A gateway keeps its ephemeral key per recipient key for a while (`SealingSessions`: at most
 * `sessionMaxUses` messages and `sessionMaxAgeMs`), and the recipient the wrapping key it derived
 * for it: a key agreement and a key made per message cost more than the rest of a message's CPU
 * (node:crypto makes a private key from DER in ~0.3 ms here). Each message still has its own
 * content key and nonces; what a session shares is the wrapping key, so a sender's memory read
 * within a session opens that session's messages, as it could read them before they were sealed.
 *
 * This is HPKE's base mode (RFC 9180) in the shape age and JWE use for many recipients, not a
 * new primitive: X25519 (RFC 7748), HKDF (RFC 5869), AES-GCM (NIST SP 800-38D).
 */

/** One host a message is sealed to: its id, and the sealing key it gave (its trust store entry). */
export interface SealRecipient {
  host: string;
  key: SealingKeyString;
}

const contentKeyBytes = 32;
const nonceBytes = 12;
const tagBytes = 16;

/** Most messages, and longest time, one ephemeral key seals to one recipient key. */
export const sessionMaxUses = 10_000;
export const sessionMaxAgeMs = 60_000;
/** Most wrapping keys a recipient keeps derived (one per sender session). */
const openedSessionsKept = 1_024;

interface SealingSession {
  epk: string;
  kid: string;
  wrap: Buffer;
  uses: number;
  until: number;
}

/**
 * What a gateway keeps between messages: per recipient key the ephemeral key agreement it seals
 * with (renewed after `sessionMaxUses` messages or `sessionMaxAgeMs`), and per sender session
 * the wrapping key it derived to open (the newest `openedSessionsKept`).
 */
export class SealingSessions {
  private readonly sealing = new Map<string, SealingSession>();
  private readonly opening = new Map<string, Buffer>();

  constructor(private readonly now: () => number = Date.now) {}

  /** The session to seal to `recipient` with: its ephemeral public key, key id and wrapping key. */
  sessionFor(recipient: SealRecipient): SealingSession {
    const id = `${recipient.host}\u0000${recipient.key}`;
    const now = this.now();
    const kept = this.sealing.get(id);
    if (kept && kept.uses < sessionMaxUses && now < kept.until) {
      kept.uses++;
      return kept;
    }
    const session = { ...newSession(recipient), uses: 1, until: now + sessionMaxAgeMs };
    this.sealing.set(id, session);
    return session;
  }

  /** The wrapping key of a sender's session, derived once (`derive`), or undefined if it does not derive. */
  openingKey(kid: string, epk: string, derive: () => Buffer | undefined): Buffer | undefined {
    const id = `${kid}.${epk}`;
    const kept = this.opening.get(id);
    if (kept) return kept;
    const wrap = derive();
    if (!wrap) return undefined;
    if (this.opening.size >= openedSessionsKept) {
      const oldest = this.opening.keys().next().value;
      if (oldest !== undefined) this.opening.delete(oldest);
    }
    this.opening.set(id, wrap);
    return wrap;
  }
}

/** A fresh ephemeral key agreement with `recipient`'s key, and the wrapping key it gives. */
function newSession(recipient: SealRecipient): { epk: string; kid: string; wrap: Buffer } {
  const kid = sealingKeyId(recipient.key);
  const ephemeral = newPrivateKey('x25519');
  const shared = diffieHellman({ privateKey: ephemeral, publicKey: sealingKeyObject(recipient.key) });
  const epk = keyBytes(sealingKeyString(ephemeral));
  const wrap = wrappingKey(shared, epk, keyBytes(recipient.key), recipient.host, kid);
  return { epk: epk.toString('base64url'), kid, wrap };
}

function wrappingKey(shared: Buffer, epk: Buffer, recipient: Buffer, host: string, kid: string): Buffer {
  const info = Buffer.from(`${sealedAlgorithm}\u0000${host}\u0000${kid}`, 'utf8');
  return Buffer.from(hkdfSync('sha256', shared, Buffer.concat([epk, recipient]), info, contentKeyBytes));
}

function encrypt(key: Buffer, iv: Buffer, plain: Buffer, aad: Buffer): Buffer {
  const cipher = createCipheriv('aes-256-gcm', key, iv, { authTagLength: tagBytes });
  cipher.setAAD(aad);
  return Buffer.concat([cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
}

/** Undefined when the tag does not check (changed bytes, another key, other additional data). */
function decrypt(key: Buffer, iv: Buffer, sealed: Buffer, aad: Buffer): Buffer | undefined {
  if (sealed.length < tagBytes) return undefined;
  const decipher = createDecipheriv('aes-256-gcm', key, iv, { authTagLength: tagBytes });
  decipher.setAAD(aad);
  decipher.setAuthTag(sealed.subarray(sealed.length - tagBytes));
  try {
    return Buffer.concat([decipher.update(sealed.subarray(0, sealed.length - tagBytes)), decipher.final()]);
  } catch {
    return undefined;
  }
}

/** Bytes of the system's generator drawn at once for `pooledRandom`. */
const randomPoolBytes = 4096;
let randomPool = Buffer.alloc(0);
let randomPoolAt = 0;

/**
 * `n` random bytes, handed out once each from a pool the system's generator fills 4 KiB at a
 * time: a sealed message takes a content key and a nonce per part (56 bytes to one recipient),
 * and a call to the generator costs ~3 µs however few bytes it gives (\`randomUUID\` keeps a
 * pool the same way). A refill is a new buffer: bytes handed out are never written again.
 */
function pooledRandom(n: number): Buffer {
  if (randomPoolAt + n > randomPool.length) {
    randomPool = randomBytes(Math.max(randomPoolBytes, n));
    randomPoolAt = 0;
  }
  const bytes = randomPool.subarray(randomPoolAt, randomPoolAt + n);
  randomPoolAt += n;
  return bytes;
}

/**
 * Seals `content` to each of `recipients`; `aad` is what the signature also covers of the
 * headers. With `sessions`, a recipient key's ephemeral key agreement is kept between messages
 * (see `SealingSessions`); without, each seal makes its own.
 */
export function seal(
  content: Buffer,
  recipients: readonly SealRecipient[],
  aad: Buffer,
  sessions?: SealingSessions,
): Sealed {
  const contentKey = pooledRandom(contentKeyBytes);
  const iv = pooledRandom(nonceBytes);
  const entries = recipients.map((recipient): SealedRecipient => {
    const { epk, kid, wrap } = sessions?.sessionFor(recipient) ?? newSession(recipient);
    const wrapNonce = pooledRandom(nonceBytes);
    const wrapped = encrypt(wrap, wrapNonce, contentKey, Buffer.from(recipient.host, 'utf8'));
    const key = Buffer.concat([wrapNonce, wrapped]);
    return { host: recipient.host, kid, epk, key: key.toString('base64url') };
  });
  return {
    alg: sealedAlgorithm,
    recipients: entries,
    iv: iv.toString('base64url'),
    ct: encrypt(contentKey, iv, content, aad).toString('base64url'),
  };
}

/**
 * Opens what was sealed to `host`, with the sealing keys it keeps; says why when it does not.
 * With `sessions`, the wrapping key of a sender's session is derived once.
 */
export function open(
  sealed: Sealed,
  host: string,
  keys: SealingKeys,
  aad: Buffer,
  sessions?: SealingSessions,
): Opened {
  const entry = sealed.recipients.find((recipient) => recipient.host === host);
  if (!entry) {
    const to = sealed.recipients.map((recipient) => recipient.host).join(', ');
    return {
      ok: false,
      reason: OpenFailure.notSealedToThisHost,
      detail: `sealed to ${to}, not to ${host}`,
    };
  }
  const mine = keys.byId.get(entry.kid);
  if (!mine) {
    return {
      ok: false,
      reason: OpenFailure.unknownSealingKey,
      detail:
        `sealed to key ${entry.kid} of ${host}, which this gateway does not keep (it keeps ${[...keys.byId.keys()].join(', ')}): ` +
        'the sender has a key this host retired or never had; give it the current one (agentbridge keys show, trust add on the sender)',
    };
  }
  const tampered = (what: string): Opened => ({
    ok: false,
    reason: OpenFailure.tampered,
    detail: `${what} does not check: changed on the way, or sealed to another host's key`,
  });
  const derive = (): Buffer | undefined => {
    try {
      const ephemeral = sealingKeyObject(`${sealingKeyPrefix}${entry.epk}`);
      const shared = diffieHellman({ privateKey: mine.privateKey, publicKey: ephemeral });
      const epk = Buffer.from(entry.epk, 'base64url');
      return wrappingKey(shared, epk, keyBytes(mine.publicKeyString), host, entry.kid);
    } catch {
      return undefined;
    }
  };
  const wrap = sessions ? sessions.openingKey(entry.kid, entry.epk, derive) : derive();
  if (!wrap) return tampered('its ephemeral key');
  const key = Buffer.from(entry.key, 'base64url');
  const contentKey = decrypt(
    wrap,
    key.subarray(0, nonceBytes),
    key.subarray(nonceBytes),
    Buffer.from(host, 'utf8'),
  );
  if (!contentKey) return tampered('its sealed key');
  const content = decrypt(
    contentKey,
    Buffer.from(sealed.iv, 'base64url'),
    Buffer.from(sealed.ct, 'base64url'),
    aad,
  );
  if (!content) return tampered('its content');
  return { ok: true, content, kid: entry.kid };
}
