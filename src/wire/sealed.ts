import { z } from 'zod';

/**
 * A sealed content part (issue 34): what a message's readable fields become on the wire. The
 * content is encrypted once with a fresh content key; that key is sealed to each recipient
 * host's sealing key (its own ephemeral X25519 key per host, as age and HPKE do), so only those
 * hosts open it. Everything here is opaque to the broker; what routes the message stays
 * outside it. `src/security/sealing.ts` makes and opens it.
 */
export const sealedAlgorithm = 'X25519-HKDF-SHA256-A256GCM';

const base64url = (bytes: number) =>
  z
    .string()
    .length(Math.ceil((bytes * 4) / 3))
    .regex(/^[A-Za-z0-9_-]+$/, 'base64url');

/** Most hosts one message is sealed to (a broadcast seals to every trusted host). */
export const maxSealedRecipients = 256;

export const sealedRecipientSchema = z.strictObject({
  /** The host this entry opens for. */
  host: z.string().min(1).max(63),
  /** The id of the sealing key it was sealed to (`sealingKeyId`): a host keeps old keys to open. */
  kid: z.string().regex(/^[A-Za-z0-9_-]{12}$/),
  /** The ephemeral X25519 public key (32 bytes). */
  epk: base64url(32),
  /** The content key sealed to this host: the 12-byte nonce, 32 bytes and the 16-byte tag. */
  key: base64url(60),
});
export type SealedRecipient = z.infer<typeof sealedRecipientSchema>;

export const sealedSchema = z.strictObject({
  alg: z.literal(sealedAlgorithm),
  recipients: z.array(sealedRecipientSchema).min(1).max(maxSealedRecipients),
  /** The content's nonce (12 bytes). */
  iv: base64url(12),
  /** The content, encrypted, then its 16-byte tag (base64url). */
  ct: z.string().regex(/^[A-Za-z0-9_-]*$/, 'base64url'),
});
export type Sealed = z.infer<typeof sealedSchema>;

/** Why a sealed part did not open: each is a dead letter's reason, with what to do. */
export const OpenFailure = {
  /** No entry for this host: sealed to others (a replay to the wrong host, or a misroute). */
  notSealedToThisHost: 'not-sealed-to-this-host',
  /** Sealed to a key of this host's that it does not keep (retired, or never its own). */
  unknownSealingKey: 'unknown-sealing-key',
  /** Its bytes were changed, or its headers, or it was sealed to another host's key. */
  tampered: 'tampered',
} as const;
export type OpenFailure = (typeof OpenFailure)[keyof typeof OpenFailure];

/** A sealed part opened (with the id of the key that opened it), or why it did not open. */
export type Opened =
  | { ok: true; content: Buffer; kid: string }
  | { ok: false; reason: OpenFailure; detail: string };
