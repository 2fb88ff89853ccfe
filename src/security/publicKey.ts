import { createPublicKey, type KeyObject } from 'node:crypto';
import { z } from 'zod';
import { BridgeError, ErrorCode } from '../errors.js';

/**
 * The compact text form of a gateway's public key, the one operators paste into
 * `agentbridge trust add`: `ed25519:` + base64url (no padding) of the 32 raw key bytes (RFC 8032).
 * Kept apart from the key files so the pure signature codec can use it without file I/O.
 */
export const publicKeyPrefix = 'ed25519:';

const rawKeyBytes = 32;
// 32 bytes are 43 base64url characters; the last one carries only 4 bits, so it is one of
// [AEIMQUYcgkosw048]. Anything else would decode to the same bytes under another spelling.
const publicKeyPattern = /^ed25519:[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$/;

export const publicKeySchema = z
  .string()
  .regex(
    publicKeyPattern,
    'a public key looks like ed25519:<43 base64url characters>, as `agentbridge keys show` prints it',
  );

export type PublicKeyString = z.output<typeof publicKeySchema>;

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
  const publicKey = key.type === 'private' ? createPublicKey(key) : key;
  if (publicKey.asymmetricKeyType !== 'ed25519') {
    throw new BridgeError(
      ErrorCode.badKey,
      `expected an ed25519 key, got ${publicKey.asymmetricKeyType ?? publicKey.type}`,
    );
  }
  const { x } = publicKey.export({ format: 'jwk' });
  if (typeof x !== 'string' || Buffer.from(x, 'base64url').length !== rawKeyBytes) {
    throw new BridgeError(ErrorCode.internal, 'ed25519 key export did not give 32 raw bytes');
  }
  return `${publicKeyPrefix}${x}`;
}

/** The 32 raw bytes of a validated public key string. */
export function publicKeyBytes(key: PublicKeyString): Buffer {
  return Buffer.from(key.slice(publicKeyPrefix.length), 'base64url');
}

/** A node:crypto KeyObject for a validated public key string (not cached; see signature.ts). */
export function publicKeyObject(key: PublicKeyString): KeyObject {
  return createPublicKey({
    key: { kty: 'OKP', crv: 'Ed25519', x: key.slice(publicKeyPrefix.length) },
    format: 'jwk',
  });
}
