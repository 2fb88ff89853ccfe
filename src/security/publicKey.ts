import { createHash, createPrivateKey, createPublicKey, type KeyObject, randomBytes } from 'node:crypto';
import { z } from 'zod';
import { BridgeError, ErrorCode } from '../errors.js';

/**
 * The compact text forms of a gateway's public keys, the ones operators paste into
 * `agentbridge trust add`: a prefix naming the type, then base64url (no padding) of the 32 raw
 * key bytes. `ed25519:` is its signing key (RFC 8032), `x25519:` its sealing key (RFC 7748,
 * issue 34). Kept apart from the key files so the pure signature codec can use them without
 * file I/O.
 */
type KeyType = 'ed25519' | 'x25519';

const rawKeyBytes = 32;

/** Each key type: its prefix, its name in errors, its JWK curve, and the DER a raw key is wrapped in (RFC 8410). */
const keyForms: Record<KeyType, { prefix: string; what: string; crv: string; pkcs8: Buffer; spki: Buffer }> =
  {
    ed25519: {
      prefix: 'ed25519:',
      what: 'a public key',
      crv: 'Ed25519',
      pkcs8: Buffer.from('302e020100300506032b657004220420', 'hex'),
      spki: Buffer.from('302a300506032b6570032100', 'hex'),
    },
    x25519: {
      prefix: 'x25519:',
      what: 'a sealing key',
      crv: 'X25519',
      pkcs8: Buffer.from('302e020100300506032b656e04220420', 'hex'),
      spki: Buffer.from('302a300506032b656e032100', 'hex'),
    },
  };

/**
 * The schema of a compact key of `type`. 32 bytes are 43 base64url characters; the last one
 * carries only 4 bits, so it is one of [AEIMQUYcgkosw048]: anything else would decode to the
 * same bytes under another spelling.
 */
function compactKeySchema(type: KeyType) {
  const { prefix, what } = keyForms[type];
  return z
    .string()
    .regex(
      new RegExp(`^${prefix}[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$`),
      `${what} looks like ${prefix}<43 base64url characters>, as \`agentbridge keys show\` prints it`,
    );
}

export const publicKeyPrefix = keyForms.ed25519.prefix;
export const publicKeySchema = compactKeySchema('ed25519');
export type PublicKeyString = z.output<typeof publicKeySchema>;

/** A gateway's sealing key (issue 34): X25519, what peers seal a message's content key to. */
export const sealingKeyPrefix = keyForms.x25519.prefix;
export const sealingKeySchema = compactKeySchema('x25519');
export type SealingKeyString = z.output<typeof sealingKeySchema>;

/** A key the trust store holds for a host: one it signs with, or one it is sealed to. */
export type TrustedKey = PublicKeyString | SealingKeyString;
export const trustedKeySchema = z.union([publicKeySchema, sealingKeySchema]);

export function isSealingKey(key: TrustedKey): key is SealingKeyString {
  return key.startsWith(sealingKeyPrefix);
}

/** Validates a public key string from an operator or the trust file; throws BAD_KEY naming the problem. */
export function parsePublicKey(text: string): PublicKeyString {
  const result = publicKeySchema.safeParse(text.trim());
  if (!result.success) {
    const shown = text.length > 80 ? `${text.slice(0, 80)}…` : text;
    throw new BridgeError(
      ErrorCode.badKey,
      `"${shown}" is not a public key: ${result.error.issues[0]?.message ?? 'invalid'}`,
    );
  }
  return result.data;
}

/** The compact string of an ed25519 public (or private) KeyObject. */
export function publicKeyString(key: KeyObject): PublicKeyString {
  return keyString(key, 'ed25519');
}

/** The compact string of an X25519 public (or private) KeyObject. */
export function sealingKeyString(key: KeyObject): SealingKeyString {
  return keyString(key, 'x25519');
}

