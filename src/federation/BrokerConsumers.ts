import type { Channel, ChannelModel } from 'amqplib';
import { BridgeError, ErrorCode } from '../errors.js';
import type { Clock } from '../kernel/clock.js';
import type { Logger } from '../log/logger.js';
import type { ConsumerSpec } from './brokerMessages.js';
import { ConnectionPool, type PooledConnection } from './ConnectionPool.js';
import { closeQuietly } from './closeQuietly.js';
import { consumerRefused, queueMismatch, refusalCodes, replyCode } from './consumerRefused.js';
import { inboundMessage } from './inboundMessage.js';

export interface BrokerConsumersOptions {
  logger: Logger;
  /** Times the re-opens. */
  clock: Clock;
  hostId: string;
  /** Called when the broker refuses a consumer on a re-open: retrying cannot fix it. */
  onFatal(err: BridgeError): void;
  /** How long to wait before the `attempt`-th re-open in a row of a consumer. */
  backoffMs(attempt: number): number;
  /** Consumers that share one channel. */
  consumersPerChannel: number;
  /** Consumer channels on one connection before another connection is opened. */
  channelsPerConnection: number;
  /** Opens the `index`-th connection (2, 3, ...) to the node of the broker actor's own. */
  openConnection(index: number): Promise<ChannelModel>;
}

/** What the broker actor's consumers hold on the broker now. */
export interface BrokerUsage {
  /** Connections consumers are on, the broker actor's own included. */
  connections: number;
  /** Consumer channels open (not the publisher's, nor the probes and short-lived ones). */
  channels: number;
  /** Consumers the broker delivers to now (registered, open, not paused). */
  consumers: number;
}

/** A channel several consumers share, on one connection of the pool. */
interface ConsumerChannel {
  connection: PooledConnection;
  channel: Channel | undefined;
  opening: Promise<Channel> | undefined;
  members: Set<OpenConsumer>;
  /** `consumersPerChannel`, or 1 for a consumer that asked for a channel of its own. */
  capacity: number;
  /** basic.qos then basic.consume (and basic.cancel), one at a time: a qos applies to the next consume. */
  ops: Promise<unknown>;
  /**
   * The prefetch the channel's last basic.qos set (global false: it applies to each consumer
   * started after it), so a consumer with the same prefetch needs none of its own.
   */
  qos: { channel: Channel; prefetch: number } | undefined;
}

interface OpenConsumer {
  spec: ConsumerSpec;
  /** The channel it is placed on; undefined until placed, and after its connection is gone. */
  at: ConsumerChannel | undefined;
  /** The consumer's tag while the broker delivers to it; undefined while paused. */
  tag: string | undefined;
  /** Paused by its owner (a full local inbox): the queue is declared, nothing is delivered. */
  paused: boolean;
  /** Re-opens after the server closed its channel or cancelled it: how many in a row, for the backoff. */
  reopenAttempts: number;
  reopenTimer: unknown;
  /** Pause/resume switches, one at a time: each brings the consumer in line with `paused`. */
  switching: Promise<void>;
}

/** Consumers `openAll` opens side by side: enough to keep a connection's probe lanes busy. */
const openAtOnce = 32;

/**
 * The broker actor's consumers, `consumersPerChannel` to a channel and `channelsPerConnection`
 * channels to a connection of the pool, so a gateway's entities are bounded by memory, not by
 * the broker's channel_max (2,047 a connection). Each is declared with its queue, paused and
 * resumed on demand (basic.cancel / basic.consume, its own prefetch), and re-opened with backoff
 * when the server closes its channel or its extra connection while the first stays up (R-H6).
 *
 * Invariant 1 stays loud without taking a shared channel down: measured on RabbitMQ, a second
 * connection declaring an exclusive lock queue gets 405 RESOURCE_LOCKED, an exclusive consume
 * of a queue someone consumes gets 403 ACCESS_REFUSED, and either closes the channel it came on
 * with every consumer on it (a passive declare of the lock is refused the same way; there is no
 * asking without the error). An exclusive queue belongs to the connection, not the channel: a
 * lock declared on another channel of the connection holds after that channel closes. So the
 * lock queue and the queue are declared on the connection's probe channel, and the refusal
 * closes only the probe; the exclusive consume is tried on a short-lived channel first only
 * when the declare-ok counts a consumer already (the one case where it can be refused), then
 * made, flag kept, on the shared channel.
 */
