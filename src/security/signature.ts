import { sign as cryptoSign, verify as cryptoVerify, type KeyObject } from 'node:crypto';
import { publicKeyObject, publicKeySchema } from './publicKey.js';

/**
 * Ed25519 over exact bytes, with node:crypto's native implementation (the hot path: every
 * cross-host message and PRESENCE is signed once and verified once). Pure functions: no files,
 * no clock. Signatures travel as base64url text (an AMQP header value).
 */

/** 64 signature bytes are exactly 86 base64url characters; the last carries 2 bits. */
const signaturePattern = /^[A-Za-z0-9_-]{85}[AQgw]$/;

// Parsing a key into a KeyObject costs more than a verify; the trust store holds few keys, so
// cache them. Public keys never come from the wire, but cap the cache anyway so a misuse with
// unbounded distinct keys cannot grow memory without limit.
const maxCachedKeys = 1024;
const keyCache = new Map<string, KeyObject | null>();

function cachedKey(text: string): KeyObject | null {
  const hit = keyCache.get(text);
  if (hit !== undefined) return hit;
  let key: KeyObject | null = null;
  const parsed = publicKeySchema.safeParse(text);
  if (parsed.success) {
    try {
      key = publicKeyObject(parsed.data);
    } catch {
      key = null;
    }
  }
  if (keyCache.size >= maxCachedKeys) keyCache.clear();
  keyCache.set(text, key);
  return key;
}

/** Signs `bytes` with an ed25519 private key; returns the 64-byte signature as base64url. */
export function sign(bytes: Uint8Array, privateKey: KeyObject): string {
  return cryptoSign(null, bytes, privateKey).toString('base64url');
}

/**
 * True when `signature` (base64url) is a valid ed25519 signature of `bytes` by any of
 * `publicKeys` (compact `ed25519:` strings; several during a key rotation). Never throws:
 * a malformed signature or key is simply not a match.
 */
export function verify(bytes: Uint8Array, signature: string, publicKeys: readonly string[]): boolean {
  if (typeof signature !== 'string' || !signaturePattern.test(signature)) return false;
  const signatureBytes = Buffer.from(signature, 'base64url');
  for (const text of publicKeys) {
    const key = cachedKey(text);
    if (key === null) continue;
    try {
      if (cryptoVerify(null, bytes, key, signatureBytes)) return true;
    } catch {
      // An unusable key or input is a failed verification, never a crash of the receive path.
    }
  }
  return false;
}
