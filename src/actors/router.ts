import type { Config } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import { newTraceId } from '../log/logger.js';
import { type SendContext, type SendEvent, sendMachine } from '../machines/sendMachine.js';
import type { Metrics } from '../metrics/metrics.js';
import { ActorCell, type RuntimeDeps } from '../runtime/actorCell.js';
import { readIdempotentMsgId, recordIdempotencyKey } from '../store/idempotency.js';
import { readTraceOfMessage } from '../store/messageBodies.js';
import { byteLength, digestText } from '../wire/digest.js';
import { type Address, type Envelope, schemaVersionString, type WireKind } from '../wire/envelope.js';
import { uuidv7 } from '../wire/ids.js';
import type { Directory } from './directory.js';
import type { EntityActor } from './entityActor.js';

export interface SendRequest {
  kind: typeof WireKind.send | typeof WireKind.reply;
  to: string;
  text: string;
  inReplyTo?: string | undefined;
  idempotencyKey?: string | undefined;
}

export interface SendResult {
  msgId: string;
  traceId: string;
  to: Address;
  /** True when an earlier call with the same idempotency key already sent it. */
  duplicate: boolean;
}

export interface RouterDeps extends RuntimeDeps {
  config: Config;
  metrics: Metrics;
  directory: Directory;
}

export const sendKind = 'send';

export function addressOf(entity: EntityActor, host: string): Address {
  return { gid: entity.gid, name: entity.record.name, host, kind: entity.record.kind };
}

/**
 * Accepts messages from local senders and routes them (invariant 3): a recipient on this host
 * gets the message through its entity actor, durably, without a broker. The send's actor, the
 * recipient's delivery actor and the body are written in one transaction; the call returns
 * only once that is on disk.
 */
export class Router {
  /** Idempotency keys written in the current, not yet committed batch. */
  private readonly pendingKeys = new Map<string, string>();

  constructor(private readonly deps: RouterDeps) {}

  async send(sender: EntityActor, request: SendRequest): Promise<SendResult> {
    const { config, directory, store, host } = this.deps;
    const size = byteLength(request.text);
    if (size > config.limits.maxTextBytes) {
      throw new BridgeError(
        ErrorCode.textTooLarge,
        `text is ${size} bytes; the limit is ${config.limits.maxTextBytes} (limits.maxTextBytes): ` +
          'send a shorter text, or write it to a file and send the path',
        { details: { size, limit: config.limits.maxTextBytes } },
      );
    }
    const recipient = directory.resolve(request.to);
    const to = addressOf(recipient, host);

    const keyId =
      request.idempotencyKey === undefined ? undefined : `${sender.gid}\u0000${request.idempotencyKey}`;
    if (keyId !== undefined && request.idempotencyKey !== undefined) {
      const earlier =
        this.pendingKeys.get(keyId) ?? readIdempotentMsgId(store, sender.gid, request.idempotencyKey);
      if (earlier !== undefined) {
        await store.batch.flush();
        return { msgId: earlier, traceId: readTraceOfMessage(store, earlier) ?? '', to, duplicate: true };
      }
    }

    const msgId = uuidv7(this.deps.clock.now());
    const traceId =
      (request.inReplyTo === undefined ? undefined : readTraceOfMessage(store, request.inReplyTo)) ??
      newTraceId();
    const envelope: Envelope = {
      v: schemaVersionString,
      kind: request.kind,
      msgId,
      traceId,
      hlc: this.deps.hlc.tick(),
      from: addressOf(sender, host),
      to: recipient.gid,
      text: request.text,
      ...(request.inReplyTo === undefined ? {} : { inReplyTo: request.inReplyTo }),
    };

    const cell = ActorCell.create<SendContext, SendEvent>(
      sendMachine,
      {
        msgId,
        traceId,
        kind: request.kind,
        sender: sender.gid,
        recipient: recipient.gid,
        digest: digestText(request.text),
        size,
      },
      { kind: sendKind, id: msgId, traceId, msgId, owner: sender.gid },
      this.deps,
    );
    if (keyId !== undefined && request.idempotencyKey !== undefined) {
      recordIdempotencyKey(store, sender.gid, request.idempotencyKey, msgId);
      this.pendingKeys.set(keyId, msgId);
      store.batch.afterCommit(() => this.pendingKeys.delete(keyId));
    }
    try {
      recipient.accept(envelope);
    } catch (err) {
      const code = err instanceof BridgeError ? err.code : ErrorCode.internal;
      cell.send({ type: 'send.failed', code, detail: (err as Error).message });
      await store.batch.flush();
      throw err;
    }
    cell.send({ type: 'send.routedLocal' });
    this.deps.metrics.accepted.inc({ route: 'local' });
    await store.batch.flush();
    return { msgId, traceId, to, duplicate: false };
  }
}
