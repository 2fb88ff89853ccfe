import type { Channel, ChannelModel, ConsumeMessage } from 'amqplib';
import type { ConsumerSpec, InboundMessage } from '../broker/brokerMessages.js';
import { closeQuietly } from '../broker/closeQuietly.js';
import { declareQueue } from '../broker/declareQueue.js';
import { describeQueueMismatch } from '../broker/describeQueueMismatch.js';
import { isInboxName } from '../broker/topology.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { Logger } from '../log/logger.js';

export interface BrokerConsumersOptions {
  logger: Logger;
  hostId: string;
  /** Called when the broker refuses a consumer on a re-open: retrying cannot fix it. */
  onFatal(err: BridgeError): void;
  /** How long to wait before the `attempt`-th re-open in a row of a consumer's channel. */
  backoffMs(attempt: number): number;
  /** Whether `model` is still the broker actor's live connection (and the actor not stopped). */
  isLive(model: ChannelModel): boolean;
}

interface OpenConsumer {
  spec: ConsumerSpec;
  channel: Channel | undefined;
  /** The consumer's tag while the broker delivers to it; undefined while paused. */
  tag: string | undefined;
  /** Paused by its owner (a full local inbox): the queue is declared, nothing is delivered. */
  paused: boolean;
  /** Re-opens after the server closed the channel: how many in a row, for the backoff. */
  reopenAttempts: number;
  reopenTimer: ReturnType<typeof setTimeout> | undefined;
  /** Pause/resume switches, one at a time: each brings the channel in line with `paused`. */
  switching: Promise<void>;
}

/** Broker replies that mean "someone else holds this": retrying does not help (invariant 1). */
const refusalCodes = new Set([403, 405]);

/**
 * The broker actor's consumers: one channel per consumer on the actor's connection, declared
 * with its queue, paused and resumed on demand, and re-opened with backoff when the server
 * closes the channel under it while the connection stays up (R-H6).
 */
export class BrokerConsumers {
  private readonly entries = new Map<string, OpenConsumer>();

  constructor(private readonly options: BrokerConsumersOptions) {}

  get size(): number {
    return this.entries.size;
  }

  /** Registers a consumer, opened now on `model` if given (and on every `openAll`). */
  async add(spec: ConsumerSpec, model: ChannelModel | undefined): Promise<void> {
    const entry: OpenConsumer = {
      spec,
      channel: undefined,
      tag: undefined,
      paused: spec.paused ?? false,
      reopenAttempts: 0,
      reopenTimer: undefined,
      switching: Promise.resolve(),
    };
    this.entries.set(spec.queue.name, entry);
    if (model) await this.open(model, entry);
  }

  async cancel(queueName: string): Promise<void> {
    const entry = this.entries.get(queueName);
    this.entries.delete(queueName);
    if (entry?.reopenTimer) clearTimeout(entry.reopenTimer);
    await closeQuietly(entry?.channel, this.options.logger, `the consumer channel of ${queueName}`);
  }

  /** Opens every consumer on a new connection, in order; the first that fails rejects. */
  async openAll(model: ChannelModel): Promise<void> {
    for (const entry of this.entries.values()) await this.open(model, entry);
  }

  /** The connection is gone, and every consumer's channel with it. */
  detachAll(): void {
    for (const entry of this.entries.values()) {
      entry.channel = undefined;
      entry.tag = undefined;
    }
  }

  /** See `BrokerActor.setPaused`. */
  async setPaused(queueName: string, paused: boolean): Promise<void> {
    const entry = this.entries.get(queueName);
    if (!entry || entry.paused === paused) return;
    entry.paused = paused;
    await this.switchConsumer(entry);
  }

  /** Whether the broker delivers from this queue now (registered, open, not paused). */
  consuming(queueName: string): boolean {
    const entry = this.entries.get(queueName);
    return entry?.channel !== undefined && entry.tag !== undefined;
  }

  /**
   * Brings the consumer in line with `paused` (basic.cancel or basic.consume on its channel),
   * after any switch still under way: a pause that comes while a consume is being set up is
   * applied once it is, never lost, and no second consume is started beside the first.
   */
  private switchConsumer(entry: OpenConsumer): Promise<void> {
    entry.switching = entry.switching.then(async () => {
      const channel = entry.channel;
      if (!channel) return; // opened (or not) accordingly on the next open
      try {
        if (entry.paused && entry.tag !== undefined) {
          const tag = entry.tag;
          entry.tag = undefined;
          await channel.cancel(tag);
        } else if (!entry.paused && entry.tag === undefined) {
          await this.startConsuming(channel, entry);
        }
      } catch (err) {
        // The channel went down meanwhile: its re-open follows `paused`.
        this.options.logger.debug({ err, queue: entry.spec.queue.name }, 'could not switch a consumer');
      }
    });
    return entry.switching;
  }

