import amqp, {
  type Channel,
  type ChannelModel,
  type ConfirmChannel,
  type ConsumeMessage,
  type Options,
} from 'amqplib';
import { BrokerNodes, type BrokerNodeView, type NodeChoice } from '../broker/BrokerNodes.js';
import type {
  ConsumerSpec,
  PublishOutcome,
  PublishRequest,
  QueuedMessage,
  TakeDecision,
} from '../broker/brokerMessages.js';
import { closeQuietly } from '../broker/closeQuietly.js';
import { describeBrokerError } from '../broker/describeBrokerError.js';
import { checkSharedTopology } from '../broker/sharedTopology.js';
import { type BrokerTlsSocketOptions, readBrokerTls } from '../config/readBrokerTls.js';
import { type BrokerTlsConfig, redactUri } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import { brokerMachine } from '../machines/brokerMachine.js';
import type { ActorKind } from '../machines/index.js';
import { ActorCell, type RuntimeDeps } from '../runtime/ActorCell.js';
import { brokerActorId } from '../runtime/actorIds.js';
import { BrokerConsumers } from './BrokerConsumers.js';

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
   * before it counts as another gateway's (default 90 s). The holder may be this gateway's own
   * lost connection: an exclusive lock queue lives on one node, and a node that hung or was cut
   * off (not killed: then its peers see it go at once) still holds it until the cluster declares
   * it down, after `net_ticktime` (60 s by default, so 45 to 75 s). Refusals at start never wait.
   */
  lockGraceMs?: number;
  /** Called when the broker refuses something that retrying cannot fix (a second consumer). */
  onFatal: (err: BridgeError) => void;
  /** Called on every connection state change (connected, blocked, backoff, ...). */
  onState?: (state: string) => void;
  /** broker.tls of the config, read for amqps://. */
  tls?: BrokerTlsConfig | undefined;
}

/** The broker actor's kind in the event log. */
const brokerKind: ActorKind = 'broker';

/** How long `status` waits for a queue's depth before it shows it as unknown. */
const queueDepthTimeoutMs = 2_000;

/** The URI with `heartbeat` set, unless the operator set one in it. */
export function withHeartbeat(uri: string, seconds: number): string {
  const url = new URL(uri);
  if (url.searchParams.has('heartbeat')) return uri;
  url.searchParams.set('heartbeat', String(seconds));
  return url.toString();
}

/** See BrokerActorOptions.lockGraceMs: net_ticktime's longest detection (75 s) and a margin. */
const defaultLockGraceMs = 90_000;

/** How long a nack waits to see whether the connection is going down with it. */
const nackSettleMs = 100;

/**
 * The gateway's one connection to the broker. amqplib is used here, in `BrokerConsumers.ts`
 * (its consumers) and in `src/broker/` (declaring a queue; the shared topology's setup and
 * check), nowhere else. It drives
 * the broker connection machine: connects, checks the shared topology, opens a confirm channel
 * for publishing and one channel per exclusive consumer, and on any loss reconnects with
 * backoff and re-declares all of it (R-H5). While not connected, `publish` fails fast: nothing
 * is buffered for the broker. What others need of a queue (its depth, its messages) they get
 * as plain values; no channel leaves this actor.
 */
export class BrokerActor {
  private readonly cell: ActorCell<typeof brokerMachine>;
  private model: ChannelModel | undefined;
  private publisher: ConfirmChannel | undefined;
  private readonly consumers: BrokerConsumers;
  private readonly returned = new Map<string, string>();
  private drained: Promise<void> | undefined;
  private generation = 0;
  private firstAttempt: { resolve: () => void; reject: (err: unknown) => void } | undefined;
  /** CA, client certificate and key, read once at start (BAD_CONFIG if unreadable). */
  private readonly tls: BrokerTlsSocketOptions | undefined;
  private readonly nodes: BrokerNodes;
  /** The node of the connection being opened or open. */
  private node: NodeChoice | undefined;
  /** Until when a consumer refusal is retried, after a working connection was lost. */
  private lockGraceUntil: number | undefined;

