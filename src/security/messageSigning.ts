import type { KeyObject } from 'node:crypto';
import { type SignatureCheck, SignatureHeader } from '../wire/signatureHeaders.js';
import type { PublicKeyString } from './publicKey.js';
import { sign, verify } from './signature.js';
import type { TrustStore } from './TrustStore.js';

export interface Signer {
  readonly host: string;
  readonly enabled: boolean;
  /** The headers to publish `content` with: the signature and the signing host. */
  headersFor(content: Buffer): Record<string, string>;
  /**
   * Which trusted host signed `content`, or why it cannot be trusted. Keys come only from the
   * trust store (and this gateway's own key), never from the wire.
   */
  verify(content: Buffer, headers: Record<string, unknown>): SignatureCheck;
}

export interface SignerOptions {
  host: string;
  privateKey: KeyObject;
  publicKey: PublicKeyString;
  trust: TrustStore;
}

/** Signs what this gateway publishes and verifies what it receives. */
export function createSigner(options: SignerOptions): Signer {
  const { host, privateKey, publicKey, trust } = options;
  return {
    host,
    enabled: true,
    headersFor: (content) => ({
      [SignatureHeader.signature]: sign(content, privateKey),
      [SignatureHeader.signer]: host,
    }),
    verify(content, headers) {
      const signature = headers[SignatureHeader.signature];
      const signer = headers[SignatureHeader.signer];
      if (typeof signature !== 'string' || typeof signer !== 'string') {
        return { ok: false, detail: 'unsigned: no x-bridge-sig / x-bridge-signer headers' };
      }
      const keys = signer === host ? [publicKey, ...trust.keysFor(signer)] : trust.keysFor(signer);
      if (keys.length === 0) {
        const why = trust.problem ? ` (the trust store is unusable: ${trust.problem.message})` : '';
        return {
          ok: false,
          detail: `signed by ${signer}, which is not in this gateway's trust store${why}: if it is yours, run \`agentbridge trust add ${signer} <its public key>\``,
        };
      }
      if (!verify(content, signature, keys)) {
        return {
          ok: false,
          detail: `the signature does not match ${signer}'s trusted key(s): forged, tampered or signed with another key`,
        };
      }
      return { ok: true, signer };
    },
  };
}

/** Signing turned off (security.signing = off): nothing signed, nothing checked. */
export function createNoSigner(host: string): Signer {
  return {
    host,
    enabled: false,
    headersFor: () => ({}),
    verify: (_content, headers) => {
      const signer = headers[SignatureHeader.signer];
      return { ok: true, signer: typeof signer === 'string' ? signer : '' };
    },
  };
}
