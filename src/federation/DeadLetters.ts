import { BridgeError, ErrorCode } from '../errors.js';
import type { Clock } from '../kernel/clock.js';
import type { Logger } from '../log/logger.js';
import type { Signer } from '../security/messageSigning.js';
import { dropOutboxDeadLetter, readOutboxDeadLetters } from '../store/deadLetterOutbox.js';
import { readMessage, readWire, storedEnvelope } from '../store/messageBodies.js';
import type { Store } from '../store/openStore.js';
import { decodeEnvelope, encodeEnvelope } from '../wire/codec.js';
import type { DeadLetterReason } from '../wire/deadLetterReason.js';
import {
  DeadLetterHeader,
  type DeadLetterView,
  mayRequeue,
  type OpenedLetter,
  type RequeueResult,
  reasonOf,
  routingKeyOf,
  signatureHeadersOf,
  viewOf,
} from '../wire/deadLetterView.js';
import type { Envelope } from '../wire/envelope.js';
import type { Hlc } from '../wire/hlc.js';
import { type ReceiptSink, ReceiptStage } from '../wire/receipt.js';
import type { BrokerActor } from './BrokerActor.js';
import type { PublishOutcome, QueuedMessage, TakeDecision } from './brokerMessages.js';
import { dlqName, Exchange, inboxLockName, inboxName, QueueMode } from './topology.js';

export interface DeadLettersDeps {
  broker: BrokerActor;
  hostId: string;
  hlc: Hlc;
  clock: Clock;
  logger: Logger;
  signer: Signer;
  /**
   * A message of this host's as it would have been published (its text sealed), for its dead
   * letter; throws when it cannot be (default: unsealed, as it is).
   */
  wireBytes?: ((envelope: Envelope) => Buffer) | undefined;
  /** A sealed letter opened with this gateway's keys, if it is sealed (see `DeadLetterView.sealed`). */
  openLetter?: ((content: Buffer) => OpenedLetter | undefined) | undefined;
  /** Where cross-host dead letters wait to be published, with the bytes their messages came in. */
  store: Store;
  /** Where the stages of messages go back to their senders: a removed inbox's tell theirs. */
  receipts?: ReceiptSink | undefined;
  /** What is parsed of a message at all (the admission's bound). */
  maxWireBytes?: number | undefined;
  /** broker.queueMode: how a removed entity's inbox is emptied and deleted (default classic). */
  queueMode?: QueueMode | undefined;
}

/** The newest dead letters, newest first, of the first `scanned` read; `depth`: the DLQ's, if known. */
export interface LatestDeadLetters {
  depth: number | undefined;
  scanned: number;
  letters: DeadLetterView[];
}

/** Where a dead letter came from, and why it is dead. */
export interface DeadLetterInfo {
  reason: string;
  detail: string;
  queue: string;
  routingKey: string;
  messageId: string | undefined;
  /** Headers of the original, whose signature travels along so a requeue still verifies. */
  signedBy?: Record<string, unknown> | undefined;
}

/**
 * `bridge.dlq` as this gateway uses it: publishing dead letters with their reason (kept in
 * memory while the broker is away), emptying a removed entity's inbox into it, and the
 * operator's listing and requeueing.
 */
export class DeadLetters {
  /** Dead letters that could not reach bridge.dlq yet (no broker): sent on the next connect. */
  private readonly unsent: Array<() => Promise<boolean>> = [];
  /**
   * The operator's passes over bridge.dlq, one at a time: a listing holds the letters it read
   * (unacked) until its channel closes, and a requeue meanwhile would not see them.
   */
  private passes: Promise<unknown> = Promise.resolve();
  /** The last `latest` read, and the DLQ's depth then. */
  private lastLatest: { depth: number; at: number; view: LatestDeadLetters } | undefined;
  /** A pass over the outbox is running; another was asked for meanwhile. */
  private forwarding = false;
  private forwardAgain = false;
  /** Outbox letters published whose delete is not committed yet. */
  private readonly published = new Set<string>();

