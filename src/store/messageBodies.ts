import { z } from 'zod';
import { describeIssues, type Envelope, envelopeSchema } from '../wire/envelope.js';
import type { Store } from './openStore.js';

/** The bytes a message crossed the broker in, and its signature headers (see `InboundHandle`). */
export interface WireCopy {
  content: Buffer;
  headers: Record<string, string>;
}

/**
 * Keeps an undelivered message's envelope (with its body), in the current batch; one that came
 * from the broker keeps the bytes it came in besides (`wire`), for its dead letter.
 */
export function putMessage(store: Store, recipient: string, envelope: Envelope, wire?: WireCopy): void {
  const json = JSON.stringify(envelope);
  store.batch.write(
    'INSERT OR IGNORE INTO messages (msg_id, recipient, envelope, wire, wire_headers) VALUES (?, ?, ?, ?, ?)',
    [envelope.msgId, recipient, json, wire?.content ?? null, wire ? JSON.stringify(wire.headers) : null],
    bodyKey(envelope.msgId, recipient),
  );
}

const wireHeadersSchema = z.record(z.string(), z.string());

/** The bytes a kept message came in, if it came from the broker and they were kept. */
export function readWire(store: Store, msgId: string, recipient: string): WireCopy | undefined {
  const row = store
    .prepare<[string, string], { wire: Buffer | null; wire_headers: string | null }>(
      'SELECT wire, wire_headers FROM messages WHERE msg_id = ? AND recipient = ?',
    )
    .get(msgId, recipient);
  if (!row?.wire || row.wire_headers === null) return undefined;
  let headers: unknown;
  try {
    headers = JSON.parse(row.wire_headers);
  } catch {
    return undefined;
  }
  const parsed = wireHeadersSchema.safeParse(headers);
  return parsed.success ? { content: row.wire, headers: parsed.data } : undefined;
}

/**
 * A kept message body as read back: its envelope, or why there is none to use. A row that no
 * longer parses (written by an older gateway, or edited by hand) is a value, never a throw:
 * its reader dead-letters (or refuses) the message with `detail` as the reason.
 */
export type StoredMessage =
  | { ok: true; envelope: Envelope }
  | { ok: false; missing: boolean; detail: string };

export function readMessage(store: Store, msgId: string, recipient: string): StoredMessage {
  const row = store
    .prepare<[string, string], { envelope: string }>(
      'SELECT envelope FROM messages WHERE msg_id = ? AND recipient = ?',
    )
    .get(msgId, recipient);
  if (row === undefined) return { ok: false, missing: true, detail: 'message body missing from the store' };
  let raw: unknown;
  try {
    raw = JSON.parse(row.envelope);
  } catch (err) {
    return { ok: false, missing: false, detail: `stored envelope is not JSON: ${(err as Error).message}` };
  }
  const parsed = envelopeSchema.safeParse(raw);
  if (!parsed.success) {
    return {
      ok: false,
      missing: false,
      detail: `stored envelope does not parse (an older or damaged gateway wrote it): ${describeIssues(parsed.error)}`,
    };
  }
  return { ok: true, envelope: parsed.data };
}

/** The kept envelope, or undefined when there is none to use (callers that need no reason). */
export function storedEnvelope(message: StoredMessage): Envelope | undefined {
  return message.ok ? message.envelope : undefined;
}

/**
 * Drops a delivered message's body, in the current batch: the log keeps digest and size only.
 * A body put in the same batch is never written: the delete takes its insert's place.
 */
export function purgeMessage(store: Store, msgId: string, recipient: string): void {
  store.batch.write(
    'DELETE FROM messages WHERE msg_id = ? AND recipient = ?',
    [msgId, recipient],
    bodyKey(msgId, recipient),
  );
}

/** The batch key of a body's row: its put and its purge in one batch are one write. */
const bodyKey = (msgId: string, recipient: string) => `body\0${msgId}\0${recipient}`;
