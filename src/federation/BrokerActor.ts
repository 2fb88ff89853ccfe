import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import { type BrokerTlsSocketOptions, readBrokerTls } from '../config/readBrokerTls.js';
import { type BrokerTlsConfig, redactUri } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import { ActorCell, type RuntimeDeps } from '../kernel/ActorCell.js';
import { brokerMachine } from '../machines/brokerMachine.js';
import type { ActorKind } from '../machines/index.js';
import { brokerActorId } from '../store/actorIds.js';
import { BrokerConsumers, type BrokerUsage } from './BrokerConsumers.js';
import { BrokerNodes, type BrokerNodeView, type NodeChoice } from './BrokerNodes.js';
import { BrokerPublisher } from './BrokerPublisher.js';
import { BrokerQueues } from './BrokerQueues.js';
import type {
  ConsumerSpec,
  PublishOutcome,
  PublishRequest,
  QueuedMessage,
  TakeDecision,
} from './brokerMessages.js';
import { closeQuietly } from './closeQuietly.js';
import { coalesceFrames } from './coalesceFrames.js';
import { describeBrokerError } from './describeBrokerError.js';
import { LockGrace } from './LockGrace.js';
import { checkSharedTopology } from './sharedTopology.js';

export interface BrokerActorOptions extends RuntimeDeps {
  /** The broker's nodes (R-TOP3): connected to one at a time, the next tried when it is lost. */
  uris: readonly string[];
  /** Where in `uris` the first attempt starts; default random, so gateways spread over nodes. */
  firstNode?: number;
  hostId: string;
  retryBaseMs?: number;
  retryMaxMs?: number;
  /**
   * AMQP heartbeat (seconds) asked of the broker unless the URI names one: a link that goes
   * silent (a partition, a dead NAT entry) is noticed after about two missed beats instead of
   * the broker's default of minutes, so remote sends fail fast meanwhile (R-H5). 0: none.
   */
  heartbeatSeconds?: number;
  /** Upper bound on opening the TCP/TLS connection, so a black-holed broker address fails. */
  connectTimeoutMs?: number;
  /**
   * How long after losing a working connection a queue or lock that is "in use" is retried
   * before it counts as another gateway's (default 90 s; see LockGrace). Refusals at start
   * never wait.
   */
  lockGraceMs?: number;
  /**
   * How long a publish waits for the broker's confirm before it fails as BROKER_UNAVAILABLE
   * (default 5 s): a cluster that lost its majority keeps the connection and holds quorum-queue
   * publishes unconfirmed until it is back (see BrokerPublisher).
   */
  confirmTimeoutMs?: number;
  /** Called when the broker refuses something that retrying cannot fix (a second consumer). */
  onFatal: (err: BridgeError) => void;
  /** Called on every connection state change (connected, blocked, backoff, ...). */
  onState?: (state: string) => void;
  /** broker.tls of the config, read for amqps://. */
  tls?: BrokerTlsConfig | undefined;
  /** Consumers that share one channel (default `defaultConsumersPerChannel`). */
  consumersPerChannel?: number;
  /** Consumer channels on one connection before another is opened (default `defaultChannelsPerConnection`). */
  channelsPerConnection?: number;
}

/**
 * Consumers to a channel and consumer channels to a connection: RabbitMQ's channel_max is 2,047
 * a connection and its docs advise 16 to 128 channels a connection, so 10,000 consumers fit on
 * one and further ones open more connections to the same node. A gateway's entities are then
 * bounded by memory (its own and the broker's), not by channel_max.
 */
export const defaultConsumersPerChannel = 100;
export const defaultChannelsPerConnection = 100;

/** The broker actor's kind in the event log. */
const brokerKind: ActorKind = 'broker';

/** The URI with `heartbeat` set, unless the operator set one in it. */
export function withHeartbeat(uri: string, seconds: number): string {
  const url = new URL(uri);
  if (url.searchParams.has('heartbeat')) return uri;
  url.searchParams.set('heartbeat', String(seconds));
  return url.toString();
}

/** See BrokerActorOptions.lockGraceMs: net_ticktime's longest detection (75 s) and a margin. */
const defaultLockGraceMs = 90_000;