  constructor(private readonly deps: DeadLettersDeps) {}

  /** Publishes one dead letter; a broker that cannot take it now is an outcome, not a throw. */
  async publish(content: Buffer, info: DeadLetterInfo): Promise<PublishOutcome> {
    const { hostId, hlc, clock } = this.deps;
    try {
      return await this.deps.broker.publish({
        exchange: Exchange.dlx,
        routingKey: info.routingKey,
        content,
        messageId: info.messageId ?? `dead/${hostId}/${hlc.tick()}`,
        mandatory: false,
        persistent: true,
        headers: {
          [DeadLetterHeader.reason]: info.reason,
          [DeadLetterHeader.detail]: info.detail.slice(0, 1000),
          [DeadLetterHeader.queue]: info.queue,
          [DeadLetterHeader.routingKey]: info.routingKey,
          [DeadLetterHeader.host]: hostId,
          [DeadLetterHeader.at]: new Date(clock.now()).toISOString(),
          ...signatureHeadersOf(info.signedBy),
        },
      });
    } catch (err) {
      this.deps.logger.warn(
        { err, reason: info.reason },
        'could not dead-letter now; the broker will redeliver it',
      );
      return { ok: false, reason: 'rejected', detail: (err as Error).message };
    }
  }

  /**
   * A message of this host's that failed here (refused for room before it left) goes to the DLQ
   * with its reason, signed as it would have been published so a requeue of it verifies. While
   * the broker is away it waits in memory for the next connect (the event log has it besides).
   */
  deadLetter(envelope: Envelope, reason: DeadLetterReason, detail: string | null): void {
    const { content, detail: said } = this.letterOf(envelope, detail ?? '');
    const signedBy = this.deps.signer.headersFor(content);
    const send = async (): Promise<boolean> => {
      if (!this.deps.broker.connected) return false;
      const outcome = await this.publish(content, {
        reason,
        detail: said,
        queue: inboxName(envelope.to),
        routingKey: envelope.to,
        messageId: envelope.msgId,
        signedBy,
      });
      return outcome.ok;
    };
    void send().then((sent) => {
      if (!sent) this.unsent.push(send);
    });
  }

  /**
   * Publishes the cross-host dead letters the store's outbox holds, each with the bytes and
   * signature its message came in (re-encoded only for a message kept before those were), and
   * drops each once the broker has confirmed it; what is left waits for the next connect. One
   * pass at a time: a call during one runs another after it.
   */
  forwardKept(): void {
    if (this.forwarding) {
      this.forwardAgain = true;
      return;
    }
    this.forwarding = true;
    void this.forwardOutbox()
      .catch((err: unknown) =>
        this.deps.logger.error(
          { err },
          'could not publish the kept dead letters; trying again at the next connect',
        ),
      )
      .finally(() => {
        this.forwarding = false;
        if (this.forwardAgain) {
          this.forwardAgain = false;
          this.forwardKept();
        }
      });
  }

  private async forwardOutbox(): Promise<void> {
    const { store, broker, logger } = this.deps;
    for (const letter of readOutboxDeadLetters(store)) {
      if (!broker.connected) return;
      const key = `${letter.msgId}\n${letter.recipient}`;
      // Published, its row's delete not committed yet: the next pass must not publish it again.
      if (this.published.has(key)) continue;
      const wire = readWire(store, letter.msgId, letter.recipient);
      // A message kept before its bytes were: encoded as this host would publish it (sealed).
      const { content, detail } = wire
        ? { content: wire.content, detail: letter.detail }
        : this.letterOf(storedEnvelope(readMessage(store, letter.msgId, letter.recipient)), letter.detail);
      const outcome = await this.publish(content, {
        reason: letter.reason,
        detail,
        queue: inboxName(letter.recipient),
        routingKey: letter.recipient,
        messageId: letter.msgId,
        signedBy: wire?.headers,
      });
      if (!outcome.ok) {
        logger.warn(
          { msgId: letter.msgId, detail: outcome.detail },
          'could not dead-letter now; kept for later',
        );
        return;
      }
      this.published.add(key);
      dropOutboxDeadLetter(store, letter.msgId, letter.recipient);
      store.batch.afterCommit(() => this.published.delete(key));
    }
  }

