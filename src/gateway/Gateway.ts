import { join } from 'node:path';
import { type AnswerOutcome, type AskOptions, type AskOutcome, Asks } from '../ask/Asks.js';
import { Turns } from '../ask/Turns.js';
import type { Config } from '../config/schema.js';
import { Directory } from '../deliver/Directory.js';
import { createEntityMachines, type EntityActor, type EntityActorDeps } from '../deliver/EntityActor.js';
import type { Handover } from '../deliver/handover.js';
import type { Nudge } from '../deliver/Reminder.js';
import { type RecentDelivery, readRecentDeliveries } from '../deliver/recentDeliveries.js';
import { resumeEntities } from '../deliver/resumeEntities.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { LatestDeadLetters } from '../federation/DeadLetters.js';
import { Federation } from '../federation/Federation.js';
import type { RuntimeDeps } from '../kernel/ActorCell.js';
import { type Clock, systemClock } from '../kernel/clock.js';
import type { Logger } from '../log/logger.js';
import { createMetrics, type Metrics } from '../metrics/metrics.js';
import type { PaneInjector } from '../panes/paneInjector.js';
import { createGatewaySigner } from '../security/gatewaySigner.js';
import {
  createMessageStatusLookup,
  type MessageStatus,
  type MessageStatusLookup,
} from '../send/messageStatus.js';
import { ReceiptsArriving } from '../send/ReceiptsArriving.js';
import { ReceiptsLeaving } from '../send/ReceiptsLeaving.js';
import { type BroadcastRequest, type BroadcastResult, Router } from '../send/Router.js';
import { type SendOptions, type SendOutcome, Sends } from '../send/Sends.js';
import { createHerdrLauncher } from '../spawn/herdrLauncher.js';
import type { Launcher } from '../spawn/launcher.js';
import { Spawner } from '../spawn/Spawner.js';
import { type ControlOutcome, type SpawnOptions, SpawnRequests } from '../spawn/SpawnRequests.js';
import { createTmuxLauncher } from '../spawn/tmuxLauncher.js';
import { openStore, type Store } from '../store/openStore.js';
import { type RecentFlow, RecentFlows } from '../store/RecentFlows.js';
import { readLastHlc } from '../store/readEvents.js';
import { asStoreDamage } from '../store/storeDamage.js';
import type { DeadLetterView, RequeueResult } from '../wire/deadLetterView.js';
import type { Address } from '../wire/envelope.js';
import { createHlc } from '../wire/hlc.js';
import type { PaneTarget } from '../wire/paneTarget.js';
import { GatewayStatus, type RosterEntry } from './GatewayStatus.js';
import { ParkedCalls } from './ParkedCalls.js';
import { newToken, type RegisterRequest, type Registration, Registrations } from './Registrations.js';

export type { MessageStatus } from '../send/messageStatus.js';
export type { SendOutcome } from '../send/Sends.js';
export type { ControlOutcome } from '../spawn/SpawnRequests.js';
export type { RosterEntry } from './GatewayStatus.js';
export type { Registration } from './Registrations.js';

export interface GatewayOptions {
  config: Config;
  logger: Logger;
  clock?: Clock;
  createInjector: (pane: PaneTarget) => PaneInjector;
  /** Checks a pane exists before an entity is registered with it; throws a BridgeError if not. */
  checkPane?: (pane: PaneTarget) => Promise<void>;
  /** Called when the gateway can no longer trust its own state (a failed commit, a refused inbox). */
  onFatal?: (err: unknown) => void;
  /** Starts spawned agents (U4); default: tmux windows and herdr tabs as configured. */
  launchers?: { tmux: Launcher; herdr: Launcher };
  /**
   * The event log to run on, opened and closed by the caller (an in-memory one, for the unit
   * tier; kept across a stop and a start, it is what the next start rebuilds from). Default:
   * `events.db` in the home, opened at start and closed at stop.
   */
  eventLog?: Store;
}

