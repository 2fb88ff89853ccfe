import type { ConfirmChannel, ConsumeMessage, Options } from 'amqplib';
import { BridgeError, ErrorCode } from '../errors.js';
import type { Clock } from '../kernel/clock.js';
import type { PublishOutcome, PublishRequest } from './brokerMessages.js';

/** How long a nack waits to see whether the connection is going down with it. */
const nackSettleMs = 100;

/** See BrokerActorOptions.confirmTimeoutMs. */
const defaultConfirmTimeoutMs = 5_000;

/**
 * The broker actor's publishing, on the confirm channel of its live connection: each publish
 * resolves once the broker confirmed it (a value for what the broker refused: unroutable,
 * nacked), waits for the channel to drain when its buffer is full, and fails fast with
 * BROKER_UNAVAILABLE while there is no channel. Nothing is buffered for the broker.
 *
 * A connection can stay up while the broker cannot take a message: a cluster that lost its
 * majority holds a quorum queue's publishes, unconfirmed, until it is back. A publish not
 * confirmed within `confirmTimeoutMs` fails as BROKER_UNAVAILABLE, and so does, at once, every
 * later publish to the same routing key until the broker answers that one (it may still take
 * it: a retry under the same msgId is dropped by the receiver as a duplicate).
 */
export class BrokerPublisher {
  private channel: ConfirmChannel | undefined;
  /** Channels replaced while connected (BrokerActor.renewPublishChannel): open until answered. */
  private readonly replaced = new WeakSet<ConfirmChannel>();
  private readonly returned = new Map<string, string>();
  private drained: Promise<void> | undefined;
  /** The live channel's publishes past the confirm timeout and still unanswered, per routing key. */
  private overdue = new Map<string, { count: number; since: number }>();

  constructor(
    private readonly connected: () => boolean,
    private readonly unavailable: (cause?: unknown) => BridgeError,
    private readonly clock: Clock,
    private readonly confirmTimeoutMs = defaultConfirmTimeoutMs,
  ) {}

  /** Notes what a new confirm channel returns as unroutable (mandatory, no queue bound). */
  watchReturns(channel: ConfirmChannel): void {
    channel.on('return', (message: ConsumeMessage) => {
      const id = message.properties.messageId as string | undefined;
      if (id !== undefined) this.returned.set(id, `no queue is bound to "${message.fields.routingKey}"`);
    });
  }

  /**
   * Publishes on `channel` from now on (the shared topology was checked on its connection). A
   * channel it replaces on a live connection stays open until its publishes are answered.
   */
  attach(channel: ConfirmChannel): void {
    if (this.channel) this.replaced.add(this.channel);
    this.channel = channel;
    this.overdue = new Map();
  }

  /** The channel publishes go on now, if any. */
  current(): ConfirmChannel | undefined {
    return this.channel;
  }

  /** Routing keys with a publish the broker has left unconfirmed past the timeout (for status). */
  unconfirmedKeys(): string[] {
    return [...this.overdue.keys()];
  }

  detach(): void {
    this.channel = undefined;
  }

  /**
   * Publishes on the confirm channel and resolves when the broker has confirmed it (it is
   * then the broker's). Throws BROKER_UNAVAILABLE at once when not connected.
   */
  async publish(request: PublishRequest): Promise<PublishOutcome> {
    const publisher = this.channel;
    if (!publisher || !this.connected()) throw this.unavailable();
    const overdue = this.overdue;
    const stalled = overdue.get(request.routingKey);
    if (stalled)
      throw this.unconfirmed(request.routingKey, this.clock.now() - stalled.since, 'an earlier message');
    if (this.drained) await this.drained;
    const options: Options.Publish = {
      persistent: request.persistent,
      mandatory: request.mandatory,
      messageId: request.messageId,
      contentType: 'application/json',
      headers: request.headers ?? {},
      ...(request.expirationMs === undefined
        ? {}
        : { expiration: String(Math.max(1, Math.round(request.expirationMs))) }),
    };
    return new Promise<PublishOutcome>((resolve, reject) => {
      const key = request.routingKey;
      let late = false;
      const timer = this.clock.setTimeout(() => {
        late = true;
        const entry = overdue.get(key);
        if (entry) entry.count++;
        else overdue.set(key, { count: 1, since: this.clock.now() - this.confirmTimeoutMs });
        reject(this.unconfirmed(key, this.confirmTimeoutMs, 'the message'));
      }, this.confirmTimeoutMs);
      let ready: boolean;
      try {
        ready = publisher.publish(request.exchange, request.routingKey, request.content, options, (err) => {
          this.clock.clearTimeout(timer);
          const returned = this.returned.get(request.messageId);
          this.returned.delete(request.messageId);
          if (late) {
            // The sender was told already; the broker answering frees the key for new publishes.
            const entry = overdue.get(key);
            if (entry && --entry.count === 0) overdue.delete(key);
            return;
          }
          if (returned !== undefined) resolve({ ok: false, reason: 'unroutable', detail: returned });
          else if (err) {
            // A nack (a full inbox's reject-publish), or the channel closing under it: the broker
            // going down nacks what it holds and then closes. Whether the channel is still the
            // live one (or one replaced, still answering) a beat later tells the two apart.
            this.clock.setTimeout(() => {
              const ours = publisher === this.channel || this.replaced.has(publisher);
              if (ours && this.connected()) {
                resolve({ ok: false, reason: 'rejected', detail: 'the broker nacked the publish' });
              } else reject(this.unavailable(err));
            }, nackSettleMs);
          } else resolve({ ok: true });
        });
      } catch (err) {
        this.clock.clearTimeout(timer);
        reject(this.unavailable(err));
        return;
      }
      if (!ready && !this.drained) {
        this.drained = new Promise((resolveDrain) =>
          publisher.once('drain', () => {
            this.drained = undefined;
            resolveDrain();
          }),
        );
      }
    });
  }

  private unconfirmed(routingKey: string, forMs: number, what: string): BridgeError {
    return new BridgeError(
      ErrorCode.brokerUnavailable,
      `the broker has not confirmed ${what} to ${routingKey} for ${(forMs / 1000).toFixed(1)} s ` +
        '(a cluster that lost its majority holds quorum-queue messages until it is back): remote sends ' +
        'to it fail until the broker answers (same-host messages still flow). It may still be delivered: ' +
        'retry later with the same idempotency_key, and the receiver drops the copy',
      { retryable: true },
    );
  }
}