  /**
   * What a letter of `envelope` carries, encoded as this host publishes it (its text sealed), and
   * its detail. Never the text unsealed when it cannot be sealed, nor anything when the body is
   * no longer kept: the letter is empty then, and its detail says why.
   */
  private letterOf(envelope: Envelope | undefined, detail: string): { content: Buffer; detail: string } {
    const without = (why: string) => ({
      content: Buffer.alloc(0),
      detail: `${detail} (its text is not in this letter: ${why})`.trim(),
    });
    if (!envelope) return without('its body is no longer kept here');
    try {
      return { content: this.deps.wireBytes?.(envelope) ?? encodeEnvelope(envelope), detail };
    } catch (err) {
      return without((err as Error).message);
    }
  }

  /** The broker is back: sends what waited for it. */
  async sendKept(): Promise<void> {
    this.forwardKept();
    for (const send of this.unsent.splice(0)) {
      if (!(await send())) this.unsent.push(send);
    }
  }

  /**
   * Empties a removed entity's inbox into the DLQ (reason recipient-gone), then deletes it and
   * its lock queue: nothing left in it is lost (a letter that could not be published stays,
   * and so does the inbox).
   */
  async emptyInbox(gid: string): Promise<void> {
    const { broker, logger } = this.deps;
    const queue = inboxName(gid);
    if (!broker.connected) return;
    const detail = 'the entity was deregistered';
    const take = async (message: QueuedMessage): Promise<TakeDecision> => {
      const outcome = await this.publish(message.content, {
        reason: 'recipient-gone',
        detail,
        queue,
        routingKey: message.routingKey,
        messageId: message.messageId,
        signedBy: message.headers,
      });
      if (outcome.ok) this.tellSender(message.content, gid, detail);
      return outcome.ok ? 'ack' : 'stop';
    };
    try {
      if (this.deps.queueMode === QueueMode.quorum) {
        // A quorum inbox has a single active consumer, which refuses basic.get, and quorum
        // queues do not implement delete-if-empty (540, which closes the connection): take
        // through a consumer, and delete once it reads empty.
        await broker.consumeEach(queue, take);
        if ((await broker.queueDepth(queue)) !== 0) {
          logger.warn({ queue }, 'the inbox of a removed entity is not empty yet; left for now');
          return;
        }
        await broker.deleteQueue(queue);
      } else {
        await broker.takeEach(queue, Number.POSITIVE_INFINITY, take);
        await broker.deleteQueue(queue, { ifEmpty: true });
      }
      await broker.deleteQueue(inboxLockName(gid));
    } catch (err) {
      logger.warn({ err, queue }, 'could not empty the inbox of a removed entity');
    }
  }

  /**
   * A message that never reached its entity's gateway ends dead-lettered as one the gateway
   * held would: its sender gets the receipt (R-RC1), so a wait ends and `bridge_status` says
   * why. What does not decode as a message to `gid` has no sender to tell (the DLQ has it).
   */
  private tellSender(content: Buffer, gid: string, detail: string): void {
    const decoded = decodeEnvelope(content, this.deps.maxWireBytes ?? content.length);
    if (!decoded.ok || decoded.envelope.to !== gid) return;
    const { envelope } = decoded;
    this.deps.receipts?.record(
      {
        msgId: envelope.msgId,
        recipient: gid,
        stage: ReceiptStage.deadLettered,
        reason: 'recipient-gone',
        detail,
        at: this.deps.clock.now(),
      },
      { sender: envelope.from.gid, senderHost: envelope.from.host, traceId: envelope.traceId },
    );
  }