/** Everything a started gateway runs on: built at once, from its event log, by `assemble`. */
interface Running {
  readonly store: Store;
  readonly entityDeps: EntityActorDeps;
  readonly federation: Federation | undefined;
  readonly turns: Turns;
  readonly router: Router;
  /** The entity actors' receipts sink: what leaves this host, and what stays on it. */
  readonly receipts: ReceiptsLeaving;
  readonly spawner: Spawner;
  readonly registrations: Registrations;
  readonly sends: Sends;
  readonly asks: Asks;
  readonly spawnRequests: SpawnRequests;
  readonly messageStatus: MessageStatusLookup;
  readonly status: GatewayStatus;
  /** The console's list of recent flows, read on from where it last read. */
  readonly recentFlows: RecentFlows;
}

/**
 * The gateway supervisor: opens the event log, builds the actors and services on it, rebuilds
 * every live actor from it, and stops them. Interfaces (MCP, admin socket) call its methods,
 * each of which hands the call to the service that holds its logic.
 */
export class Gateway {
  readonly config: Config;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly directory: Directory;
  readonly startedAt: number;
  readonly clock: Clock;
  private running: Running | undefined;
  private stopping = false;
  private readonly nudgeListeners = new Set<(nudge: Nudge) => void>();
  private readonly mcpUrl: { readonly promise: Promise<string>; resolve: (url: string) => void };
  /** Calls parked open, against limits.maxParkedPerEntity and limits.maxParked (R-H8). */
  private readonly parked: ParkedCalls;

  constructor(private readonly options: GatewayOptions) {
    this.config = options.config;
    this.logger = options.logger;
    this.clock = options.clock ?? systemClock;
    this.startedAt = this.clock.now();
    this.directory = new Directory(this.config.hostId);
    this.metrics = createMetrics(() => [...this.directory.all()].map((e) => [e.record.name, e.depth]), {
      runtime: this.config.metrics.runtime,
    });
    const { maxParkedPerEntity, maxParked } = this.config.limits;
    this.parked = new ParkedCalls(
      { perEntity: maxParkedPerEntity, perGateway: maxParked },
      this.metrics.parkedCalls,
    );
    let resolve: (url: string) => void = () => {};
    const promise = new Promise<string>((settle) => {
      resolve = settle;
    });
    this.mcpUrl = { promise, resolve };
  }

  get host(): string {
    return this.config.hostId;
  }

  get storeFile(): string {
    return this.started().store.file;
  }

  /** The federation, when the gateway runs federated and has started (tests reach its broker through it). */
  private get federation(): Federation | undefined {
    return this.running?.federation;
  }

  /**
   * Opens the log, rebuilds every entity and undelivered message from it, then (federated)
   * connects to the broker. Rejects if the broker refuses one of this gateway's inboxes.
   */
  async start(): Promise<void> {
    const given = this.options.eventLog;
    const file = given?.file ?? join(this.config.home, 'events.db');
    try {
      const store = given ?? this.openEventLog(file);
      try {
        this.running = this.assemble(store);
      } catch (err) {
        if (!given) await store.close();
        throw err;
      }
      await this.resume(this.running);
    } catch (err) {
      // A damaged page shows at the first read that reaches it, anywhere in the resumption.
      throw asStoreDamage(file, err);
    }
  }

  private openEventLog(file: string): Store {
    const { config, logger } = this;
    return openStore({
      file,
      synchronous: config.store.synchronous,
      onCommitted: (stats) => this.metrics.storeCommitted(stats),
      onWriteFailure: (err) => {
        // A write that finds the file damaged says so, naming it, as a start would.
        const failure = asStoreDamage(file, err);
        logger.fatal(
          { err: failure },
          'event log write failed; stopping so a restart can rebuild from the log',
        );
        this.options.onFatal?.(failure);
      },
    });
  }

