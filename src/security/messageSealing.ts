import type { Envelope } from '../wire/envelope.js';
import { type Opened, OpenFailure, type Sealed } from '../wire/sealed.js';
import { encodeSealed, sealedAad, sealedKinds, splitForSealing } from '../wire/sealedEnvelope.js';
import type { SealingKeys } from './keys.js';
import type { SealingKeyString } from './publicKey.js';
import { open, SealingSessions, type SealRecipient, seal } from './sealing.js';
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
  /** The sealing key peers are to seal to now: this gateway's PRESENCE announces it. */
  currentKey(): SealingKeyString | undefined;
  /**
   * `host` announced `key` in a PRESENCE whose signature checked with its trusted signing key:
   * sealed to from now on (a rotation reaches peers without a `trust add` on each).
   */
  learn(host: string, key: SealingKeyString): void;
}

export interface SealerOptions {
  host: string;
  /** This gateway's sealing keys as they are now (a `SealingKeyring` follows rotations). */
  keys: { readonly current: SealingKeys };
  trust: TrustStore;
  required: boolean;
}

export function createSealer(options: SealerOptions): Sealer {
  const { host, keys, trust, required } = options;
  /**
   * The key each peer announced last (in a PRESENCE its trusted key signed), used while the
   * trust store is as it was then: a `trust remove`, or a key given by hand after, wins over it
   * until the peer's next PRESENCE.
   */
  const announced = new Map<string, { key: SealingKeyString; generation: number }>();
  const learnedKey = (peer: string): SealingKeyString | undefined => {
    const learned = announced.get(peer);
    return learned?.generation === trust.generation ? learned.key : undefined;
  };
  const sessions = new SealingSessions();
  const keyOf = (peer: string): SealRecipient | undefined => {
    if (peer === host) return { host, key: keys.current.current.publicKeyString };
    const key = learnedKey(peer) ?? trust.sealingKeysFor(peer).at(-1);
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
      const peers = [...new Set([...trust.hostsWithSealingKeys(), ...announced.keys()])].filter(
        (peer) => peer !== host && trust.keysFor(peer).length > 0,
      );
      return [host, ...peers].map((peer) => keyOf(peer)).filter((r): r is SealRecipient => r !== undefined);
    },
    sealEnvelope(envelope, recipients) {
      const { headers, content } = splitForSealing(envelope);
      return encodeSealed(headers, seal(content, recipients, sealedAad(headers), sessions));
    },
    open: (sealed, aad) => open(sealed, host, keys.current, aad, sessions),
    currentKey: () => keys.current.current.publicKeyString,
    learn(peer, key) {
      if (peer !== host) announced.set(peer, { key, generation: trust.generation });
    },
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
    currentKey: () => undefined,
    learn: () => undefined,
    open: () => ({
      ok: false,
      reason: OpenFailure.unknownSealingKey,
      detail: 'this gateway has no sealing keys (security.signing is off): it opens nothing sealed',
    }),
  };
}
