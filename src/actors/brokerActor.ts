import amqp, {
  type Channel,
  type ChannelModel,
  type ConfirmChannel,
  type ConsumeMessage,
  type Options,
} from 'amqplib';
import { describeBrokerError } from '../broker/describeBrokerError.js';
import { dlqSpec, legacyControlExchange, type QueueSpec, sharedExchanges } from '../broker/topology.js';
import { type BrokerTlsSocketOptions, readBrokerTls } from '../config/readBrokerTls.js';
import type { BrokerTlsConfig } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import { brokerMachine } from '../machines/brokerMachine.js';
import type { ActorKind } from '../machines/index.js';
import { ActorCell, type RuntimeDeps } from '../runtime/actorCell.js';

/** A channel of the broker connection, for operator tooling run through `withChannel`. */
export type BrokerChannel = Channel;

/** One message to publish. `mandatory` makes an unroutable message an error (invariant 2). */
export interface PublishRequest {
  exchange: string;
  routingKey: string;
  content: Buffer;
  messageId: string;
  mandatory: boolean;
  persistent: boolean;
  /** Per-message TTL (ms); the broker dead-letters it as expired at the queue head. */
  expirationMs?: number | undefined;
  headers?: Record<string, string | number | boolean> | undefined;
}

/** How a confirmed publish ended. Expected outcomes are values, not exceptions. */
export type PublishOutcome =
  | { ok: true }
  | { ok: false; reason: 'unroutable'; detail: string }
  | { ok: false; reason: 'rejected'; detail: string };

/** A received message with its ack bound to the channel it came on. */
export interface InboundMessage {
  readonly content: Buffer;
  readonly exchange: string;
  readonly routingKey: string;
  readonly messageId: string | undefined;
  readonly redelivered: boolean;
  readonly headers: Record<string, unknown>;
  /** Acks on the channel it arrived on; a no-op once that channel is gone (it will be redelivered). */
  ack(): void;
  /** Rejects without requeue: the queue's dead-letter exchange takes it. */
  reject(): void;
}

export interface ConsumerSpec {
  queue: QueueSpec;
  /** Quorum mode: an exclusive lock queue declared first, so a second gateway fails loudly. */
  lock?: QueueSpec | undefined;
  prefetch: number;
  exclusive: boolean;
  /** Start paused (see `setPaused`): the queue is declared, nothing is delivered yet. */
  paused?: boolean | undefined;
  onMessage(message: InboundMessage): void;
}

export interface BrokerActorOptions extends RuntimeDeps {
  uri: string;
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
  /** Called when the broker refuses something that retrying cannot fix (a second consumer). */
  onFatal: (err: BridgeError) => void;
  /** Called on every connection state change (connected, blocked, backoff, ...). */
  onState?: (state: string) => void;
  /** The gateway's config (Federation passes its deps along): `broker.tls` is read from it for amqps://. */
  config?: { broker: { tls?: BrokerTlsConfig | undefined } } | undefined;
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

/** How long a nack waits to see whether the connection is going down with it. */
const nackSettleMs = 100;

/** Broker replies that mean "someone else holds this": retrying does not help (invariant 1). */
const refusalCodes = new Set([403, 405]);

/**
 * The only code that touches amqplib. It drives the broker connection machine: connects,
 * declares the shared topology, opens a confirm channel for publishing and one channel per
 * exclusive consumer, and on any loss reconnects with backoff and re-declares all of it
 * (R-H5). While not connected, `publish` fails fast: nothing is buffered for the broker.
 */
export class BrokerActor {
  private readonly cell: ActorCell<typeof brokerMachine>;
  private model: ChannelModel | undefined;
  private publisher: ConfirmChannel | undefined;
  private readonly consumers = new Map<string, OpenConsumer>();
  private readonly returned = new Map<string, string>();
  private drained: Promise<void> | undefined;
  private generation = 0;
  private firstAttempt: { resolve: () => void; reject: (err: unknown) => void } | undefined;
  /** CA, client certificate and key, read once at start (BAD_CONFIG if unreadable). */
  private readonly tls: BrokerTlsSocketOptions | undefined;

