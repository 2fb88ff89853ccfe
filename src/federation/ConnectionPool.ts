import type { Channel, ChannelModel, Replies } from 'amqplib';
import type { Logger } from '../log/logger.js';
import type { ConsumerSpec } from './brokerMessages.js';
import { closeQuietly } from './closeQuietly.js';
import { declareQueue } from './declareQueue.js';

export interface ConnectionPoolOptions {
  logger: Logger;
  /** Consumer channels one connection carries before the pool opens another. */
  channelsPerConnection: number;
  /** Opens the `index`-th connection (2, 3, ...) to the node the first one is on. */
  open(index: number): Promise<ChannelModel>;
  /** An extra connection closed under its consumers while the first stays up. */
  onLost(connection: PooledConnection, cause: Error | undefined): void;
}

/** A channel on which a broker refusal closes nothing but itself. */
interface Probe {
  channel: Channel;
  /** The broker's reason when it closed the channel (it carries the reply code). */
  failure: Error | undefined;
}

/** One probe channel and the declares waiting for it. */
interface ProbeLane {
  probe: Probe | undefined;
  /** Declares on the probe, one at a time, so one refusal fails no other declare with it. */
  chain: Promise<unknown>;
  waiting: number;
}

export interface PooledConnection {
  /** 1 for the broker actor's own connection, 2, 3, ... for the extra ones. */
  readonly index: number;
  readonly model: ChannelModel;
  /** Consumer channels placed on it, open or being opened. */
  channels: number;
  readonly lanes: ProbeLane[];
}

/**
 * Probe channels a connection declares on side by side: a durable inbox's declare and bindings
 * take about 12 ms on a local broker one after another, and 4 lanes nearly triple the rate.
 * 16 (with BrokerConsumers' `openAtOnce` 32) took a restart of 2,000 federated entities from
 * 3.7-4.0 s to 2.8-3.1 s here, and their registration from 220-226/s to 241-314/s (bench scale,
 * alternated); 32 was no better: the broker's own CPU is the limit (~5 ms a fresh inbox).
 */
const probeLanes = 16;

/**
 * The connections the broker actor's consumers run on: its own first, then extra ones to the
 * same node, opened as the consumers need channels (`channelsPerConnection` each) and closed
 * when the first is lost or when they carry nothing any more. Each connection also keeps a
 * probe channel where queues are declared, so a refusal (invariant 1) closes only the probe.
 */
export class ConnectionPool {
  private connections: PooledConnection[] = [];
  private growing: Promise<void> | undefined;
  private generation = 0;

  constructor(private readonly options: ConnectionPoolOptions) {}

  /** Starts a new pool on the broker actor's new connection; any earlier one is detached. */
  attach(main: ChannelModel): void {
    this.detach();
    this.connections = [newConnection(1, main)];
  }

  /** The first connection is gone (or the actor stopping): the extra ones are closed. */
  detach(): void {
    this.generation++;
    const extras = this.connections.slice(1);
    this.connections = [];
    for (const extra of extras)
      void closeQuietly(extra.model, this.options.logger, `the broker consumer connection #${extra.index}`);
  }

  get attached(): boolean {
    return this.connections.length > 0;
  }

  get size(): number {
    return this.connections.length;
  }

  has(connection: PooledConnection): boolean {
    return this.connections.includes(connection);
  }

  /** A connection with room for one more channel, the channel counted on it; none if all are full. */
  reserve(): PooledConnection | undefined {
    const room = this.connections.find((c) => c.channels < this.options.channelsPerConnection);
    if (room) room.channels++;
    return room;
  }

  /** A channel placed by `reserve` is closed: an extra connection left with none is closed. */
  release(connection: PooledConnection): void {
    if (!this.has(connection)) return;
    connection.channels = Math.max(0, connection.channels - 1);
    if (connection.index === 1 || connection.channels > 0) return;
    this.connections = this.connections.filter((c) => c !== connection);
    void closeQuietly(
      connection.model,
      this.options.logger,
      `the idle broker consumer connection #${connection.index}`,
    );
  }

