import type { Directory } from '../deliver/Directory.js';
import type { EntityActor } from '../deliver/EntityActor.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { Federation } from '../federation/Federation.js';
import { readKeyRecord, recordIdempotencyKey } from '../store/idempotency.js';
import type { Store } from '../store/openStore.js';
import { WireKind } from '../wire/envelope.js';
import { type IdempotentCall, idempotentCall, judgeRepeat, type KeyRecord } from '../wire/idempotentCall.js';

/** An idempotency key with the call it is used for. */
export interface KeyedCall {
  readonly key: string;
  readonly call: IdempotentCall;
}

/** A call under `key` (none without a key). */
export function keyedCall(
  key: string | undefined,
  kind: string,
  recipient: string,
  content: Readonly<Record<string, unknown>>,
): KeyedCall | undefined {
  return key === undefined ? undefined : { key, call: idempotentCall(kind, recipient, content) };
}

/** The call a keyed message to `recipient` (a gid) is. */
export function keyedSend(
  request: {
    kind: string;
    text: string;
    inReplyTo?: string | undefined;
    idempotencyKey?: string | undefined;
  },
  recipient: string,
): KeyedCall | undefined {
  return keyedCall(request.idempotencyKey, request.kind, recipient, {
    // Only the first answer to an ask counts: another text is a repeat, not another call.
    text: request.kind === WireKind.answer ? undefined : request.text,
    inReplyTo: request.inReplyTo,
  });
}

export interface SendKeysDeps {
  store: Store;
  host: string;
  directory: Directory;
  federation?: Federation | undefined;
}

/**
 * The idempotency keys of this host's senders (SPEC §9): which call each key was first used
 * for, so that a retry gets the first call's msgId and another call under the same key is
 * refused, including a call made while the first one's record is still in the open batch.
 */
export class SendKeys {
  /** Keys written in the current, not yet committed batch. */
  private readonly pending = new Map<string, KeyRecord>();

  constructor(private readonly deps: SendKeysDeps) {}

  /**
   * The msgId of `sender`'s earlier call with this key, when it is the same call (a retry);
   * undefined when no call used the key. Throws IDEMPOTENCY_CONFLICT when another call did.
   */
  repeatOf(sender: EntityActor, keyed: KeyedCall): string | undefined {
    const record =
      this.pending.get(keyIdOf(sender.gid, keyed)) ?? readKeyRecord(this.deps.store, sender.gid, keyed.key);
    const verdict = judgeRepeat(record, keyed.call);
    if (verdict.kind === 'new') return undefined;
    if (verdict.kind === 'repeat') return verdict.msgId;
    const first = verdict.first;
    const what = { kind: 'another tool', recipient: 'another recipient', content: 'another text' }[
      verdict.differs
    ];
    throw new BridgeError(
      ErrorCode.idempotencyConflict,
      `idempotency key "${keyed.key}" was already used by ${sender.record.name} for ${first.kind} ` +
        `${verdict.msgId} to ${this.describeRecipient(first)}; this ${keyed.call.kind} has ${what}, so it is ` +
        'not a retry of that call and was not sent: use a new idempotency key for a new message',
      {
        details: {
          key: keyed.key,
          msgId: verdict.msgId,
          kind: first.kind,
          to: first.recipient,
          differs: verdict.differs,
        },
      },
    );
  }

  /**
   * Records a call made under a key without a send actor of its own here (a SPAWN), unless the
   * same call is on record already; throws IDEMPOTENCY_CONFLICT for another call with the key.
   */
  claim(sender: EntityActor, keyed: KeyedCall, msgId: string): void {
    if (this.repeatOf(sender, keyed) === undefined) this.record(sender.gid, keyed, msgId);
  }

  /** Records the first call under a key, in the current batch. */
  record(sender: string, keyed: KeyedCall, msgId: string): void {
    const { store } = this.deps;
    const keyId = keyIdOf(sender, keyed);
    recordIdempotencyKey(store, sender, keyed.key, msgId, keyed.call);
    this.pending.set(keyId, { msgId, call: keyed.call });
    store.batch.afterCommit(() => this.pending.delete(keyId));
  }

  /** A first call's recipient in words: name@host when this gateway knows it. */
  private describeRecipient(call: IdempotentCall): string {
    if (call.kind === WireKind.broadcast || call.kind === WireKind.spawn) return call.recipient;
    const local = this.deps.directory.byGidOrUndefined(call.recipient);
    if (local) return `${local.record.name}@${this.deps.host}`;
    const remote = this.deps.federation?.roster.find(call.recipient)[0];
    return remote ? `${remote.name}@${remote.host}` : call.recipient;
  }
}

function keyIdOf(sender: string, keyed: KeyedCall): string {
  return `${sender}\u0000${keyed.key}`;
}