export class BrokerConsumers {
  private readonly entries = new Map<string, OpenConsumer>();
  private readonly channels = new Set<ConsumerChannel>();
  private readonly pool: ConnectionPool;
  /** Bumped on every attach and detach: a re-open timer of an earlier connection does nothing. */
  private generation = 0;

  constructor(private readonly options: BrokerConsumersOptions) {
    this.pool = new ConnectionPool({
      logger: options.logger,
      channelsPerConnection: options.channelsPerConnection,
      open: options.openConnection,
      onLost: (connection, cause) => this.connectionLost(connection, cause),
    });
  }

  get size(): number {
    return this.entries.size;
  }

  usage(): BrokerUsage {
    let consumers = 0;
    for (const entry of this.entries.values()) if (this.consumingEntry(entry)) consumers++;
    let channels = 0;
    for (const at of this.channels) if (at.channel) channels++;
    return { connections: this.pool.size, channels, consumers };
  }

  /** Registers a consumer, opened now if `open` (and on every `openAll`). */
  async add(spec: ConsumerSpec, open: boolean): Promise<void> {
    const entry: OpenConsumer = {
      spec,
      at: undefined,
      tag: undefined,
      paused: spec.paused ?? false,
      reopenAttempts: 0,
      reopenTimer: undefined,
      switching: Promise.resolve(),
    };
    this.entries.set(spec.queue.name, entry);
    if (open && this.pool.attached) await this.open(entry);
  }

  async cancel(queueName: string): Promise<void> {
    const entry = this.entries.get(queueName);
    if (!entry) return;
    this.entries.delete(queueName);
    if (entry.reopenTimer !== undefined) this.options.clock.clearTimeout(entry.reopenTimer);
    // A consume under way ends first, so its tag is known and cancelled here.
    await entry.switching;
    const { at, tag } = entry;
    const channel = at?.channel;
    if (at && channel && tag !== undefined) {
      await this.onChannel(at, () => channel.cancel(tag)).catch((err: unknown) =>
        this.options.logger.debug({ err, queue: queueName }, 'the consumer was cancelled already'),
      );
    }
    this.leave(entry);
  }

  /**
   * Opens every consumer on the broker actor's new connection, `openAtOnce` at a time, those
   * registered meanwhile too; the first that fails rejects.
   */
  async openAll(model: ChannelModel): Promise<void> {
    this.detachAll();
    this.generation++;
    this.pool.attach(model);
    const pending = this.entries.values();
    let failed = false;
    const worker = async () => {
      for (let next = pending.next(); !next.done && !failed; next = pending.next()) {
        await this.open(next.value).catch((err: unknown) => {
          failed = true;
          throw err;
        });
      }
    };
    await Promise.all(Array.from({ length: openAtOnce }, worker));
  }

