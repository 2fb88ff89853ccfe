import { randomBytes, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { dlqName, inboxName } from '../broker/topology.js';
import { type Clock, systemClock } from '../clock/clock.js';
import { createHlc, type Hlc } from '../clock/hlc.js';
import type { Config } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { PaneInjector, PaneTarget } from '../inject/paneInjector.js';
import type { Logger } from '../log/logger.js';
import { deliveryMachine } from '../machines/deliveryMachine.js';
import { createMetrics, type Metrics } from '../metrics/metrics.js';
import { ActorCell, type RuntimeDeps } from '../runtime/actorCell.js';
import { type GatewayKeys, initKeys, loadKeys } from '../security/keys.js';
import { createNoSigner, createSigner, type Signer } from '../security/messageSigning.js';
import { listTrust, TrustStore } from '../security/trustStore.js';
import { countActorsByState, readLiveActors } from '../store/actorHeads.js';
import { type EntityRecord, insertEntity, readEntities } from '../store/entities.js';
import { openStore, type Store } from '../store/openStore.js';
import { readActorEvents, readLastHlc } from '../store/readEvents.js';
import { type Address, type EntityKind, type Envelope, entityNamePattern } from '../wire/envelope.js';
import { Directory, hashToken } from './directory.js';
import { deliveryKind, EntityActor, type EntityActorDeps, type Handover } from './entityActor.js';
import { type DeadLetterView, Federation } from './federation.js';
import {
  addressOf,
  type BroadcastRequest,
  type BroadcastResult,
  Router,
  type SendRequest,
  type SendResult,
} from './router.js';

export interface GatewayOptions {
  config: Config;
  logger: Logger;
  clock?: Clock;
  createInjector: (pane: PaneTarget) => PaneInjector;
  /** Checks a pane exists before an entity is registered with it; throws a BridgeError if not. */
  checkPane?: (pane: PaneTarget) => Promise<void>;
  /** Called when the gateway can no longer trust its own state (a failed commit, a refused inbox). */
  onFatal?: (err: unknown) => void;
}

export interface RegisterRequest {
  kind: EntityKind;
  name: string;
  groups?: string[] | undefined;
  pane?: PaneTarget | undefined;
}

export interface Registration {
  gid: string;
  token: string;
  name: string;
  host: string;
  kind: EntityKind;
}

export interface RosterEntry extends Address {
  groups: string[];
  status: string;
  /** Queued messages, known for local entities only. */
  depth?: number;
}

export interface SendOptions extends SendRequest {
  /** How long to hold the call open for the first reply (R-DL3); 0 returns at once. */
  waitMs?: number | undefined;
}

export interface SendOutcome extends SendResult {
  /** The reply that resolved an open send, if one came in time. */
  reply?: Envelope | null;
  /** That reply's handover: confirm it once the caller has the reply (see Handover). */
  handover?: Handover;
}

/**
 * The gateway supervisor: opens the event log, rebuilds every live actor from it, and owns
 * the local entities, the router and the metrics. Interfaces (MCP, admin socket) call it.
 */
export class Gateway {
  readonly config: Config;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly directory: Directory;
  readonly startedAt: number;
  private readonly clock: Clock;
  private store!: Store;
  private hlc!: Hlc;
  private router!: Router;
  private deps!: RuntimeDeps;
  private entityDeps!: EntityActorDeps;
  private federation: Federation | undefined;
  private stopping = false;

  constructor(private readonly options: GatewayOptions) {
    this.config = options.config;
    this.logger = options.logger;
    this.clock = options.clock ?? systemClock;
    this.startedAt = this.clock.now();
    this.directory = new Directory(this.config.hostId);
    this.metrics = createMetrics(() => [...this.directory.all()].map((e) => [e.record.name, e.depth]));
  }

  get host(): string {
    return this.config.hostId;
  }

  get storeFile(): string {
    return this.store.file;
  }

  /**
   * Opens the log, rebuilds every entity and undelivered message from it, then (federated)
   * connects to the broker. Rejects if the broker refuses one of this gateway's inboxes.
   */
  async start(): Promise<void> {
    const { config, logger } = this;
    this.store = openStore({
      file: join(config.home, 'events.db'),
      synchronous: config.store.synchronous,
      onWriteFailure: (err) => {
        logger.fatal({ err }, 'event log write failed; stopping so a restart can rebuild from the log');
        this.options.onFatal?.(err);
      },
    });
    this.hlc = createHlc(() => this.clock.now(), readLastHlc(this.store));
    this.deps = { store: this.store, hlc: this.hlc, clock: this.clock, host: this.host, logger };
    const deps = this.deps;
    if (config.broker.uri) {
      this.federation = new Federation({
        ...deps,
        signer: this.createSigner(),
        config,
        metrics: this.metrics,
        localEntities: () => this.directory.all(),
        findLocal: (gid) => this.directory.byGidOrUndefined(gid),
        onFatal: (err) => {
          logger.fatal({ err }, err.message);
          this.options.onFatal?.(err);
        },
      });
    }
    this.entityDeps = {
      ...deps,
      config,
      metrics: this.metrics,
      createInjector: this.options.createInjector,
      deadLetters: this.federation,
    };
    this.router = new Router({
      ...deps,
      config,
      metrics: this.metrics,
      directory: this.directory,
      federation: this.federation,
    });

    for (const record of readEntities(this.store)) {
      const entity = EntityActor.rehydrate(record, this.entityDeps);
      this.directory.add(entity);
      entity.start();
    }
    let resumed = 0;
    for (const head of readLiveActors(this.store, deliveryKind)) {
      const owner = head.owner === null ? undefined : this.directory.byGidOrUndefined(head.owner);
      const msgId = head.actorId.slice(0, head.actorId.indexOf('/'));
      if (owner) owner.rehydrateDelivery(msgId, head.traceId);
      else this.deadLetterOrphan(head.actorId, msgId, head.traceId, head.owner);
      resumed++;
    }
    logger.info(
      { entities: this.directory.size, resumedDeliveries: resumed, store: this.store.file },
      'gateway started',
    );
    await this.federation?.start();
  }

  async stop(): Promise<void> {
    if (this.stopping || !this.store) return;
    this.stopping = true;
    await this.federation?.stop();
    await Promise.all([...this.directory.all()].map((entity) => entity.stop()));
    try {
      await this.store.batch.flush();
    } finally {
      await this.store.close();
    }
  }

  /** Registers a local entity and returns its capability token (shown once, stored hashed). */
  async register(request: RegisterRequest): Promise<Registration> {
    this.assertRunning();
    if (!entityNamePattern.test(request.name)) {
      throw new BridgeError(
        ErrorCode.badRequest,
        `bad name "${request.name}": use 1-64 letters, digits, ".", "_" or "-", starting with a letter or digit`,
      );
    }
    if (this.directory.hasName(request.name)) {
      throw new BridgeError(
        ErrorCode.nameTaken,
        `an entity named "${request.name}" is already registered on ${this.host}; pick another name`,
      );
    }
    if (request.pane && this.options.checkPane) await this.options.checkPane(request.pane);
    const token = `brt_${randomBytes(24).toString('base64url')}`;
    const record: EntityRecord = {
      gid: randomUUID(),
      name: request.name,
      kind: request.kind,
      groups: request.groups ?? [],
      pane: request.pane ?? null,
      tokenHash: hashToken(token),
      created: this.hlc.tick(),
    };
    insertEntity(this.store, record);
    const entity = EntityActor.create(record, this.host, this.entityDeps);
    this.directory.add(entity);
    entity.start();
    await this.store.batch.flush();
    await this.federation?.addEntity(entity);
    this.logger.info({ gid: record.gid, name: record.name, kind: record.kind }, 'entity registered');
    return { gid: record.gid, token, name: record.name, host: this.host, kind: record.kind };
  }

  /** Deregisters an entity; its undelivered messages are dead-lettered, never dropped. */
  async deregister(address: string): Promise<Address> {
    this.assertRunning();
    const entity = this.directory.resolve(address);
    const address_ = addressOf(entity, this.host);
    this.directory.remove(entity);
    entity.deregister();
    await this.store.batch.flush();
    await this.federation?.removeEntity(entity.gid);
    this.logger.info({ gid: entity.gid, name: entity.record.name }, 'entity deregistered');
    return address_;
  }

  authenticate(token: string): EntityActor | undefined {
    return this.directory.authenticate(token);
  }

  /**
   * Sends a message from a local entity. With `waitMs`, holds the call open until the first
   * message back from the recipient (or answering this one) arrives (R-DL3).
   */
  async send(sender: EntityActor, options: SendOptions): Promise<SendOutcome> {
    this.assertRunning();
    const waitMs = Math.min(options.waitMs ?? 0, this.config.limits.maxWaitMs);
    if (waitMs <= 0) return this.router.send(sender, options);
    const recipient = this.router.resolve(options.to);
    const waiter = sender.waitForReply(recipient.gid, waitMs);
    let result: SendResult;
    try {
      result = await this.router.send(sender, options);
    } catch (err) {
      waiter.cancel();
      throw err;
    }
    waiter.answering(result.msgId);
    const handover = await waiter.promise;
    if (!handover) return { ...result, reply: null };
    return { ...result, reply: handover.envelopes[0] ?? null, handover };
  }

  /** Resolves once everything this gateway has written so far is durable. */
  flush(): Promise<void> {
    return this.store.batch.flush();
  }

  /** Publishes once to every inbox bound to the key (U8). */
  async broadcast(sender: EntityActor, request: BroadcastRequest): Promise<BroadcastResult> {
    this.assertRunning();
    return this.router.broadcast(sender, request);
  }

  /** Hands over held messages; the caller confirms (or gives back) the returned handover. */
  async drain(entity: EntityActor, max?: number): Promise<Handover> {
    this.assertRunning();
    return entity.drain(Math.min(max ?? this.config.limits.maxDrain, this.config.limits.maxDrain));
  }

  /** Local entities first, then every remote host's, as their presence announced them (U5). */
  roster(): RosterEntry[] {
    const local: RosterEntry[] = [...this.directory.all()].map((entity) => ({
      ...addressOf(entity, this.host),
      groups: entity.record.groups,
      status: entity.state,
      depth: entity.depth,
    }));
    const remote: RosterEntry[] = (this.federation?.roster.entries() ?? []).map((e) => ({
      gid: e.gid,
      name: e.name,
      host: e.host,
      kind: e.kind,
      groups: e.groups,
      status: e.status,
    }));
    return [...local, ...remote];
  }

  async status(): Promise<Record<string, unknown>> {
    const federation = this.federation;
    const broker = federation
      ? {
          state: federation.broker.state,
          lastError: federation.broker.lastError,
          queueMode: this.config.broker.queueMode,
          peers: federation.roster.hostIds(),
          deadLetterQueue: await federation.broker.queueDepth(dlqName),
          inboxes: Object.fromEntries(
            await Promise.all(
              [...this.directory.all()].map(
                async (e) => [e.record.name, await federation.broker.queueDepth(inboxName(e.gid))] as const,
              ),
            ),
          ),
        }
      : null;
    const deadLetters = Object.fromEntries(
      (await this.metrics.deadLetters.get()).values.map((v) => [String(v.labels.reason), v.value]),
    );
    return {
      host: this.host,
      pid: process.pid,
      uptimeSeconds: Math.round((this.clock.now() - this.startedAt) / 1000),
      mode: federation ? 'federated' : 'single-host',
      broker,
      signing: federation ? this.signingStatus() : null,
      store: this.store.file,
      entities: this.roster(),
      deliveries: countActorsByState(this.store, deliveryKind),
      deadLetters,
    };
  }

  /** This gateway's signing key and the hosts it trusts, for `bridge status`. */
  private signingStatus(): {
    mode: string;
    publicKey: string | null;
    trustedHosts: string[];
    problem: string | null;
  } {
    const mode = this.config.security.signing;
    if (mode === 'off') return { mode, publicKey: null, trustedHosts: [], problem: null };
    try {
      return {
        mode,
        publicKey: loadKeys(this.config.home).publicKeyString,
        trustedHosts: listTrust(this.config.home).map((entry) => entry.host),
        problem: null,
      };
    } catch (err) {
      return { mode, publicKey: null, trustedHosts: [], problem: (err as Error).message };
    }
  }

  /** The broker's dead-letter queue, read without consuming it. */
  async listDeadLetters(max = 100): Promise<DeadLetterView[]> {
    return this.requireFederation('bridge dlq').listDeadLetters(max);
  }

  /** Moves dead letters back to their inboxes (all, or one msgId); returns how many moved. */
  async requeueDeadLetters(msgId?: string): Promise<number> {
    return this.requireFederation('bridge dlq requeue').requeueDeadLetters(msgId);
  }

  private requireFederation(what: string): Federation {
    if (!this.federation) {
      throw new BridgeError(
        ErrorCode.notAvailable,
        `${what} needs a broker: this gateway runs single-host (set broker.uri / BRIDGE_BROKER_URI); ` +
          'single-host dead letters stay in the event log with their reason',
      );
    }
    return this.federation;
  }

  /**
   * This gateway's signer: its key (created on first federated start, like an SSH host key,
   * with a loud line saying how peers trust it) and the trust store of its peers' keys.
   */
  private createSigner(): Signer {
    const { config, logger } = this;
    if (config.security.signing === 'off') {
      logger.warn(
        'security.signing is off: messages are neither signed nor verified (invariant 6 does not hold)',
      );
      return createNoSigner(config.hostId);
    }
    let keys: GatewayKeys;
    try {
      keys = loadKeys(config.home);
    } catch (err) {
      if (!(err instanceof BridgeError) || err.code !== ErrorCode.keyMissing) throw err;
      keys = initKeys(config.home);
      logger.warn(
        { publicKey: keys.publicKeyString, path: keys.privateKeyPath },
        `created this gateway's signing key; on every peer run: bridge trust add ${config.hostId} ${keys.publicKeyString}`,
      );
    }
    const trust = new TrustStore(config.home, {
      onError: (err) =>
        logger.error({ err }, 'the trust store cannot be read; trusting no peer until it is fixed'),
    });
    return createSigner({
      host: config.hostId,
      privateKey: keys.privateKey,
      publicKey: keys.publicKeyString,
      trust,
    });
  }

  private assertRunning(): void {
    if (this.stopping) {
      throw new BridgeError(ErrorCode.shuttingDown, 'the gateway is shutting down; retry in a moment', {
        retryable: true,
      });
    }
  }

  /** A message whose recipient no longer exists is dead-lettered with a reason, not dropped. */
  private deadLetterOrphan(actorId: string, msgId: string, traceId: string, owner: string | null): void {
    const cell = ActorCell.rehydrate(
      deliveryMachine,
      readActorEvents(this.store, deliveryKind, actorId),
      { kind: deliveryKind, id: actorId, traceId, msgId, owner },
      this.deps,
    );
    cell.send({ type: 'delivery.deadLettered', reason: 'recipient-gone' });
    this.metrics.deadLetters.inc({ reason: 'recipient-gone' });
    this.logger.error({ traceId, msgId, recipient: owner }, 'message for an unknown recipient dead-lettered');
  }
}