  /** Opens one more connection (callers waiting at once share it). Rejects if the pool is detached. */
  grow(): Promise<void> {
    this.growing ??= this.openOne().finally(() => {
      this.growing = undefined;
    });
    return this.growing;
  }

  /**
   * Declares a consumer's lock queue and queue on the connection's probe channel, and returns
   * the queue's declare-ok (its consumer count). A refusal rejects with the broker's reason
   * (its `code`: 405 for a lock held by another connection) and closes the probe only.
   */
  declare(connection: PooledConnection, spec: ConsumerSpec): Promise<Replies.AssertQueue> {
    const lane = connection.lanes.reduce((a, b) => (b.waiting < a.waiting ? b : a));
    lane.waiting++;
    const run = lane.chain.then(async () => {
      const probe = lane.probe ?? (await this.openProbe(connection, lane));
      try {
        if (spec.lock) await declareQueue(probe.channel, spec.lock);
        return await declareQueue(probe.channel, spec.queue);
      } catch (err) {
        if (lane.probe === probe) lane.probe = undefined;
        void closeQuietly(probe.channel, this.options.logger, 'a broker probe channel');
        throw probe.failure ?? err;
      } finally {
        lane.waiting--;
      }
    });
    // The chain only orders declares: each failure reaches its own caller through `run`.
    lane.chain = run.catch(() => undefined);
    return run;
  }

  /**
   * Tries an exclusive consume of `queue` on a short-lived channel of its own: what the broker
   * refuses (403, someone consumes it) closes that channel only. Whatever it delivered meanwhile
   * goes back to the queue when the channel closes.
   */
  async tryExclusive(connection: PooledConnection, queue: string): Promise<void> {
    const channel = await connection.model.createChannel();
    let failure: Error | undefined;
    channel.on('error', (err: Error) => {
      failure = err;
    });
    try {
      await channel.consume(queue, () => undefined, { noAck: false, exclusive: true });
    } catch (err) {
      throw failure ?? err;
    } finally {
      await closeQuietly(channel, this.options.logger, 'an exclusive probe channel');
    }
  }

  private async openProbe(connection: PooledConnection, lane: ProbeLane): Promise<Probe> {
    const channel = await connection.model.createChannel();
    const probe: Probe = { channel, failure: undefined };
    channel.on('error', (err: Error) => {
      // A refusal: its declare rejects with it, and its caller says it loudly.
      probe.failure = err;
    });
    channel.on('close', () => {
      if (lane.probe === probe) lane.probe = undefined;
    });
    lane.probe = probe;
    return probe;
  }

  private async openOne(): Promise<void> {
    const generation = this.generation;
    if (!this.attached) throw new Error('no broker connection to add a consumer connection to');
    const used = new Set(this.connections.map((c) => c.index));
    let index = 2;
    while (used.has(index)) index++;
    const model = await this.options.open(index);
    if (generation !== this.generation) {
      await closeQuietly(model, this.options.logger, 'a superseded broker consumer connection');
      throw new Error('the broker connection was lost while a consumer connection opened');
    }
    const connection = newConnection(index, model);
    let failure: Error | undefined;
    model.on('error', (err: Error) => {
      failure = err;
      this.options.logger.warn({ err, connection: index }, 'broker consumer connection error');
    });
    model.on('close', () => {
      if (!this.has(connection)) return; // closed by us
      this.connections = this.connections.filter((c) => c !== connection);
      this.options.onLost(connection, failure);
    });
    this.connections.push(connection);
  }
}

function newConnection(index: number, model: ChannelModel): PooledConnection {
  const lanes = Array.from({ length: probeLanes }, () => ({
    probe: undefined,
    chain: Promise.resolve(),
    waiting: 0,
  }));
  return { index, model, channels: 0, lanes };
}