/** The prefix and the base64url of the 32 raw bytes of `key`'s public half, which must be a `type` key. */
function keyString(key: KeyObject, type: KeyType): string {
  const publicKey = key.type === 'private' ? createPublicKey(key) : key;
  if (publicKey.asymmetricKeyType !== type) {
    throw new BridgeError(
      ErrorCode.badKey,
      `expected an ${type} key, got ${publicKey.asymmetricKeyType ?? publicKey.type}`,
    );
  }
  // From its SPKI DER: no JWK object is built (see newPrivateKey).
  const spki = publicKey.export({ format: 'der', type: 'spki' });
  const prefix = keyForms[type].spki;
  if (spki.length !== prefix.length + rawKeyBytes || !spki.subarray(0, prefix.length).equals(prefix)) {
    throw new BridgeError(ErrorCode.internal, `${type} key export did not give 32 raw bytes`);
  }
  return `${keyForms[type].prefix}${spki.subarray(prefix.length).toString('base64url')}`;
}

/**
 * A new private key of `type` from 32 random bytes (any 32 bytes are an Ed25519 seed or an
 * X25519 scalar). Not `generateKeyPairSync`: on Node 20 the job object it leaves behind can be
 * collected by a garbage collection that starts while a key of its pair is being exported, and
 * its destructor then waits on the lock the export holds, forever (seen in CI: a gateway's
 * main thread in `KeyGenJob::~KeyGenJob` under `ExportJWKEdKey`). A key made here has no job.
 */
export function newPrivateKey(type: KeyType): KeyObject {
  const der = Buffer.concat([keyForms[type].pkcs8, randomBytes(rawKeyBytes)]);
  return createPrivateKey({ key: der, format: 'der', type: 'pkcs8' });
}

/** The 32 raw bytes of a validated compact key. */
export function keyBytes(key: TrustedKey): Buffer {
  return Buffer.from(key.slice(key.indexOf(':') + 1), 'base64url');
}

/** A node:crypto KeyObject for a validated public key string (not cached; see signature.ts). */
export function publicKeyObject(key: PublicKeyString): KeyObject {
  return keyObject(key, 'ed25519');
}

/** A node:crypto KeyObject for a validated sealing key string. */
export function sealingKeyObject(key: SealingKeyString): KeyObject {
  return keyObject(key, 'x25519');
}

function keyObject(key: TrustedKey, type: KeyType): KeyObject {
  const { prefix, crv } = keyForms[type];
  return createPublicKey({ key: { kty: 'OKP', crv, x: key.slice(prefix.length) }, format: 'jwk' });
}

/**
 * A sealing key's id: 12 base64url characters of the SHA-256 of its raw bytes. A sealed message
 * names the key it was sealed to by it, so a host that keeps an old key (a rotation) opens it.
 */
export function sealingKeyId(key: SealingKeyString): string {
  return createHash('sha256').update(keyBytes(key)).digest().subarray(0, 9).toString('base64url');
}

/**
 * What an operator gives a peer's `agentbridge trust add`: the signing key and, since issue 34,
 * the sealing key, comma-separated (`ed25519:…,x25519:…`), one word for a shell.
 */
export function trustString(signing: PublicKeyString, sealing: SealingKeyString | undefined): string {
  return sealing === undefined ? signing : `${signing},${sealing}`;
}

/**
 * The keys in what an operator pasted: `ed25519:…,x25519:…` as `keys show` prints it, or one
 * key of either kind (the signing key alone, as before issue 34; a new sealing key). Throws
 * BAD_KEY naming the part that is not a key.
 */
export function parseTrustString(text: string): TrustedKey[] {
  const parts = text.trim().split(',');
  const keys = parts.map((part) => {
    const key = trustedKeySchema.safeParse(part.trim());
    if (key.success) return key.data;
    const shown = part.length > 80 ? `${part.slice(0, 80)}…` : part;
    throw new BridgeError(
      ErrorCode.badKey,
      `"${shown}" is not a public key: a peer's keys look like ed25519:<43 base64url characters>,x25519:<43 base64url characters>, as \`agentbridge keys show\` prints them on that host`,
    );
  });
  const signing = keys.filter((k) => !isSealingKey(k)).length;
  if (signing > 1 || keys.length - signing > 1) {
    throw new BridgeError(
      ErrorCode.badKey,
      'give one signing key and one sealing key at most (ed25519:…,x25519:…); add a second key of a host with another `trust add`',
    );
  }
  return keys;
}
