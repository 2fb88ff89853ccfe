import type { ConfirmChannel, ConsumeMessage, Options } from 'amqplib';
import type { PublishOutcome, PublishRequest } from '../broker/brokerMessages.js';
import type { BridgeError } from '../errors.js';

/** How long a nack waits to see whether the connection is going down with it. */
const nackSettleMs = 100;

/**
 * The broker actor's publishing, on the confirm channel of its live connection: each publish
 * resolves once the broker confirmed it (a value for what the broker refused: unroutable,
 * nacked), waits for the channel to drain when its buffer is full, and fails fast with
 * BROKER_UNAVAILABLE while there is no channel. Nothing is buffered for the broker.
 */
export class BrokerPublisher {
  private channel: ConfirmChannel | undefined;
  private readonly returned = new Map<string, string>();
  private drained: Promise<void> | undefined;

  constructor(
    private readonly connected: () => boolean,
    private readonly unavailable: (cause?: unknown) => BridgeError,
  ) {}

  /** Notes what a new confirm channel returns as unroutable (mandatory, no queue bound). */
  watchReturns(channel: ConfirmChannel): void {
    channel.on('return', (message: ConsumeMessage) => {
      const id = message.properties.messageId as string | undefined;
      if (id !== undefined) this.returned.set(id, `no queue is bound to "${message.fields.routingKey}"`);
    });
  }

  /** Publishes on `channel` from now on (the shared topology was checked on its connection). */
  attach(channel: ConfirmChannel): void {
    this.channel = channel;
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
      let ready: boolean;
      try {
        ready = publisher.publish(request.exchange, request.routingKey, request.content, options, (err) => {
          const returned = this.returned.get(request.messageId);
          this.returned.delete(request.messageId);
          if (returned !== undefined) resolve({ ok: false, reason: 'unroutable', detail: returned });
          else if (err) {
            // A nack (a full inbox's reject-publish), or the channel closing under it: the broker
            // going down nacks what it holds and then closes. Whether the channel is still the
            // live one a beat later tells the two apart.
            setTimeout(() => {
              if (publisher === this.channel && this.connected()) {
                resolve({ ok: false, reason: 'rejected', detail: 'the broker nacked the publish' });
              } else reject(this.unavailable(err));
            }, nackSettleMs).unref();
          } else resolve({ ok: true });
        });
      } catch (err) {
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
}
