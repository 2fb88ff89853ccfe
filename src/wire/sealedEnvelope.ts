import { z } from 'zod';
import { byteLength } from './digest.js';
import { type Envelope, envelopeShape, requirePart, WireKind } from './envelope.js';
import { type Opened, OpenFailure, type Sealed, sealedSchema } from './sealed.js';

/**
 * A sealed envelope (issue 34): the envelope without its text, the text's size, and the text
 * sealed to the hosts that may read it (`wire/sealed.ts`). What stays readable is what the
 * broker routes on and what an operator needs to see a dead letter's cause: kind, ids, trace,
 * clock, addresses, expiry, the size. The signature covers all of it, sealed part included.
 *
 * Its schema major is 2: a gateway of the 1.x line refuses it as newer ("upgrade this gateway"),
 * never takes an envelope without its text for one with an empty text.
 */
export const sealedSchemaVersion = { major: 2, minor: 0 } as const;
export const sealedVersionString = `${sealedSchemaVersion.major}.${sealedSchemaVersion.minor}`;

/**
 * The kinds whose text is sealed: they carry what agents and people write. RECEIPT, STOP,
 * OWNER_ANSWER and PRESENCE carry no task text (stages, ids, a decision, names) and travel as
 * they are.
 */
export const sealedKinds: ReadonlySet<WireKind> = new Set<WireKind>([
  WireKind.send,
  WireKind.reply,
  WireKind.ask,
  WireKind.answer,
  WireKind.tooLate,
  WireKind.broadcast,
  WireKind.spawn,
  WireKind.spawnResult,
]);

/** The readable part of a sealed envelope: the envelope's fields but its text, and the text's size. */
export type SealedHeaders = Omit<Envelope, 'text'> & { size: number };

/** A sealed envelope as it is parsed: its readable part and its sealed part. */
export const sealedEnvelopeSchema = envelopeShape
  .omit({ text: true })
  .extend({ size: z.number().int().min(0), sealed: sealedSchema })
  .superRefine((envelope, ctx) => {
    if (!sealedKinds.has(envelope.kind))
      ctx.addIssue({ code: 'custom', path: ['kind'], message: `a ${envelope.kind} is never sealed` });
    requirePart(envelope, ctx);
  });

/** What a decoded sealed envelope leaves to open: the sealed part, and what it was sealed with. */
export interface SealedPart {
  sealed: Sealed;
  /** The additional data it was sealed with (`sealedAad` of its readable fields). */
  aad: Buffer;
  /** The text's size in bytes, as its sender declared it (the additional data binds it). */
  size: number;
}

/** The sealed content: the envelope's content fields, as JSON. */
const contentSchema = z.strictObject({ text: z.string() });

/**
 * The additional data the text is sealed with: the readable fields that say which message this
 * is, from whom, to whom, and how large, so a sealed part moved onto another message does not open.
 */
export function sealedAad(headers: SealedHeaders): Buffer {
  const { v, kind, msgId, traceId, hlc, from, to, size, inReplyTo, turnId, expiresAt } = headers;
  const named = [v, kind, msgId, traceId, hlc, from.gid, from.host, to, size, inReplyTo, turnId, expiresAt];
  return Buffer.from(JSON.stringify(named.map((field) => field ?? null)), 'utf8');
}

/** The readable part of `envelope` sealed, and the content that is sealed. */
export function splitForSealing(envelope: Envelope): { headers: SealedHeaders; content: Buffer } {
  const { text, ...rest } = envelope;
  const headers: SealedHeaders = { ...rest, v: sealedVersionString, size: byteLength(text) };
  return { headers, content: Buffer.from(JSON.stringify({ text }), 'utf8') };
}

/** A sealed envelope's bytes: its readable part and its sealed part. */
export function encodeSealed(headers: SealedHeaders, sealed: Sealed): Buffer {
  return Buffer.from(JSON.stringify({ ...headers, sealed }), 'utf8');
}

/** What a sealed part says once it was opened (`open`): its text, or why not, as a dead letter's reason. */
export function openedText(
  opened: Opened,
  size: number,
): { ok: true; text: string } | { ok: false; reason: OpenFailure; detail: string } {
  if (!opened.ok) return opened;
  const text = textOfContent(opened.content, size);
  return text.ok ? text : { ok: false, reason: OpenFailure.tampered, detail: text.detail };
}

/** The text of an opened content, or why it is not one (it was sealed, so its sender wrote it). */
function textOfContent(
  content: Buffer,
  size: number,
): { ok: true; text: string } | { ok: false; detail: string } {
  let raw: unknown;
  try {
    raw = JSON.parse(content.toString('utf8'));
  } catch {
    return { ok: false, detail: 'its sealed content is not JSON' };
  }
  const parsed = contentSchema.safeParse(raw);
  if (!parsed.success) return { ok: false, detail: 'its sealed content is not a text' };
  const actual = byteLength(parsed.data.text);
  if (actual !== size)
    return { ok: false, detail: `its text is ${actual} bytes, not the ${size} it declares` };
  return { ok: true, text: parsed.data.text };
}