  /**
   * Builds the actors and services on the open log in dependency order, each given what it
   * reads from those built before it (tools/checkImports.mjs rule 6). The federation, built
   * first, is handed the flows built on it through `serve` (a control request for the spawner,
   * a receipt batch and a reconnect for the receipts) before the broker is connected.
   */
  private assemble(store: Store): Running {
    const { config, logger, metrics, directory, host, clock } = this;
    const hlc = createHlc(() => clock.now(), readLastHlc(store));
    const deps: RuntimeDeps = { store, hlc, clock, host, logger };
    const federation: Federation | undefined =
      config.broker.uris.length > 0
        ? new Federation({
            ...deps,
            signer: createGatewaySigner(config, logger),
            config,
            metrics,
            localEntities: () => directory.all(),
            findLocal: (gid) => directory.byGidOrUndefined(gid),
            onFatal: (err) => {
              logger.fatal({ err }, err.message);
              this.options.onFatal?.(err);
            },
          })
        : undefined;
    const turns = new Turns(deps);
    const router: Router = new Router({ ...deps, config, metrics, directory, federation });
    const receiptsArriving = new ReceiptsArriving({ ...deps, metrics, router });
    const receipts = new ReceiptsLeaving({
      ...deps,
      metrics,
      router,
      federation,
      arriving: receiptsArriving,
    });
    const asks = new Asks({ ...deps, config, metrics, directory, router, turns });
    const entityDeps: EntityActorDeps = {
      ...deps,
      config,
      metrics: this.metrics,
      createInjector: this.options.createInjector,
      deadLetters: federation,
      onInboxLoad: (entity) => federation?.inboxLoadChanged(entity),
      answers: turns,
      onTooLate: (answer, why) => void asks.tellTooLate(answer, why),
      onNudge: (nudge) => {
        for (const listener of this.nudgeListeners) listener(nudge);
      },
      receipts,
      machines: createEntityMachines(deps.clock),
    };
    const registrations = new Registrations({
      ...deps,
      directory,
      federation,
      entityDeps,
      checkPane: this.options.checkPane,
    });
    const spawner = new Spawner({
      ...deps,
      config,
      metrics,
      launchers: this.options.launchers ?? {
        tmux: createTmuxLauncher({ socket: config.spawn.tmuxSocket, session: config.spawn.tmuxSession }),
        herdr: createHerdrLauncher({
          socketPath: config.herdr.socketPath,
          workspace: config.spawn.herdrWorkspace,
        }),
      },
      mcpUrl: () => this.mcpUrl.promise,
      hasName: (name) => directory.hasName(name),
      hasEntity: (gid) => directory.byGidOrUndefined(gid) !== undefined,
      register: async (entity) => {
        this.assertRunning();
        return registrations.registerSpawned(entity);
      },
      deregister: async (gid) => {
        this.assertRunning();
        await registrations.deregister(gid);
      },
      deliverLocal: (envelope) => directory.byGidOrUndefined(envelope.to)?.accept(envelope),
      route: (envelope) => router.routeEnvelope(envelope),
      compose: (from, kind, to, text, extra) => router.compose(from, kind, to, text, extra),
      newToken,
    });
    const isSpawned = (gid: string): boolean => spawner.isRunning(gid);
    federation?.serve({
      control: (envelope, inbound) => spawner.receiveControl(envelope, inbound),
      receipts: (envelope, inbound) => receiptsArriving.receive(envelope, inbound),
      // A SPAWN the control queue dead-lettered for its content: its requester is told why.
      refusedSpawn: (request, why) => void spawner.refuseUnreadable(request, why),
      connected: () => receipts.republish(),
      refusesReply: (envelope) => router.refusesReply(envelope),
      receiptSink: receipts,
      isSpawned,
    });
    const remoteRoster = federation?.roster;
    return {
      store,
      entityDeps,
      federation,
      turns,
      router,
      receipts,
      spawner,
      registrations,
      sends: new Sends({ ...deps, config, router }),
      asks,
      spawnRequests: new SpawnRequests({
        ...deps,
        config,
        router,
        directory,
        remoteRoster,
        receiveLocal: (envelope) => spawner.receiveControl(envelope),
      }),
      messageStatus: createMessageStatusLookup({ host, router, directory, remoteRoster }),
      recentFlows: new RecentFlows(store),
      status: new GatewayStatus({
        ...deps,
        startedAt: this.startedAt,
        config,
        metrics,
        directory,
        federation,
        isSpawned,
      }),
    };
  }