/**
 * The gateway's connection to the broker. amqplib is used here, in `BrokerConsumers.ts` and
 * `ConnectionPool.ts` (its consumers, on channels they share, on this connection and extra
 * ones to the same node as they need them), in `BrokerQueues.ts` (one-off queue operations)
 * and in this folder's `declareQueue.ts`, `sharedTopology.ts` and `inboundMessage.ts`
 * (declaring a queue; the shared topology's setup and check; a delivered message's settling),
 * nowhere else. It drives the broker connection machine: connects, checks the shared topology,
 * opens a confirm channel for publishing and the
 * consumers, and on any loss closes the extra connections, reconnects with backoff and
 * re-declares all of it (R-H5). While not connected, `publish` fails fast: nothing
 * is buffered for the broker. What others need of a queue (its depth, its messages) they get
 * as plain values; no channel leaves this actor.
 */
export class BrokerActor {
  private readonly cell: ActorCell<typeof brokerMachine>;
  private model: ChannelModel | undefined;
  private readonly consumers: BrokerConsumers;
  private readonly queues: BrokerQueues;
  private readonly publishing: BrokerPublisher;
  private generation = 0;
  /** When the publish channel was last replaced (renewPublishChannel), or not yet. */
  private renewedAt: number | undefined;
  private renewing = false;
  /** Whether the log already said amqplib could not be made to coalesce its frames. */
  private warnedUncoalesced = false;
  private firstAttempt: { resolve: () => void; reject: (err: unknown) => void } | undefined;
  /** CA, client certificate and key, read once at start (BAD_CONFIG if unreadable). */
  private readonly tls: BrokerTlsSocketOptions | undefined;
  private readonly nodes: BrokerNodes;
  /** The node of the connection being opened or open. */
  private node: NodeChoice | undefined;
  private readonly lockGrace: LockGrace;

  constructor(private readonly options: BrokerActorOptions) {
    this.lockGrace = new LockGrace(options.lockGraceMs ?? defaultLockGraceMs);
    this.tls = readBrokerTls(options.uris.find((uri) => uri.startsWith('amqps://')) ?? '', options.tls);
    this.nodes = new BrokerNodes(options.uris, {
      retryBaseMs: options.retryBaseMs ?? 500,
      retryMaxMs: options.retryMaxMs ?? 15_000,
      start: options.firstNode ?? Math.floor(Math.random() * options.uris.length),
    });
    const machine = brokerMachine.provide({
      actions: {
        openConnection: () => void this.connect(),
        closeConnection: () => void this.disconnect(),
      },
    });
    this.cell = ActorCell.create(
      machine,
      {
        hostId: options.hostId,
        retryBaseMs: options.retryBaseMs ?? 500,
        retryMaxMs: options.retryMaxMs ?? 15_000,
      },
      {
        kind: brokerKind,
        id: brokerActorId(options.hostId, options.hlc.last()),
        traceId: `broker/${options.hostId}`,
        msgId: null,
      },
      options,
    );
    this.cell.onTransition = (t) => this.options.onState?.(t.to);
    this.consumers = new BrokerConsumers({
      logger: options.logger,
      clock: options.clock,
      hostId: options.hostId,
      onFatal: options.onFatal,
      backoffMs: (attempt) =>
        Math.min(this.cell.context.retryMaxMs, this.cell.context.retryBaseMs * 2 ** Math.min(attempt, 10)),
      consumersPerChannel: options.consumersPerChannel ?? defaultConsumersPerChannel,
      channelsPerConnection: options.channelsPerConnection ?? defaultChannelsPerConnection,
      openConnection: (index) => this.openExtra(index),
    });
    this.publishing = new BrokerPublisher(
      () => this.connected,
      (cause) => this.unavailable(cause),
      options.clock,
      options.confirmTimeoutMs,
    );
    this.queues = new BrokerQueues(
      () => (this.connected ? this.model : undefined),
      () => this.unavailable(),
      options.logger,
    );
  }

  /** connected, blocked, connecting, backoff, idle or stopped. */
  get state(): string {
    return this.cell.state;
  }

  get connected(): boolean {
    return this.cell.state === 'connected';
  }

  get lastError(): string | null {
    return this.cell.context.lastError;
  }

