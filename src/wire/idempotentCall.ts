import { digestText } from './digest.js';

/**
 * What identifies a call made under an idempotency key (SPEC §9): its kind (the tool: SEND,
 * REPLY, ASK, BROADCAST, SPAWN, ANSWER), its recipient (a gid, a broadcast routing key, a host
 * for a SPAWN) and a digest of its content. The event log keeps the digest, never the text.
 */
export interface IdempotentCall {
  readonly kind: string;
  readonly recipient: string;
  readonly digest: string;
}

/** A key's record: the msgId of its first call and, unless written before calls were recorded, that call. */
export interface KeyRecord {
  readonly msgId: string;
  readonly call?: IdempotentCall | undefined;
}

/** The call of `kind` to `recipient` with `content` (the text and whatever else makes it this call). */
export function idempotentCall(
  kind: string,
  recipient: string,
  content: Readonly<Record<string, unknown>>,
): IdempotentCall {
  const canonical = Object.keys(content)
    .sort()
    .filter((name) => content[name] !== undefined)
    .map((name) => [name, content[name]]);
  return { kind, recipient, digest: digestText(JSON.stringify(canonical)) };
}

export type RepeatVerdict =
  /** No call used the key yet. */
  | { readonly kind: 'new' }
  /** The same call again (a retry): it gets the first call's msgId and sends nothing new. */
  | { readonly kind: 'repeat'; readonly msgId: string }
  /** Another call under a key already used: refused, the first call's msgId is untouched. */
  | {
      readonly kind: 'conflict';
      readonly msgId: string;
      readonly first: IdempotentCall;
      /** What differs: the tool, the recipient or the content. */
      readonly differs: 'kind' | 'recipient' | 'content';
    };

/**
 * Decides what a call under an idempotency key is, given the key's record. A record written
 * before calls were recorded (no `call`) cannot tell a retry from another call: it counts as a
 * retry, as it always did.
 */
export function judgeRepeat(record: KeyRecord | undefined, call: IdempotentCall): RepeatVerdict {
  if (record === undefined) return { kind: 'new' };
  const first = record.call;
  if (first === undefined) return { kind: 'repeat', msgId: record.msgId };
  const differs =
    first.kind !== call.kind
      ? 'kind'
      : first.recipient !== call.recipient
        ? 'recipient'
        : first.digest !== call.digest
          ? 'content'
          : undefined;
  if (differs === undefined) return { kind: 'repeat', msgId: record.msgId };
  return { kind: 'conflict', msgId: record.msgId, first, differs };
}