  constructor(private readonly options: BrokerActorOptions) {
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
      hostId: options.hostId,
      onFatal: options.onFatal,
      backoffMs: (attempt) =>
        Math.min(this.cell.context.retryMaxMs, this.cell.context.retryBaseMs * 2 ** Math.min(attempt, 10)),
      isLive: (model) => this.model === model && this.cell.state !== 'stopped',
    });
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
    await this.consumers.add(spec, this.connected ? this.model : undefined);
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
  async publish(request: PublishRequest): Promise<PublishOutcome> {
    const publisher = this.publisher;
    if (!publisher || !this.connected) throw this.unavailable();
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
              if (publisher === this.publisher && this.connected) {
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

  /** Messages waiting in a queue, or undefined when it cannot be asked (not connected, no queue). */
  async queueDepth(queueName: string): Promise<number | undefined> {
    const model = this.model;
    if (!model || !this.connected) return undefined;
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
        void closeQuietly(channel, this.options.logger, 'a queue depth channel');
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
        const decision = await take({
          content: message.content,
          routingKey: message.fields.routingKey,
          messageId: message.properties.messageId as string | undefined,
          deliveryTag: message.fields.deliveryTag,
          headers: (message.properties.headers ?? {}) as Record<string, unknown>,
        });
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
              take({
                content: message.content,
                routingKey: message.fields.routingKey,
                messageId: message.properties.messageId as string | undefined,
                deliveryTag: message.fields.deliveryTag,
                headers: (message.properties.headers ?? {}) as Record<string, unknown>,
              }).then((decision) => {
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
    if (!this.model || !this.connected) throw this.unavailable();
    const channel = await this.model.createChannel();
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
      await closeQuietly(channel, this.options.logger, 'a queue operation channel');
    }
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
      model = await amqp.connect(withHeartbeat(uri, this.options.heartbeatSeconds ?? 5), {
        ...(uri.startsWith('amqps://') ? this.tls : undefined),
        timeout: this.options.connectTimeoutMs ?? 10_000,
        // Small frames (confirms, acks) must not wait for Nagle's algorithm.
        noDelay: true,
        clientProperties: { connection_name: `bridge gateway ${hostId}` },
      });
      if (generation !== this.generation) {
        await closeQuietly(model, logger, 'a superseded broker connection');
        return;
      }
      this.model = model;
      model.on('error', (err: Error) => logger.warn({ err }, 'broker connection error'));
      model.on('close', () => this.lost(generation, 'connection closed'));
      model.on('blocked', (reason: string) => this.cell.send({ type: 'broker.blocked', reason }));
      model.on('unblocked', () => this.cell.send({ type: 'broker.unblocked' }));

      const publisher = await model.createConfirmChannel();
      publisher.on('error', (err: Error) => logger.warn({ err }, 'broker publish channel error'));
      publisher.on('close', () => this.lost(generation, 'publish channel closed'));
      publisher.on('return', (message: ConsumeMessage) => {
        const id = message.properties.messageId as string | undefined;
        if (id !== undefined) this.returned.set(id, `no queue is bound to "${message.fields.routingKey}"`);
      });
      await checkSharedTopology(model);
      this.publisher = publisher;

      await this.consumers.openAll(model);
      this.lockGraceUntil = undefined;
      this.nodes.connected(node.index);
      this.cell.send({ type: 'broker.connected', node: redactUri(uri) });
      logger.info(
        { consumers: this.consumers.size, node: redactUri(uri), nodes: this.nodes.size },
        'broker connected; shared topology checked, own queues declared and consumers open',
      );
      this.settleFirstAttempt();
    } catch (err) {
      if (this.isFatal(err) && (this.firstAttempt || !this.mayBeOwnLock(err))) {
        await closeQuietly(model, logger, 'a failed broker connection');
        // At start the caller gets it (and the process exits with it); later it is fatal.
        if (this.firstAttempt) this.settleFirstAttempt(err);
        else this.options.onFatal(err);
        return;
      }
      // Recorded before the connection is closed: its channels' close events would otherwise
      // be taken for the reason (`publish channel closed`), and `bridge status` would show that.
      if (err instanceof BridgeError && err.code === ErrorCode.consumerRefused) {
        logger.warn(
          { err, until: new Date(this.lockGraceUntil ?? 0).toISOString() },
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

  /**
   * What no retry can fix: the broker refusing a consumer (invariant 1), or, at start, a broker
   * nobody has set up (the operator runs `bridge broker setup`, then starts the gateway again).
   */
  private isFatal(err: unknown): err is BridgeError {
    if (!(err instanceof BridgeError)) return false;
    if (err.code === ErrorCode.consumerRefused) return true;
    return err.code === ErrorCode.brokerNotSetUp && this.firstAttempt !== undefined;
  }

  /** A refusal of a queue in use, while the connection that held it may not be gone yet. */
  private mayBeOwnLock(err: BridgeError): boolean {
    return (
      err.code === ErrorCode.consumerRefused &&
      err.retryable &&
      this.lockGraceUntil !== undefined &&
      this.options.clock.now() < this.lockGraceUntil
    );
  }

  private lost(generation: number, error: string): void {
    if (generation !== this.generation) return;
    this.generation++;
    const model = this.model;
    this.model = undefined;
    this.publisher = undefined;
    this.consumers.detachAll();
    void closeQuietly(model, this.options.logger, 'a lost broker connection');
    if (this.cell.state === 'stopped') return;
    const now = this.options.clock.now();
    // A working connection is gone: what it held (its lock queues) may outlive it for a while.
    if (this.nodes.currentNode() !== null && this.lockGraceUntil === undefined) {
      this.lockGraceUntil = now + (this.options.lockGraceMs ?? defaultLockGraceMs);
    }
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
    this.publisher = undefined;
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
