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
 *   host id and the key id), and the key it gives wraps the content key (AES-256-GCM, its own
 *   additional data the host id). An entry copied onto another host's name, or sealed to
 *   another host's key, does not open: the host and the key are in what derives the key.
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
/** A wrapping key is used once (a fresh ephemeral key each time): a fixed nonce is safe with it. */
const wrapNonce = Buffer.alloc(nonceBytes);

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

/** Seals `content` to each of `recipients`; `aad` is what the signature also covers of the headers. */
export function seal(content: Buffer, recipients: readonly SealRecipient[], aad: Buffer): Sealed {
  const contentKey = randomBytes(contentKeyBytes);
  const iv = randomBytes(nonceBytes);
  const entries = recipients.map((recipient): SealedRecipient => {
    const kid = sealingKeyId(recipient.key);
    const ephemeral = newPrivateKey('x25519');
    const their = sealingKeyObject(recipient.key);
    const shared = diffieHellman({ privateKey: ephemeral, publicKey: their });
    const epk = keyBytes(sealingKeyString(ephemeral));
    const wrap = wrappingKey(shared, epk, keyBytes(recipient.key), recipient.host, kid);
    const key = encrypt(wrap, wrapNonce, contentKey, Buffer.from(recipient.host, 'utf8'));
    return { host: recipient.host, kid, epk: epk.toString('base64url'), key: key.toString('base64url') };
  });
  return {
    alg: sealedAlgorithm,
    recipients: entries,
    iv: iv.toString('base64url'),
    ct: encrypt(contentKey, iv, content, aad).toString('base64url'),
  };
}

/** Opens what was sealed to `host`, with the sealing keys it keeps; says why when it does not. */
export function open(sealed: Sealed, host: string, keys: SealingKeys, aad: Buffer): Opened {
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
  const epk = Buffer.from(entry.epk, 'base64url');
  let shared: Buffer;
  try {
    const ephemeral = sealingKeyObject(`${sealingKeyPrefix}${entry.epk}`);
    shared = diffieHellman({ privateKey: mine.privateKey, publicKey: ephemeral });
  } catch {
    return tampered('its ephemeral key');
  }
  const wrap = wrappingKey(shared, epk, keyBytes(mine.publicKeyString), host, entry.kid);
  const contentKey = decrypt(wrap, wrapNonce, Buffer.from(entry.key, 'base64url'), Buffer.from(host, 'utf8'));
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