  /** Rebuilds every live actor from the log, then (federated) connects to the broker. */
  private async resume(running: Running): Promise<void> {
    const { store, entityDeps, turns, spawner, receipts, federation } = running;
    const waitingTurns = turns.rehydrate();
    const resumed = resumeEntities(entityDeps, this.directory);
    const spawns = spawner.rehydrate();
    receipts.start();
    this.logger.info(
      {
        entities: this.directory.size,
        resumedDeliveries: resumed,
        waitingTurns,
        liveSpawns: spawns,
        store: store.file,
      },
      'gateway started',
    );
    await federation?.start();
  }

  /** Where MCP clients (and spawned agents) reach this gateway; set once the server listens. */
  setMcpUrl(url: string): void {
    this.mcpUrl.resolve(url);
  }

  /**
   * An entity's MCP client was sent bridge's tool list: a spawned agent's brief waits for it, so
   * its first turn has bridge's tools (`notifications/initialized` is too early: an agent may
   * start a turn before the list it asks for next has come back).
   */
  mcpToolsListed(gid: string): void {
    this.running?.spawner.mcpToolsListed(gid);
  }

  /** Calls `listener` with every nudge (U3); returns the way to stop. */
  onNudge(listener: (nudge: Nudge) => void): () => void {
    this.nudgeListeners.add(listener);
    return () => this.nudgeListeners.delete(listener);
  }

  async stop(): Promise<void> {
    const running = this.running;
    if (this.stopping || !running) return;
    this.stopping = true;
    running.turns.stop();
    running.spawner.stop();
    await running.federation?.stop();
    await Promise.all([...this.directory.all()].map((entity) => entity.stop()));
    try {
      await running.store.batch.flush();
    } finally {
      if (!this.options.eventLog) await running.store.close();
    }
  }

  /** Registers a local entity and returns its capability token (shown once, stored hashed). */
  async register(request: RegisterRequest): Promise<Registration> {
    return this.live().registrations.register(request);
  }

  /** Deregisters an entity; its undelivered messages are dead-lettered, never dropped. */
  async deregister(address: string): Promise<Address> {
    return this.live().registrations.deregister(address);
  }

  authenticate(token: string): EntityActor | undefined {
    return this.directory.authenticate(token);
  }

  /**
   * Sends a message from a local entity. With `waitMs`, holds the call open until the first
   * message back from the recipient (or answering this one) arrives (R-DL3).
   */
  async send(sender: EntityActor, options: SendOptions): Promise<SendOutcome> {
    const sends = this.live().sends;
    const waits = (options.waitMs ?? 0) > 0 || options.waitFor !== undefined;
    if (!waits) return sends.send(sender, options);
    return this.parked.park(sender.gid, sender.record.name, () => sends.send(sender, options));
  }

  /** Where a message sent from this gateway is now (R-RC1); see MessageStatusLookup. */
  async messageStatus(requester: EntityActor | undefined, msgId: string): Promise<MessageStatus> {
    return this.live().messageStatus(requester, msgId);
  }

  /** Asks and parks the caller until the answer comes or the turn's deadline passes (U2). */
  async ask(asker: EntityActor, options: AskOptions): Promise<AskOutcome> {
    const asks = this.live().asks;
    return this.parked.park(asker.gid, asker.record.name, () => asks.ask(asker, options));
  }

  /** Answers an ASK this entity received (only the first answer counts). */
  async answer(main: EntityActor, askId: string, text: string): Promise<AnswerOutcome> {
    return this.live().asks.answer(main, askId, text);
  }

  /** Asks `host` to start an agent from one of its profiles and waits for the result (U4). */
  async spawn(requester: EntityActor, options: SpawnOptions): Promise<ControlOutcome> {
    return this.live().spawnRequests.spawn(requester, options);
  }

  /** Asks the host of a spawned agent to stop it and deregister it (U4). */
  async stopSpawned(requester: EntityActor, gid: string, waitMs?: number): Promise<ControlOutcome> {
    return this.live().spawnRequests.stopSpawned(requester, gid, waitMs);
  }