  private async open(model: ChannelModel, entry: OpenConsumer): Promise<void> {
    const { spec } = entry;
    const { logger } = this.options;
    const channel = await model.createChannel();
    let failure: Error | undefined;
    channel.on('error', (err: Error) => {
      failure = err;
      logger.warn({ err, queue: spec.queue.name }, 'broker consumer channel error');
    });
    channel.on('close', () => {
      if (entry.channel !== channel) return;
      entry.channel = undefined;
      entry.tag = undefined;
      // Closed by the server (a consumer timeout, a queue-level error) while the connection
      // stays up: open it again, or the entity would silently stop receiving (R-H6).
      this.reopenSoon(model, entry, failure);
    });
    try {
      if (spec.lock) await declareQueue(channel, spec.lock);
      await declareQueue(channel, spec.queue);
      await channel.prefetch(spec.prefetch);
      entry.channel = channel;
      entry.tag = undefined;
      if (!entry.paused) {
        // Not through switchConsumer: an exclusive refusal must reach the caller (invariant 1).
        const consuming = entry.switching.then(() =>
          entry.channel === channel && !entry.paused && entry.tag === undefined
            ? this.startConsuming(channel, entry)
            : undefined,
        );
        // The chain only orders switches: this consume's failure reaches the caller just below.
        entry.switching = consuming.catch(() => {});
        await consuming;
        // A pause that came meanwhile.
        if (entry.paused) await this.switchConsumer(entry);
      }
      entry.reopenAttempts = 0;
    } catch (err) {
      if (entry.channel === channel) {
        entry.channel = undefined;
        entry.tag = undefined;
      }
      void closeQuietly(channel, logger, `the consumer channel of ${spec.queue.name}`);
      const code = (err as { code?: number }).code ?? (failure as { code?: number } | undefined)?.code;
      if (code !== undefined && refusalCodes.has(code)) throw this.refused(spec, err as Error);
      if (code === 406) {
        // The queue is there with other arguments (another queue type, an older release's):
        // no retry fixes that, the operator does. At start the gateway stops with it, later the
        // actor keeps retrying with it (see BrokerActor.isFatal).
        const declaredAs = spec.queue.arguments['x-queue-type'] === 'quorum' ? 'quorum' : 'classic';
        throw new BridgeError(
          ErrorCode.brokerNotSetUp,
          describeQueueMismatch((err as Error).message, declaredAs),
          {
            retryable: true,
            cause: err,
          },
        );
      }
      throw err;
    }
  }

  private refused(spec: ConsumerSpec, err: Error): BridgeError {
    const denied = /refused for user/.test(err.message);
    return new BridgeError(
      ErrorCode.consumerRefused,
      `the broker refused to let this gateway consume ${spec.queue.name}: ${err.message}. ` +
        (denied
          ? "This gateway's broker login has no permission on this queue (R-H2); grant it with " +
            `\`bridge broker provision ${this.options.hostId} --apply\` (re-run after registering entities)`
          : `Another gateway already consumes this ${isInboxName(spec.queue.name) ? 'inbox' : 'queue'} ` +
            '(invariant 1: one consumer per inbox); ' +
            'stop that gateway, or give this one a different BRIDGE_HOME and entities'),
      // Held, not denied: the holder may be this gateway's own connection on a node that is lost
      // but not yet declared down by the cluster (see BrokerActorOptions.lockGraceMs).
      { cause: err, retryable: !denied },
    );
  }

  private async startConsuming(channel: Channel, entry: OpenConsumer): Promise<void> {
    const { spec } = entry;
    const { logger } = this.options;
    const { consumerTag } = await channel.consume(
      spec.queue.name,
      (message) => {
        if (message === null) {
          // Cancelled by the broker (queue deleted, or a quorum leader moved): open again.
          logger.warn({ queue: spec.queue.name }, 'consumer cancelled by the broker; re-opening');
          void closeQuietly(channel, logger, `the consumer channel of ${spec.queue.name}`);
          return;
        }
        const inbound = wrap(channel, message);
        try {
          spec.onMessage(inbound);
        } catch (err) {
          // A handler must never take the consumer down: the queue's DLX takes the message.
          logger.error({ err, queue: spec.queue.name }, 'message handler failed; rejecting the message');
          inbound.reject();
        }
      },
      { noAck: false, exclusive: spec.exclusive },
    );
    entry.tag = consumerTag;
  }

  /**
   * Opens a consumer again after its channel closed under it, with backoff, as long as the
   * connection it belonged to is the live one (a lost connection re-opens everything itself).
   */
  private reopenSoon(model: ChannelModel, entry: OpenConsumer, cause: Error | undefined): void {
    const { logger } = this.options;
    const queue = entry.spec.queue.name;
    // Also while (re)connecting: a channel closed before `connected` would otherwise stay shut.
    const live = () => this.entries.get(queue) === entry && this.options.isLive(model);
    if (!live() || entry.reopenTimer) return;
    const delay = this.options.backoffMs(entry.reopenAttempts);
    entry.reopenAttempts++;
    logger.warn(
      { queue, error: cause?.message, inMs: delay },
      'the broker closed a consumer channel; re-opening the consumer',
    );
    entry.reopenTimer = setTimeout(() => {
      entry.reopenTimer = undefined;
      if (!live() || entry.channel) return;
      this.open(model, entry).then(
        () => logger.info({ queue }, 'consumer re-opened'),
        (err: unknown) => {
          if (err instanceof BridgeError && err.code === ErrorCode.consumerRefused) {
            this.options.onFatal(err);
            return;
          }
          logger.warn({ err, queue }, 'could not re-open a consumer; retrying');
          this.reopenSoon(model, entry, err as Error);
        },
      );
    }, delay);
    entry.reopenTimer.unref();
  }
}

function wrap(channel: Channel, message: ConsumeMessage): InboundMessage {
  let settled = false;
  const settle = (fn: () => void) => {
    if (settled) return;
    settled = true;
    try {
      fn();
    } catch {
      // The channel is gone; the broker redelivers the message and dedup catches it.
    }
  };
  return {
    content: message.content,
    exchange: message.fields.exchange,
    routingKey: message.fields.routingKey,
    messageId: message.properties.messageId as string | undefined,
    redelivered: message.fields.redelivered,
    headers: (message.properties.headers ?? {}) as Record<string, unknown>,
    ack: () => settle(() => channel.ack(message)),
    reject: () => settle(() => channel.nack(message, false, false)),
  };
}