  constructor(private readonly options: BrokerActorOptions) {
    this.tls = readBrokerTls(options.uri, options.config?.broker.tls);
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
        id: `${options.hostId}/${options.hlc.last()}`,
        traceId: `broker/${options.hostId}`,
        msgId: null,
      },
      options,
    );
    this.cell.onTransition = (t) => this.options.onState?.(t.to);
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
    await this.options.store.batch.flush().catch(() => {});
    await this.disconnect();
    this.cell.stop();
  }

  /** Registers a consumer: opened now if connected, and again after every reconnect. */
  async consume(spec: ConsumerSpec): Promise<void> {
    const entry: OpenConsumer = {
      spec,
      channel: undefined,
      tag: undefined,
      paused: spec.paused ?? false,
      reopenAttempts: 0,
      reopenTimer: undefined,
      switching: Promise.resolve(),
    };
    this.consumers.set(spec.queue.name, entry);
    if (this.model && this.connected) await this.openConsumer(this.model, entry);
  }

  /** Stops consuming a queue; with `deleteQueue`, removes it (its messages dead-letter only if the caller moved them). */
  async cancel(queueName: string, options: { deleteQueue?: boolean } = {}): Promise<void> {
    const entry = this.consumers.get(queueName);
    this.consumers.delete(queueName);
    if (entry?.reopenTimer) clearTimeout(entry.reopenTimer);
    await entry?.channel?.close().catch(() => {});
    if (options.deleteQueue && this.publisher) await this.publisher.deleteQueue(queueName).catch(() => {});
  }

  /**
   * Pauses or resumes delivery from a queue (basic.cancel / basic.consume on its channel): what
   * is not delivered stays ready on the broker, where the queue's cap applies. A message the
   * broker sent before the cancel still arrives. Kept across reconnects.
   */
  async setPaused(queueName: string, paused: boolean): Promise<void> {
    const entry = this.consumers.get(queueName);
    if (!entry || entry.paused === paused) return;
    entry.paused = paused;
    await this.switchConsumer(entry);
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

  /** Whether the broker delivers from this queue now (registered, open, not paused). */
  consuming(queueName: string): boolean {
    const entry = this.consumers.get(queueName);
    return entry?.channel !== undefined && entry.tag !== undefined;
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
          else if (err && (err as Error).message === 'message nacked') {
            // The broker refused it: a full inbox (reject-publish), or the broker going down,
            // which nacks what it holds and then closes. Tell the two apart by waiting a beat.
            setTimeout(() => {
              if (publisher === this.publisher && this.connected) {
                resolve({ ok: false, reason: 'rejected', detail: 'the broker nacked the publish' });
              } else reject(this.unavailable(err));
            }, nackSettleMs).unref();
          } else if (err) reject(this.unavailable(err));
          else resolve({ ok: true });
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
        channel.on('error', () => {});
        const info = await channel.checkQueue(queueName);
        return info.messageCount;
      } catch {
        return undefined;
      } finally {
        void channel?.close().catch(() => {});
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

  /**
   * Runs `fn` with a fresh channel of its own (operator tooling: reading the DLQ). The channel
   * closes afterwards, which requeues whatever `fn` got and did not ack.
   */
  async withChannel<T>(fn: (channel: Channel) => Promise<T>): Promise<T> {
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
      await channel.close().catch(() => {});
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
    const { logger, uri, hostId } = this.options;
    let model: ChannelModel | undefined;
    try {
      model = await amqp.connect(withHeartbeat(uri, this.options.heartbeatSeconds ?? 5), {
        ...this.tls,
        timeout: this.options.connectTimeoutMs ?? 10_000,
        // Small frames (confirms, acks) must not wait for Nagle's algorithm.
        noDelay: true,
        clientProperties: { connection_name: `bridge gateway ${hostId}` },
      });
      if (generation !== this.generation) {
        await model.close().catch(() => {});
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

      for (const entry of this.consumers.values()) await this.openConsumer(model, entry);
      this.cell.send({ type: 'broker.connected' });
      logger.info(
        { consumers: this.consumers.size },
        'broker connected; shared topology checked, own queues declared and consumers open',
      );
      this.settleFirstAttempt();
    } catch (err) {
      if (err instanceof BridgeError && err.retryable && !this.firstAttempt) {
        // The operator can fix it while the gateway runs (set up the topology): keep retrying.
        logger.error({ err }, `${err.message}; retrying with backoff`);
        await model?.close().catch(() => {});
        this.lost(generation, err.message);
        return;
      }
      if (err instanceof BridgeError) {
        // A refusal no retry can fix (or, at start, a broker nobody has set up): stop loudly.
        await model?.close().catch(() => {});
        // At start the caller gets it (and the process exits with it); later it is fatal.
        if (this.firstAttempt) this.settleFirstAttempt(err);
        else this.options.onFatal(err);
        return;
      }
      const { message, needsOperator } = describeBrokerError(err);
      logger[needsOperator ? 'error' : 'warn'](
        { err, reason: message },
        `broker connection attempt failed: ${message}; retrying with backoff`,
      );
      await model?.close().catch(() => {});
      this.lost(generation, message);
      this.settleFirstAttempt();
    }
  }

  private async openConsumer(model: ChannelModel, entry: OpenConsumer): Promise<void> {
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
      void channel.close().catch(() => {});
      const code = (err as { code?: number }).code ?? (failure as { code?: number } | undefined)?.code;
      if (code !== undefined && refusalCodes.has(code)) {
        const denied = /refused for user/.test((err as Error).message);
        throw new BridgeError(
          ErrorCode.consumerRefused,
          `the broker refused to let this gateway consume ${spec.queue.name}: ${(err as Error).message}. ` +
            (denied
              ? "This gateway's broker login has no permission on this queue (R-H2); grant it with " +
                `\`bridge broker provision ${this.options.hostId} --apply\` (re-run after registering entities)`
              : 'Another gateway already consumes this inbox (invariant 1: one consumer per inbox); ' +
                'stop that gateway, or give this one a different BRIDGE_HOME and entities'),
          { cause: err },
        );
      }
      throw err;
    }
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
          void channel.close().catch(() => {});
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
    const live = () =>
      this.consumers.get(queue) === entry && this.model === model && this.cell.state !== 'stopped';
    if (!live() || entry.reopenTimer) return;
    const delay = Math.min(
      this.cell.context.retryMaxMs,
      this.cell.context.retryBaseMs * 2 ** Math.min(entry.reopenAttempts, 10),
    );
    entry.reopenAttempts++;
    logger.warn(
      { queue, error: cause?.message, inMs: delay },
      'the broker closed a consumer channel; re-opening the consumer',
    );
    entry.reopenTimer = setTimeout(() => {
      entry.reopenTimer = undefined;
      if (!live() || entry.channel) return;
      this.openConsumer(model, entry).then(
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

  private lost(generation: number, error: string): void {
    if (generation !== this.generation) return;
    this.generation++;
    const model = this.model;
    this.model = undefined;
    this.publisher = undefined;
    for (const entry of this.consumers.values()) {
      entry.channel = undefined;
      entry.tag = undefined;
    }
    void model?.close().catch(() => {});
    if (this.cell.state === 'stopped') return;
    this.options.logger.warn({ error }, 'broker connection lost; reconnecting with backoff');
    this.cell.send({ type: 'broker.lost', error });
  }

  private async disconnect(): Promise<void> {
    this.generation++;
    const model = this.model;
    this.model = undefined;
    this.publisher = undefined;
    await model?.close().catch(() => {});
  }

  private settleFirstAttempt(err?: unknown): void {
    const first = this.firstAttempt;
    this.firstAttempt = undefined;
    if (!first) return;
    if (err) first.reject(err);
    else first.resolve();
  }
}

/** Where to connect, for the operator's one-off commands (`bridge broker setup`). */
export interface OperatorConnectOptions {
  uri: string;
  tls?: BrokerTlsConfig | undefined;
  connectTimeoutMs?: number | undefined;
}

export interface SetupReport {
  exchanges: { name: string; type: string }[];
  queue: string;
  /** Whether the direct `bridge.control` of earlier releases is still on the broker. */
  legacyControl: 'present' | 'deleted' | 'absent';
}

/**
 * Declares the shared topology of SPEC §4 (the exchanges, `bridge.dlq` bound to `bridge.dlx`)
 * as the operator, once per broker (idempotent). Gateways only check it: their logins may not
 * configure shared names. An exchange that exists with another type is a 406 from the broker,
 * turned into an error that says what to do.
 */
export async function setupSharedTopology(
  options: OperatorConnectOptions & { deleteLegacy?: boolean },
): Promise<SetupReport> {
  const model = await amqp.connect(options.uri, {
    ...readBrokerTls(options.uri, options.tls),
    timeout: options.connectTimeoutMs ?? 10_000,
    clientProperties: { connection_name: 'bridge broker setup' },
  });
  model.on('error', () => {
    // The failing operation rejects with the same error; nothing more to tell.
  });
  try {
    for (const exchange of sharedExchanges) {
      await onChannel(model, (channel) =>
        channel.assertExchange(exchange.name, exchange.type, { durable: exchange.durable }),
      ).catch((err: unknown) => {
        throw setupError(err, `declaring exchange ${exchange.name} (${exchange.type})`);
      });
    }
    await onChannel(model, (channel) => declareQueue(channel, dlqSpec)).catch((err: unknown) => {
      throw setupError(err, `declaring ${dlqSpec.name} bound to ${dlqSpec.bindings[0]?.exchange}`);
    });
    const legacy = await onChannel(model, (channel) => channel.checkExchange(legacyControlExchange)).then(
      () => true,
      () => false,
    );
    if (legacy && options.deleteLegacy) {
      await onChannel(model, (channel) => channel.deleteExchange(legacyControlExchange)).catch(
        (err: unknown) => {
          throw setupError(err, `deleting the legacy exchange ${legacyControlExchange}`);
        },
      );
    }
    return {
      exchanges: sharedExchanges.map((e) => ({ name: e.name, type: e.type })),
      queue: dlqSpec.name,
      legacyControl: legacy ? (options.deleteLegacy ? 'deleted' : 'present') : 'absent',
    };
  } finally {
    await model.close().catch(() => {});
  }
}

/**
 * Checks passively that the shared topology is there (a passive declare needs no permission),
 * each on a channel of its own since a missing one closes the channel with 404. Missing is
 * an error that says to run `bridge broker setup`, retryable: the operator can fix it.
 */
async function checkSharedTopology(model: ChannelModel): Promise<void> {
  const missing: string[] = [];
  for (const exchange of sharedExchanges) {
    await onChannel(model, (channel) => channel.checkExchange(exchange.name)).catch((err: unknown) => {
      if ((err as { code?: number }).code !== 404) throw err;
      missing.push(`exchange ${exchange.name}`);
    });
  }
  await onChannel(model, (channel) => channel.checkQueue(dlqSpec.name)).catch((err: unknown) => {
    if ((err as { code?: number }).code !== 404) throw err;
    missing.push(`queue ${dlqSpec.name}`);
  });
  if (missing.length > 0) {
    throw new BridgeError(
      ErrorCode.brokerNotSetUp,
      `the broker lacks the shared topology (${missing.join(', ')}): run \`bridge broker setup\` once as ` +
        'the broker operator (a login that may configure bridge.*), then start the gateway again',
      { retryable: true },
    );
  }
}

/** Runs `fn` on a fresh channel, closed afterwards (a failed operation has closed it already). */
async function onChannel<T>(model: ChannelModel, fn: (channel: Channel) => Promise<T>): Promise<T> {
  const channel = await model.createChannel();
  channel.on('error', () => {
    // The operation's promise rejects with this error; the caller handles it there.
  });
  try {
    return await fn(channel);
  } finally {
    await channel.close().catch(() => {
      // Already closed by the broker's error.
    });
  }
}

function setupError(err: unknown, what: string): BridgeError {
  const code = (err as { code?: number }).code;
  const hint =
    code === 406
      ? '; it exists with other settings (another release or application made it): move what it holds and ' +
        'delete it, or give this deployment its own vhost'
      : code === 403
        ? '; this login may not configure bridge.* resources: run setup with the operator (administrator) login'
        : '';
  return new BridgeError(
    ErrorCode.brokerNotSetUp,
    `bridge broker setup failed ${what}: ${(err as Error).message}${hint}`,
    { cause: err },
  );
}

async function declareQueue(channel: Channel, spec: QueueSpec): Promise<void> {
  await channel.assertQueue(spec.name, {
    durable: spec.durable,
    exclusive: spec.exclusive,
    autoDelete: spec.autoDelete,
    arguments: spec.arguments,
  });
  for (const binding of spec.bindings) await channel.bindQueue(spec.name, binding.exchange, binding.key);
  for (const binding of spec.unbindings ?? [])
    await channel.unbindQueue(spec.name, binding.exchange, binding.key);
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
