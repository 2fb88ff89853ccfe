import type { Envelope } from '../wire/envelope.js';
import { type Opened, OpenFailure, type Sealed } from '../wire/sealed.js';
import { encodeSealed, sealedAad, sealedKinds, splitForSealing } from '../wire/sealedEnvelope.js';
import type { SealingKeys } from './keys.js';
import { open, type SealRecipient, seal } from './sealing.js';
import type { TrustStore } from './TrustStore.js';

/**
 * What this gateway seals its messages' text to, and opens what was sealed to it with
 * (issue 34): its own sealing keys, and its peers' from the trust store, never from the wire.
 */
export interface Sealer {
  /**
   * security.encryption `required`: every message of a sealed kind is sealed before it is
   * published, and one that arrives unsealed is refused.
   */
  readonly required: boolean;
  /** Whether this envelope's text is sealed when it is published. */
  seals(envelope: Envelope): boolean;
  /**
   * The key to seal to for each of `hosts` (a peer's newest trusted sealing key, this gateway's
   * current one), and the hosts it has none for.
   */
  recipients(hosts: readonly string[]): { recipients: SealRecipient[]; missing: string[] };
  /** Every host a broadcast is sealed to: each trusted host with a sealing key, and this one. */
  everyone(): SealRecipient[];
  /** `envelope` as it crosses the broker, its text sealed to `recipients`. */
  sealEnvelope(envelope: Envelope, recipients: readonly SealRecipient[]): Buffer;
  /** Opens a sealed part with the keys this gateway keeps, or says why it does not. */
  open(sealed: Sealed, aad: Buffer): Opened;
}

export interface SealerOptions {
  host: string;
  keys: SealingKeys;
  trust: TrustStore;
  required: boolean;
}

export function createSealer(options: SealerOptions): Sealer {
  const { host, keys, trust, required } = options;
  const keyOf = (peer: string): SealRecipient | undefined => {
    if (peer === host) return { host, key: keys.current.publicKeyString };
    const key = trust.sealingKeysFor(peer).at(-1);
    return key === undefined ? undefined : { host: peer, key };
  };
  return {
    required,
    seals: (envelope) => required && sealedKinds.has(envelope.kind),
    recipients(hosts) {
      const recipients: SealRecipient[] = [];
      const missing: string[] = [];
      for (const peer of new Set(hosts)) {
        const recipient = keyOf(peer);
        if (recipient) recipients.push(recipient);
        else missing.push(peer);
      }
      return { recipients, missing };
    },
    everyone() {
      const peers = trust.hostsWithSealingKeys().filter((peer) => peer !== host);
      return [host, ...peers].map((peer) => keyOf(peer)).filter((r): r is SealRecipient => r !== undefined);
    },
    sealEnvelope(envelope, recipients) {
      const { headers, content } = splitForSealing(envelope);
      return encodeSealed(headers, seal(content, recipients, sealedAad(headers)));
    },
    open: (sealed, aad) => open(sealed, host, keys, aad),
  };
}

/** Sealing turned off with signing (security.signing = off): nothing sealed, nothing opens. */
export function createNoSealer(): Sealer {
  return {
    required: false,
    seals: () => false,
    recipients: (hosts) => ({ recipients: [], missing: [...hosts] }),
    everyone: () => [],
    sealEnvelope: () => {
      throw new Error('this gateway has no sealing keys (security.signing is off)');
    },
    open: () => ({
      ok: false,
      reason: OpenFailure.unknownSealingKey,
      detail: 'this gateway has no sealing keys (security.signing is off): it opens nothing sealed',
    }),
  };
}