  /** Lists the DLQ without consuming it. */
  async list(max: number): Promise<DeadLetterView[]> {
    const messages = await this.pass(() => this.deps.broker.peek(dlqName, max));
    return messages.map((message) =>
      viewOf(message.content, message.messageId, message.headers, this.deps.openLetter?.(message.content)),
    );
  }

  /**
   * The newest `max` letters of the first `scan` the DLQ holds, newest first (it reads oldest
   * first), for a view that asks every few seconds: read again only when the DLQ's depth
   * changed or `maxAgeMs` passed, so that a page left open does not keep the letters out of
   * the queue and count deliveries on them.
   */
  async latest(max: number, scan: number, maxAgeMs: number): Promise<LatestDeadLetters> {
    const depth = await this.deps.broker.queueDepth(dlqName);
    const now = this.deps.clock.now();
    const last = this.lastLatest;
    if (last && depth !== undefined && depth === last.depth && now - last.at < maxAgeMs) return last.view;
    const letters = await this.list(scan);
    const view = { depth, scanned: letters.length, letters: letters.slice(-max).reverse() };
    if (depth !== undefined) this.lastLatest = { depth, at: now, view };
    return view;
  }

  /**
   * Moves dead letters back to their recipients' inboxes (all, or those with this msgId), in
   * one pass over what the DLQ held when it started: a letter refused again on arrival comes
   * back to the DLQ's tail, and taking it again would go round for ever. Letters refused for
   * what they are (`refusedOnArrival`) are left in the DLQ unless `force`d, and counted.
   */
  async requeue(msgId: string | undefined, force: boolean): Promise<RequeueResult> {
    const { broker } = this.deps;
    const result: RequeueResult = { requeued: 0, skipped: {} };
    // Each letter requeued in this pass, in case one comes back within the count anyway.
    const requeued = new Set<string>();
    this.lastLatest = undefined;
    await this.pass(() =>
      broker.takeEach(dlqName, 'queued', async (message) => {
        const id = message.messageId;
        const routingKey = routingKeyOf(message.headers);
        // Left (not acked), so the channel's close puts it back where it was.
        if ((msgId !== undefined && id !== msgId) || routingKey === '') return 'leave';
        const letter = `${id ?? ''}\n${routingKey}`;
        if (id !== undefined && requeued.has(letter)) return 'leave';
        const reason = reasonOf(message.headers);
        if (!mayRequeue(reason, force)) {
          result.skipped[reason] = (result.skipped[reason] ?? 0) + 1;
          return 'leave';
        }
        const outcome = await broker.publish({
          exchange: Exchange.msg,
          routingKey,
          content: message.content,
          messageId: id ?? `requeued/${message.deliveryTag}`,
          mandatory: true,
          persistent: true,
          headers: signatureHeadersOf(message.headers),
        });
        if (!outcome.ok) return 'leave';
        requeued.add(letter);
        result.requeued++;
        return 'ack';
      }),
    );
    return result;
  }

  /**
   * Runs a pass of operator tooling on bridge.dlq, after the one before it. Every host's dead
   * letters are the operator's: a gateway login reads them only when provisioned with
   * --read-dlq, so a refusal says so.
   */
  private pass<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.passes.then(fn, fn);
    this.passes = run.catch(() => undefined);
    return run.catch((err: unknown) => {
      if ((err as { code?: number }).code !== 403) throw err;
      throw new BridgeError(
        ErrorCode.forbidden,
        `this gateway's broker login may not read ${dlqName} (every host's dead letters are the ` +
          `operator's): run \`agentbridge dlq\` on the operator's gateway, or grant it to this one with ` +
          `\`agentbridge broker provision ${this.deps.hostId} --read-dlq --apply\``,
        { cause: err },
      );
    });
  }
}
