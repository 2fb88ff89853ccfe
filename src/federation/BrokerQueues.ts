import type { Channel, ChannelModel, Message } from 'amqplib';
import type { BridgeError } from '../errors.js';
import type { Logger } from '../log/logger.js';
import type { QueuedMessage, TakeDecision } from './brokerMessages.js';
import { closeQuietly } from './closeQuietly.js';

/** How long `status` waits for a queue's depth before it shows it as unknown. */
const queueDepthTimeoutMs = 2_000;

/**
 * The broker actor's one-off queue operations (a depth for `status`, the DLQ's reads and
 * requeues, emptying a removed inbox), each on a short-lived channel of its own on the actor's
 * live connection, so a broker refusal closes only that channel.
 */
export class BrokerQueues {
  constructor(
    /** The live connection, or undefined while not connected. */
    private readonly connection: () => ChannelModel | undefined,
    private readonly unavailable: () => BridgeError,
    private readonly logger: Logger,
  ) {}

  /** Messages waiting in a queue, or undefined when it cannot be asked (not connected, no queue). */
  async depth(queueName: string): Promise<number | undefined> {
    const model = this.connection();
    if (!model) return undefined;
    let channel: Channel | undefined;
    const ask = async (): Promise<number | undefined> => {
      try {
        channel = await model.createChannel();
        channel.on('error', () => {
          // A missing queue closes the channel; checkQueue rejects with it and reads as unknown.
        });
        const info = await channel.checkQueue(queueName);
        return info.messageCount;
      } catch {
        // The queue is not there (or the broker went): its depth is unknown, not zero.
        return undefined;
      } finally {
        void closeQuietly(channel, this.logger, 'a queue depth channel');
      }
    };
    // A connection that has gone silent but is not yet declared dead must not hang `status`.
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), queueDepthTimeoutMs);
    });
    try {
      return await Promise.race([ask(), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Up to `max` messages of a queue, left in it: they go back when the reading channel closes. */
  async peek(queueName: string, max: number): Promise<QueuedMessage[]> {
    const out: QueuedMessage[] = [];
    await this.takeEach(queueName, max, async (message) => {
      out.push(message);
      return 'leave';
    });
    return out;
  }

  /**
   * Takes up to `max` messages of a queue one at a time (basic.get, 'queued': as many as it held
   * at the start) and does what `take` decides with each; what is not acked goes back to the
   * queue when the channel closes, after the last one.
   */
  async takeEach(
    queueName: string,
    max: number | 'queued',
    take: (message: QueuedMessage) => Promise<TakeDecision>,
  ): Promise<void> {
    await this.onOwnChannel(async (channel) => {
      const limit = max === 'queued' ? (await channel.checkQueue(queueName)).messageCount : max;
      for (let taken = 0; taken < limit; taken++) {
        const message = await channel.get(queueName, { noAck: false });
        if (message === false) return;
        const decision = await take(queuedMessage(message));
        if (decision === 'ack') channel.ack(message);
        if (decision === 'stop') return;
      }
    });
  }

  /**
   * Takes the messages a queue holds now through a consumer of its own (prefetch 1), one at a
   * time, as `takeEach` does with basic.get: for a queue with a single active consumer (a quorum
   * inbox), where basic.get is refused. `take` may ack or stop; a message left goes back when
   * the channel closes. Resolves once as many as it held at the start are handled, or when none
   * comes within `idleMs` (the rest went to another consumer, or expired).
   */
  async consumeEach(
    queueName: string,
    take: (message: QueuedMessage) => Promise<TakeDecision>,
    idleMs = 2_000,
  ): Promise<void> {
    await this.onOwnChannel(async (channel) => {
      let remaining = (await channel.checkQueue(queueName)).messageCount;
      if (remaining === 0) return;
      await channel.prefetch(1);
      await new Promise<void>((resolve, reject) => {
        let idle = setTimeout(resolve, idleMs);
        const done = (err?: unknown) => {
          clearTimeout(idle);
          if (err) reject(err);
          else resolve();
        };
        channel
          .consume(
            queueName,
            (message) => {
              if (message === null) return done(); // cancelled by the broker
              clearTimeout(idle);
              take(queuedMessage(message)).then((decision) => {
                if (decision === 'ack') channel.ack(message);
                remaining--;
                // 'leave' holds the one prefetched message until the channel closes: stop there too.
                if (decision !== 'ack' || remaining <= 0) done();
                else idle = setTimeout(resolve, idleMs);
              }, done);
            },
            { noAck: false },
          )
          .catch(done);
      });
    });
  }

  /** Deletes a queue (with `ifEmpty`, only if nothing is ready in it). */
  async deleteQueue(queueName: string, options: { ifEmpty?: boolean } = {}): Promise<void> {
    await this.onOwnChannel((channel) => channel.deleteQueue(queueName, options));
  }

  /**
   * Runs `fn` with a fresh channel of its own, closed afterwards, which requeues whatever `fn`
   * got and did not ack. A broker refusal (403, 404) rejects with the broker's reason.
   */
  private async onOwnChannel<T>(fn: (channel: Channel) => Promise<T>): Promise<T> {
    const model = this.connection();
    if (!model) throw this.unavailable();
    const channel = await model.createChannel();
    // The broker's reason (403 ACCESS_REFUSED, 404) comes as the channel's error; a failed
    // basic.get rejects with less, so the caller gets the channel's error instead.
    let closedWith: Error | undefined;
    channel.on('error', (err: Error) => {
      closedWith = err;
    });
    try {
      return await fn(channel);
    } catch (err) {
      throw closedWith ?? err;
    } finally {
      await closeQuietly(channel, this.logger, 'a queue operation channel');
    }
  }
}

/** A message read off a queue, as the actor's callers see it. */
function queuedMessage(message: Message): QueuedMessage {
  return {
    content: message.content,
    routingKey: message.fields.routingKey,
    messageId: message.properties.messageId as string | undefined,
    deliveryTag: message.fields.deliveryTag,
    headers: (message.properties.headers ?? {}) as Record<string, unknown>,
  };
}
