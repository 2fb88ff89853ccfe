import { z } from 'zod';
import {
  describeIssues,
  type Envelope,
  envelopeSchema,
  isNewerMajor,
  type SpawnHeader,
  schemaVersionString,
  spawnHeaderSchema,
  versionParts,
} from './envelope.js';
import { type SealedPart, sealedAad, sealedEnvelopeSchema, sealedSchemaVersion } from './sealedEnvelope.js';
import { boundedDetail, oversized } from './wireSize.js';

/**
 * Envelope bytes on the wire: UTF-8 JSON. Pure: no sockets here (the broker actor owns those).
 * Decoding never throws; a message that cannot be trusted comes back as a typed refusal that
 * names the dead-letter reason (R-H3).
 */
export const DecodeFailure = {
  malformed: 'malformed',
  invalid: 'invalid',
  newerMajor: 'newer-major',
  oversized: 'oversized',
} as const;
export type DecodeFailure = (typeof DecodeFailure)[keyof typeof DecodeFailure];

export type Decoded =
  /**
   * `sealed`: its text is sealed (wire/sealedEnvelope.ts); `envelope.text` is empty until it is
   * opened, and nothing may use it before.
   */
  | { ok: true; envelope: Envelope; sealed?: SealedPart }
  | {
      ok: false;
      reason: DecodeFailure;
      detail: string;
      /** A SPAWN refused for its content: enough of it to answer its requester (U4). */
      refusedSpawn?: SpawnHeader;
    };

export function encodeEnvelope(envelope: Envelope): Buffer {
  return Buffer.from(JSON.stringify(envelope), 'utf8');
}

const versionOnly = z.object({ v: z.string().regex(/^\d+\.\d+$/) });

/** Decodes a received message body; `maxBytes` bounds what is parsed at all (`oversized`). */
export function decodeEnvelope(bytes: Buffer, maxBytes: number): Decoded {
  const tooLarge = oversized(bytes, maxBytes, 'limits.maxTextBytes and the envelope around it');
  if (tooLarge !== undefined) return { ok: false, reason: DecodeFailure.oversized, detail: tooLarge };
  let raw: unknown;
  try {
    raw = JSON.parse(bytes.toString('utf8'));
  } catch (err) {
    return {
      ok: false,
      reason: DecodeFailure.malformed,
      detail: boundedDetail(`not JSON: ${(err as Error).message}`),
    };
  }
  const version = versionOnly.safeParse(raw);
  if (!version.success) {
    return { ok: false, reason: DecodeFailure.invalid, detail: 'no schema version "v" (MAJOR.MINOR)' };
  }
  if (isNewerMajor(version.data.v)) {
    return {
      ok: false,
      reason: DecodeFailure.newerMajor,
      detail: `schema ${version.data.v} is newer than this gateway's ${schemaVersionString}: upgrade this gateway`,
    };
  }
  if (versionParts(version.data.v).major === sealedSchemaVersion.major) return decodeSealed(raw);
  // Within a major, unknown fields are dropped: a newer minor's additions are ignored.
  const parsed = envelopeSchema.safeParse(raw);
  if (!parsed.success) return invalid(raw, parsed.error);
  return { ok: true, envelope: parsed.data };
}

/** A sealed envelope (schema 2.x): its readable part checked, its sealed part left to open. */
function decodeSealed(raw: unknown): Decoded {
  const parsed = sealedEnvelopeSchema.safeParse(raw);
  if (!parsed.success) return invalid(raw, parsed.error);
  const { sealed, size, ...rest } = parsed.data;
  return {
    ok: true,
    envelope: { ...rest, text: '' },
    sealed: { sealed, size, aad: sealedAad({ ...rest, size }) },
  };
}

/** An envelope that does not parse: its issues, and enough of a SPAWN to answer its requester. */
function invalid(raw: unknown, error: z.ZodError): Decoded {
  const spawn = spawnHeaderSchema.safeParse(raw);
  return {
    ok: false,
    reason: DecodeFailure.invalid,
    detail: describeIssues(error),
    ...(spawn.success ? { refusedSpawn: spawn.data } : {}),
  };
}