  /** Resolves once everything this gateway has written so far is durable. */
  flush(): Promise<void> {
    return this.started().store.batch.flush();
  }

  /** Publishes once to every inbox bound to the key (U8). */
  async broadcast(sender: EntityActor, request: BroadcastRequest): Promise<BroadcastResult> {
    return this.live().router.broadcast(sender, request);
  }

  /**
   * Hands over held messages; the caller confirms (or gives back) the returned handover. With
   * `waitMs` (at most limits.maxWaitMs) and nothing held, it is a long poll: it returns as soon as
   * a message is held, or empty once the wait is over or `signal` aborts.
   */
  async drain(entity: EntityActor, max?: number, waitMs?: number, signal?: AbortSignal): Promise<Handover> {
    this.assertRunning();
    const { maxDrain, maxWaitMs } = this.config.limits;
    const ms = Math.min(waitMs ?? 0, maxWaitMs);
    const most = Math.min(max ?? maxDrain, maxDrain);
    if (ms <= 0) return entity.drain(most);
    return this.parked.park(entity.gid, entity.record.name, () => entity.drain(most, { ms, signal }));
  }

  /** Local entities first, then every remote host's, as their presence announced them (U5). */
  roster(): RosterEntry[] {
    return this.started().status.roster();
  }

  async status(): Promise<Record<string, unknown>> {
    return this.started().status.status();
  }

  /** The latest deliveries to a local entity, newest first, for the operator console. */
  recentDeliveries(gid: string, limit = 50): RecentDelivery[] {
    return readRecentDeliveries(this.started().store, gid, limit);
  }

  /** The flows with an event in this host's log in the last `withinMs`, the latest first. */
  recentFlows(withinMs: number, limit = 200): Promise<RecentFlow[]> {
    return this.started().recentFlows.read(this.clock.now() - withinMs, limit);
  }

  /** The operator console's summary of this gateway (GatewayStatus.overview). */
  async overview(): Promise<Record<string, unknown>> {
    return this.started().status.overview();
  }

  /** The broker's dead-letter queue, read without consuming it. */
  async listDeadLetters(max = 100): Promise<DeadLetterView[]> {
    return this.requireFederation('agentbridge dlq').listDeadLetters(max);
  }

  /** The newest dead letters, newest first, for the console (see `DeadLetters.latest`). */
  async latestDeadLetters(max: number, scan: number, maxAgeMs: number): Promise<LatestDeadLetters> {
    return this.requireFederation("the console's dead letters").latestDeadLetters(max, scan, maxAgeMs);
  }

  /**
   * Moves dead letters back to their inboxes (all, or one msgId), in one pass; those refused on
   * arrival only when forced. Returns how many moved and how many were left, by reason.
   */
  async requeueDeadLetters(msgId?: string, force = false): Promise<RequeueResult> {
    return this.requireFederation('agentbridge dlq requeue').requeueDeadLetters(msgId, force);
  }

  private requireFederation(what: string): Federation {
    const federation = this.federation;
    if (!federation) {
      throw new BridgeError(
        ErrorCode.notAvailable,
        `${what} needs a broker: this gateway runs single-host (set broker.uri / BRIDGE_BROKER_URI); ` +
          'single-host dead letters stay in the event log with their reason',
      );
    }
    return federation;
  }

  private assertRunning(): void {
    if (this.stopping) {
      throw new BridgeError(ErrorCode.shuttingDown, 'the gateway is shutting down; retry in a moment', {
        retryable: true,
      });
    }
  }

  /** The running gateway, for a call that acts: refused while stopping and before start. */
  private live(): Running {
    this.assertRunning();
    return this.started();
  }

  /** The gateway's actors and services once started (reads go on while it stops). */
  private started(): Running {
    if (!this.running) {
      throw new BridgeError(ErrorCode.notAvailable, 'the gateway has not started yet; retry in a moment', {
        retryable: true,
      });
    }
    return this.running;
  }
}