  /** The node connected to (without its password), or null. */
  get currentNode(): string | null {
    return this.nodes.currentNode();
  }

  /** Every node with what this gateway knows of it: connected, standby or failing. */
  nodeStates(): BrokerNodeView[] {
    return this.nodes.view();
  }

  /** Connections, consumer channels and consumers this gateway holds on the broker now. */
  usage(): BrokerUsage {
    return this.consumers.usage();
  }

  /** Routing keys whose last publish the broker has not confirmed within the confirm timeout. */
  unconfirmedKeys(): string[] {
    return this.publishing.unconfirmedKeys();
  }

  /**
   * Starts connecting. Resolves after the first attempt, whether it reached the broker or not
   * (the gateway runs without it and keeps retrying); rejects only when the broker refuses a
   * consumer, which no retry can fix.
   */
  start(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.firstAttempt = { resolve, reject };
      this.cell.send({ type: 'broker.connect' });
    });
  }

  async stop(): Promise<void> {
    this.cell.send({ type: 'broker.stop' });
    await this.options.store.batch
      .flush()
      .catch((err: unknown) =>
        this.options.logger.warn({ err }, "could not write the broker actor's last events while stopping"),
      );
    await this.disconnect();
    this.cell.stop();
  }

  /** Registers a consumer: opened now if connected, and again after every reconnect. */
  async consume(spec: ConsumerSpec): Promise<void> {
    await this.consumers.add(spec, this.connected);
  }

  /** Stops consuming a queue (the queue stays). */
  async cancel(queueName: string): Promise<void> {
    await this.consumers.cancel(queueName);
  }

  /**
   * Pauses or resumes delivery from a queue (basic.cancel / basic.consume on its channel): what
   * is not delivered stays ready on the broker, where the queue's cap applies. A message the
   * broker sent before the cancel still arrives. Kept across reconnects.
   */
  async setPaused(queueName: string, paused: boolean): Promise<void> {
    await this.consumers.setPaused(queueName, paused);
  }

  /** Whether the broker delivers from this queue now (registered, open, not paused). */
  consuming(queueName: string): boolean {
    return this.consumers.consuming(queueName);
  }

  /**
   * Publishes on the confirm channel and resolves when the broker has confirmed it (it is
   * then the broker's). Throws BROKER_UNAVAILABLE at once when not connected.
   */
  publish(request: PublishRequest): Promise<PublishOutcome> {
    return this.publishing.publish(request);
  }

  /**
   * Publishes from now on through a new confirm channel on the same connection, and closes the
   * old one once what it has in flight is answered. RabbitMQ 3.10 keeps nacking, on one channel,
   * every publish to a quorum queue whose first publish on that channel came while the queue had
   * no leader (a node holding it was just lost), long after a new leader is elected; a new
   * channel publishes at once. The senders call it when the broker nacks a message for an inbox
   * that is not full. At most one renewal per `minIntervalMs`.
   */
  async renewPublishChannel(minIntervalMs = 1_000): Promise<void> {
    const { model, generation } = this;
    const now = this.options.clock.now();
    if (!model || !this.connected || this.renewing) return;
    if (this.renewedAt !== undefined && now - this.renewedAt < minIntervalMs) return;
    this.renewing = true;
    this.renewedAt = now;
    try {
      const old = this.publishing.current();
      const fresh = await this.openPublishChannel(model, generation);
      if (generation !== this.generation) return;
      this.publishing.attach(fresh);
      this.options.logger.info(
        'publishing on a new channel: the broker nacked a message for an inbox that is not full',
      );
      if (old) this.retire(old);
    } catch (err) {
      this.options.logger.warn(
        { err },
        'could not open a new publish channel; publishing goes on on the old one',
      );
    } finally {
      this.renewing = false;
    }
  }

  /** A confirm channel for publishing; its close is the connection's loss only while it publishes. */
  private async openPublishChannel(model: ChannelModel, generation: number): Promise<ConfirmChannel> {
    const { logger } = this.options;
    const publisher = await model.createConfirmChannel();
    publisher.on('error', (err: Error) => logger.warn({ err }, 'broker publish channel error'));
    publisher.on('close', () => {
      if (this.publishing.current() === publisher) this.lost(generation, 'publish channel closed');
    });
    this.publishing.watchReturns(publisher);
    return publisher;
  }

  /** Closes a replaced publish channel once its publishes are answered (or time out). */
  private retire(channel: ConfirmChannel): void {
    const { clock, logger } = this.options;
    const close = () => void closeQuietly(channel, logger, 'a replaced publish channel');
    const timer = clock.setTimeout(close, this.options.confirmTimeoutMs ?? 5_000);
    void channel
      .waitForConfirms()
      .catch(() => undefined) // a nack among them: answered all the same
      .then(() => {
        clock.clearTimeout(timer);
        close();
      });
  }

  /** Messages waiting in a queue, or undefined when it cannot be asked (not connected, no queue). */
  queueDepth(queueName: string): Promise<number | undefined> {
    return this.queues.depth(queueName);
  }

  /** Up to `max` messages of a queue, left in it: they go back when the reading channel closes. */
  peek(queueName: string, max: number): Promise<QueuedMessage[]> {
    return this.queues.peek(queueName, max);
  }

  /** See `BrokerQueues.takeEach`. */
  takeEach(
    queueName: string,
    max: number | 'queued',
    take: (message: QueuedMessage) => Promise<TakeDecision>,
  ): Promise<void> {
    return this.queues.takeEach(queueName, max, take);
  }

  /** See `BrokerQueues.consumeEach` (a quorum inbox, where basic.get is refused). */
  consumeEach(
    queueName: string,
    take: (message: QueuedMessage) => Promise<TakeDecision>,
    idleMs?: number,
  ): Promise<void> {
    return this.queues.consumeEach(queueName, take, idleMs);
  }

  /** Deletes a queue (with `ifEmpty`, only if nothing is ready in it). */
  deleteQueue(queueName: string, options: { ifEmpty?: boolean } = {}): Promise<void> {
    return this.queues.deleteQueue(queueName, options);
  }

  private unavailable(cause?: unknown): BridgeError {
    const why = this.lastError ? ` (${this.lastError})` : '';
    return new BridgeError(
      ErrorCode.brokerUnavailable,
      `the broker is unreachable${why}: remote sends fail until it is back (same-host messages still flow); retry later`,
      { retryable: true, cause },
    );
  }

  private async connect(): Promise<void> {
    const generation = ++this.generation;
    const { logger, hostId, clock } = this.options;
    const node = this.nodes.next(clock.now());
    this.node = node;
    const { uri } = node;
    let model: ChannelModel | undefined;
    try {
      model = await this.dial(uri, `bridge gateway ${hostId}`);
      if (generation !== this.generation) {
        await closeQuietly(model, logger, 'a superseded broker connection');
        return;
      }
      this.model = model;
      model.on('error', (err: Error) => logger.warn({ err }, 'broker connection error'));
      model.on('close', () => this.lost(generation, 'connection closed'));
      model.on('blocked', (reason: string) => this.cell.send({ type: 'broker.blocked', reason }));
      model.on('unblocked', () => this.cell.send({ type: 'broker.unblocked' }));

      const publisher = await this.openPublishChannel(model, generation);
      await checkSharedTopology(model);
      this.publishing.attach(publisher);

      await this.consumers.openAll(model);
      this.lockGrace.connected();
      this.nodes.connected(node.index);
      this.cell.send({ type: 'broker.connected', node: redactUri(uri) });
      logger.info(
        { consumers: this.consumers.size, node: redactUri(uri), nodes: this.nodes.size },
        'broker connected; shared topology checked, own queues declared and consumers open',
      );
      this.settleFirstAttempt();
    } catch (err) {
      if (generation === this.generation) this.consumers.detachAll();
      const now = this.options.clock.now();
      if (this.isFatal(err) && (this.firstAttempt || !this.lockGrace.mayBeOwn(err, now))) {
        await closeQuietly(model, logger, 'a failed broker connection');
        // At start the caller gets it (and the process exits with it); later it is fatal.
        if (this.firstAttempt) this.settleFirstAttempt(err);
        else this.options.onFatal(err);
        return;
      }
      // Recorded before the connection is closed: its channels' close events would otherwise
      // be taken for the reason (`publish channel closed`), and `agentbridge status` would show that.
      if (err instanceof BridgeError && err.code === ErrorCode.consumerRefused) {
        logger.warn(
          { err, until: new Date(this.lockGrace.deadline ?? now).toISOString() },
          `${err.message}. It may still be held by this gateway's lost connection, on a node the ` +
            'cluster has not yet declared down; retrying until then, refusing for good after',
        );
        this.lost(generation, err.message);
      } else if (err instanceof BridgeError) {
        // The operator can fix it while the gateway runs (set up the topology): keep retrying.
        logger.error({ err }, `${err.message}; retrying with backoff`);
        this.lost(generation, err.message);
      } else {
        const { message, needsOperator } = describeBrokerError(err);
        logger[needsOperator ? 'error' : 'warn'](
          { err, reason: message },
          `broker connection attempt failed: ${message}; retrying with backoff`,
        );
        this.lost(generation, message);
      }
      await closeQuietly(model, logger, 'a failed broker connection');
      this.settleFirstAttempt();
    }
  }

  private async dial(uri: string, name: string): Promise<ChannelModel> {
    const model = await amqp.connect(withHeartbeat(uri, this.options.heartbeatSeconds ?? 5), {
      ...(uri.startsWith('amqps://') ? this.tls : undefined),
      timeout: this.options.connectTimeoutMs ?? 10_000,
      // Small frames (confirms, acks) must not wait for Nagle's algorithm...
      noDelay: true,
      clientProperties: { connection_name: name },
    });
    // ...and the frames ready at once leave in one write, not one each.
    if (!coalesceFrames(model) && !this.warnedUncoalesced) {
      this.warnedUncoalesced = true;
      this.options.logger.warn(
        'this amqplib is not shaped as bridge expects: each AMQP frame gets a socket write of its own (slower, still correct)',
      );
    }
    return model;
  }

  /** An extra connection for consumers, to the node the actor's own connection is on. */
  private async openExtra(index: number): Promise<ChannelModel> {
    const node = this.node;
    if (!node || !this.model) throw this.unavailable();
    const model = await this.dial(node.uri, `bridge gateway ${this.options.hostId} #${index}`);
    model.on('blocked', (reason: string) =>
      this.options.logger.warn({ reason, connection: index }, 'the broker blocked a consumer connection'),
    );
    return model;
  }

  /**
   * What no retry can fix: the broker refusing a consumer (invariant 1), or, at start, a broker
   * nobody has set up (the operator runs `agentbridge broker setup`, then starts the gateway again).
   */
  private isFatal(err: unknown): err is BridgeError {
    if (!(err instanceof BridgeError)) return false;
    if (err.code === ErrorCode.consumerRefused) return true;
    return err.code === ErrorCode.brokerNotSetUp && this.firstAttempt !== undefined;
  }

  private lost(generation: number, error: string): void {
    if (generation !== this.generation) return;
    this.generation++;
    const model = this.model;
    this.model = undefined;
    this.publishing.detach();
    this.consumers.detachAll();
    void closeQuietly(model, this.options.logger, 'a lost broker connection');
    if (this.cell.state === 'stopped') return;
    const now = this.options.clock.now();
    // A working connection is gone: what it held (its lock queues) may outlive it for a while.
    if (this.nodes.currentNode() !== null) this.lockGrace.lost(now);
    const node = this.node;
    if (node) this.nodes.failed(node.index, error, now);
    const next = this.nodes.next(now);
    this.options.logger.warn(
      { error, node: node && redactUri(node.uri), next: redactUri(next.uri), retryInMs: next.waitMs },
      this.nodes.size > 1
        ? 'broker node lost; connecting to the next one'
        : 'broker connection lost; reconnecting with backoff',
    );
    this.cell.send({ type: 'broker.lost', error, retryInMs: next.waitMs });
  }

  private async disconnect(): Promise<void> {
    this.generation++;
    const model = this.model;
    this.model = undefined;
    this.publishing.detach();
    this.consumers.detachAll();
    await closeQuietly(model, this.options.logger, 'the broker connection');
  }

  private settleFirstAttempt(err?: unknown): void {
    const first = this.firstAttempt;
    this.firstAttempt = undefined;
    if (!first) return;
    if (err) first.reject(err);
    else first.resolve();
  }
}