  /** The connection is gone (or the actor stopping): every consumer's channel with it, and the extra connections are closed. */
  detachAll(): void {
    this.generation++;
    this.pool.detach();
    this.channels.clear();
    for (const entry of this.entries.values()) {
      entry.at = undefined;
      entry.tag = undefined;
      if (entry.reopenTimer !== undefined) this.options.clock.clearTimeout(entry.reopenTimer);
      entry.reopenTimer = undefined;
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
    return entry !== undefined && this.consumingEntry(entry);
  }

  private consumingEntry(entry: OpenConsumer): boolean {
    return entry.at?.channel !== undefined && entry.tag !== undefined;
  }

  /**
   * Brings the consumer in line with `paused` (basic.cancel or basic.consume on its channel),
   * after any switch still under way: a pause that comes while a consume is being set up is
   * applied once it is, never lost, and no second consume is started beside the first.
   */
  private switchConsumer(entry: OpenConsumer): Promise<void> {
    entry.switching = entry.switching.then(async () => {
      const at = entry.at;
      const channel = at?.channel;
      if (!at || !channel) return; // opened (or not) accordingly on the next open
      try {
        if (entry.paused && entry.tag !== undefined) {
          const tag = entry.tag;
          entry.tag = undefined;
          await this.onChannel(at, () => channel.cancel(tag));
        } else if (!entry.paused && entry.tag === undefined) {
          await this.startConsuming(at, channel, entry);
        }
      } catch (err) {
        // The channel went down meanwhile: its re-open follows `paused`.
        this.options.logger.debug({ err, queue: entry.spec.queue.name }, 'could not switch a consumer');
      }
    });
    return entry.switching;
  }

  /** Places the consumer (if it is not), declares its queues and starts it unless paused. */
  private async open(entry: OpenConsumer): Promise<void> {
    const { spec } = entry;
    const at = entry.at ?? (await this.place(entry));
    try {
      const declared = await this.pool.declare(at.connection, spec);
      const channel = await this.channelOf(at);
      if (entry.at !== at) return; // cancelled, or its connection lost, meanwhile
      if (!entry.paused) {
        // Someone consumes it already: the one case an exclusive consume can be refused.
        if (spec.exclusive && declared.consumerCount > 0)
          await this.pool.tryExclusive(at.connection, spec.queue.name);
        // Not through switchConsumer: an exclusive refusal must reach the caller (invariant 1).
        const consuming = entry.switching.then(() =>
          entry.at === at && at.channel === channel && !entry.paused && entry.tag === undefined
            ? this.startConsuming(at, channel, entry)
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
      const code = replyCode(err);
      if (code !== undefined && refusalCodes.has(code)) {
        this.leave(entry);
        throw consumerRefused(this.options.hostId, spec, err as Error);
      }
      if (code === 406) throw queueMismatch(spec, err as Error);
      throw err;
    }
  }

  /**
   * A channel with room for the consumer, on a connection with room for the channel: the
   * pool grows by a connection when every one is full. Placing is synchronous once there is
   * room, so consumers added at once fill one channel before the next is made.
   */
  private async place(entry: OpenConsumer): Promise<ConsumerChannel> {
    const own = entry.spec.ownChannel === true;
    for (;;) {
      // Placed by a call that ran while this one waited for a connection.
      if (entry.at) return entry.at;
      if (!this.pool.attached) throw new Error('the broker connection is gone');
      if (!own) {
        for (const at of this.channels) {
          if (at.members.size < at.capacity && this.pool.has(at.connection)) return this.join(at, entry);
        }
      }
      const connection = this.pool.reserve();
      if (connection) {
        const at: ConsumerChannel = {
          connection,
          channel: undefined,
          opening: undefined,
          members: new Set(),
          capacity: own ? 1 : this.options.consumersPerChannel,
          ops: Promise.resolve(),
          qos: undefined,
        };
        this.channels.add(at);
        return this.join(at, entry);
      }
      await this.pool.grow();
    }
  }

  private join(at: ConsumerChannel, entry: OpenConsumer): ConsumerChannel {
    at.members.add(entry);
    entry.at = at;
    return at;
  }

  /** Takes the consumer off its channel; a channel left empty is closed and given back. */
  private leave(entry: OpenConsumer): void {
    const at = entry.at;
    entry.at = undefined;
    entry.tag = undefined;
    if (!at) return;
    at.members.delete(entry);
    if (at.members.size > 0 || !this.channels.has(at)) return;
    this.channels.delete(at);
    const channel = at.channel;
    at.channel = undefined;
    void closeQuietly(channel, this.options.logger, 'an emptied consumer channel');
    this.pool.release(at.connection);
  }

  /** The shared channel, opened once for all its members. */
  private channelOf(at: ConsumerChannel): Promise<Channel> {
    if (at.channel) return Promise.resolve(at.channel);
    at.opening ??= this.openChannel(at).finally(() => {
      at.opening = undefined;
    });
    return at.opening;
  }

  private async openChannel(at: ConsumerChannel): Promise<Channel> {
    const { logger } = this.options;
    const channel = await at.connection.model.createChannel();
    if (!this.channels.has(at)) {
      void closeQuietly(channel, logger, 'a consumer channel no longer needed');
      throw new Error('the consumer channel was given up while it opened');
    }
    let failure: Error | undefined;
    const queues = () => [...at.members].map((m) => m.spec.queue.name);
    channel.on('error', (err: Error) => {
      failure = err;
      logger.warn(
        { err, queues: queues().slice(0, 10), consumers: at.members.size },
        'broker consumer channel error',
      );
    });
    channel.on('close', () => {
      if (at.channel !== channel) return;
      at.channel = undefined;
      // Only those still placed here: after a reconnect they may be consuming elsewhere.
      for (const member of at.members) if (member.at === at) member.tag = undefined;
      // A connection going down closes its channels first: let its own handler run, then see
      // whether this was the channel alone.
      setImmediate(() => {
        if (!this.channels.has(at) || !this.pool.has(at.connection) || at.channel) return;
        // Closed by the server (a consumer timeout, a queue-level error) while the connection
        // stays up: open its consumers again, or entities would silently stop receiving (R-H6).
        logger.warn(
          { queues: queues().slice(0, 10), consumers: at.members.size, error: failure?.message },
          'the broker closed a consumer channel; re-opening its consumers',
        );
        for (const member of at.members) this.reopenSoon(member, failure);
      });
    });
    at.channel = channel;
    return channel;
  }

  /** Runs a basic.qos/consume/cancel step on the shared channel after the ones before it. */
  private onChannel<T>(at: ConsumerChannel, step: () => Promise<T>): Promise<T> {
    const run = at.ops.then(step);
    // The chain only orders steps: each failure reaches its own caller through `run`.
    at.ops = run.catch(() => undefined);
    return run;
  }

  /** An extra connection died alone: its consumers go to the others (or a new one). */
  private connectionLost(connection: PooledConnection, cause: Error | undefined): void {
    const moved: OpenConsumer[] = [];
    for (const at of [...this.channels]) {
      if (at.connection !== connection) continue;
      this.channels.delete(at);
      at.channel = undefined;
      for (const member of at.members) {
        member.at = undefined;
        member.tag = undefined;
        moved.push(member);
      }
    }
    this.options.logger.warn(
      { connection: connection.index, consumers: moved.length, error: cause?.message },
      'a broker consumer connection closed; re-opening its consumers',
    );
    for (const member of moved) this.reopenSoon(member, cause);
  }

  /** basic.qos for this consumer alone (global false), then its basic.consume, on the shared channel. */
  private async startConsuming(at: ConsumerChannel, channel: Channel, entry: OpenConsumer): Promise<void> {
    const { spec } = entry;
    const { logger } = this.options;
    const queue = spec.queue.name;
    let tag: string | undefined;
    const { consumerTag } = await this.onChannel(at, async () => {
      if (at.qos?.channel !== channel || at.qos.prefetch !== spec.prefetch) {
        await channel.prefetch(spec.prefetch, false);
        at.qos = { channel, prefetch: spec.prefetch };
      }
      return channel.consume(
        queue,
        (message) => {
          if (message === null) {
            // Cancelled by the broker (queue deleted, or a quorum leader moved): open it again,
            // alone; the channel and its other consumers are fine.
            logger.warn({ queue }, 'consumer cancelled by the broker; re-opening');
            if (entry.tag === tag) entry.tag = undefined;
            this.reopenSoon(entry, undefined);
            return;
          }
          const inbound = inboundMessage(channel, message);
          try {
            spec.onMessage(inbound);
          } catch (err) {
            // A handler must never take the consumer down: the queue's DLX takes the message.
            logger.error({ err, queue }, 'message handler failed; rejecting the message');
            inbound.reject();
          }
        },
        { noAck: false, exclusive: spec.exclusive },
      );
    });
    tag = consumerTag;
    entry.tag = consumerTag;
  }

  /**
   * Opens a consumer again after its channel (or its extra connection) closed under it, or the
   * broker cancelled it, with backoff, as long as the broker actor's connection is the one it
   * was on (a lost connection re-opens everything itself).
   */
  private reopenSoon(entry: OpenConsumer, cause: Error | undefined): void {
    const { logger } = this.options;
    const queue = entry.spec.queue.name;
    const generation = this.generation;
    // Also while (re)connecting: a channel closed before `connected` would otherwise stay shut.
    const live = () => this.entries.get(queue) === entry && this.generation === generation;
    if (!live() || entry.reopenTimer !== undefined) return;
    const delay = this.options.backoffMs(entry.reopenAttempts);
    entry.reopenAttempts++;
    logger.debug({ queue, error: cause?.message, inMs: delay }, 're-opening a consumer');
    entry.reopenTimer = this.options.clock.setTimeout(() => {
      entry.reopenTimer = undefined;
      if (!live() || this.consumingEntry(entry)) return;
      this.open(entry).then(
        () => logger.debug({ queue }, 'consumer re-opened'),
        (err: unknown) => {
          if (err instanceof BridgeError && err.code === ErrorCode.consumerRefused) {
            this.options.onFatal(err);
            return;
          }
          logger.warn({ err, queue }, 'could not re-open a consumer; retrying');
          this.reopenSoon(entry, err as Error);
        },
      );
    }, delay);
  }
}
