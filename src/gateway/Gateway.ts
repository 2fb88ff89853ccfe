import { join } from 'node:path';
import { Asks } from '../ask/Asks.js';
import { Turns } from '../ask/Turns.js';
import type { Config } from '../config/schema.js';
import { Directory } from '../deliver/Directory.js';
import { Drains } from '../deliver/Drains.js';
import { createEntityMachines, type EntityActorDeps } from '../deliver/EntityActor.js';
import type { Nudge } from '../deliver/Reminder.js';
import { resumeEntities } from '../deliver/resumeEntities.js';
import { BridgeError, ErrorCode } from '../errors.js';
import { Federation } from '../federation/Federation.js';
import type { RuntimeDeps } from '../kernel/ActorCell.js';
import { type Clock, systemClock } from '../kernel/clock.js';
import { Lifecycle } from '../kernel/Lifecycle.js';
import { ParkedCalls } from '../kernel/ParkedCalls.js';
import type { Logger } from '../log/logger.js';
import { createMetrics, type Metrics } from '../metrics/metrics.js';
import type { PaneInjector } from '../panes/paneInjector.js';
import { createGatewaySecurity } from '../security/gatewaySecurity.js';
import { createMessageStatusLookup, type MessageStatusLookup } from '../send/messageStatus.js';
import { ReceiptsArriving } from '../send/ReceiptsArriving.js';
import { ReceiptsLeaving } from '../send/ReceiptsLeaving.js';
import { Router } from '../send/Router.js';
import { Sends } from '../send/Sends.js';
import { createHerdrLauncher } from '../spawn/herdrLauncher.js';
import type { Launcher } from '../spawn/launcher.js';
import { OwnerAnswers } from '../spawn/OwnerAnswers.js';
import { Spawner } from '../spawn/Spawner.js';
import { SpawnRequests } from '../spawn/SpawnRequests.js';
import { createTmuxLauncher } from '../spawn/tmuxLauncher.js';
import { openStore, type Store } from '../store/openStore.js';
import { readLastHlc } from '../store/readEvents.js';
import { asStoreDamage } from '../store/storeDamage.js';
import { createHlc } from '../wire/hlc.js';
import type { PaneTarget } from '../wire/paneTarget.js';
import { type DeadLetterAdmin, deadLetterAdmin } from './deadLetterAdmin.js';
import { GatewayStatus } from './GatewayStatus.js';
import { newToken, Registrations } from './Registrations.js';

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
  /** The agentbridge CLI as a command line: a spawned worker on an agent's own protocol runs its agent host. */
  agentHostCommand?: readonly string[];
  /**
   * The event log to run on, opened and closed by the caller (an in-memory one, for the unit
   * tier; kept across a stop and a start, it is what the next start rebuilds from). Default:
   * `events.db` in the home, opened at start and closed at stop.
   */
  eventLog?: Store;
}

/**
 * The services an interface (MCP tools, the admin socket, the console) calls, once the gateway
 * has started. Each one that acts refuses a call while the gateway stops (`Lifecycle`), and one
 * that may wait parks it against the limits (`ParkedCalls`) itself.
 */
export interface Services {
  /** register, deregister. */
  readonly registrations: Registrations;
  /** bridge_send. */
  readonly sends: Sends;
  /** bridge_status: where a message sent from here is now. */
  readonly messageStatus: MessageStatusLookup;
  /** bridge_ask, bridge_answer. */
  readonly asks: Asks;
  /** bridge_drain. */
  readonly drains: Drains;
  /** approve|deny: the owner's answer to a worker's agent asking for a permission. */
  readonly ownerAnswers: OwnerAnswers;
  /** bridge_broadcast. */
  readonly router: Router;
  /** bridge_spawn, bridge_stop. */
  readonly spawnRequests: SpawnRequests;
  /** The agents this host started (a spawned agent's brief waits for its tool list). */
  readonly spawner: Spawner;
  /** Roster, status, overview and what went through lately. */
  readonly status: GatewayStatus;
  /** The broker's dead-letter queue (refused, saying why, single-host). */
  readonly deadLetters: DeadLetterAdmin;
}

/** Everything a started gateway runs on: built at once, from its event log, by `assemble`. */
interface Running extends Services {
  readonly store: Store;
  readonly entityDeps: EntityActorDeps;
  readonly federation: Federation | undefined;
  readonly turns: Turns;
  /** The entity actors' receipts sink: what leaves this host, and what stays on it. */
  readonly receipts: ReceiptsLeaving;
}

/**
 * The gateway supervisor: opens the event log, builds the actors and services on it, rebuilds
 * every live actor from it, and stops them. Composition only: interfaces call the services
 * (`services`) themselves.
 */
export class Gateway {
  readonly config: Config;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly directory: Directory;
  readonly startedAt: number;
  readonly clock: Clock;
  private running: Running | undefined;
  private readonly lifecycle = new Lifecycle();
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

  /** What interfaces call; refused (retryable) before the gateway has started. */
  get services(): Services {
    return this.started();
  }

  /**
   * The federation, when the gateway runs federated and has started: for tests and benchmarks
   * that reach its broker (no interface does).
   */
  private get federation(): Federation | undefined {
    return this.running?.federation;
  }

  /** The event log the gateway runs on, once started. */
  get store(): Store {
    return this.started().store;
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
    const { config, logger, metrics, directory, host, clock, lifecycle, parked } = this;
    const hlc = createHlc(() => clock.now(), readLastHlc(store));
    const deps: RuntimeDeps = { store, hlc, clock, host, logger };
    const federation: Federation | undefined =
      config.broker.uris.length > 0
        ? new Federation({
            ...deps,
            ...createGatewaySecurity(config, logger),
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
    const router: Router = new Router({ ...deps, config, metrics, directory, federation, lifecycle });
    const receiptsArriving = new ReceiptsArriving({ ...deps, metrics, router });
    const receipts = new ReceiptsLeaving({
      ...deps,
      metrics,
      router,
      federation,
      arriving: receiptsArriving,
    });
    const asks = new Asks({ ...deps, config, metrics, directory, router, turns, lifecycle, parked });
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
      lifecycle,
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
      agentHostCommand: this.options.agentHostCommand,
      hasName: (name) => directory.hasName(name),
      hasEntity: (gid) => directory.byGidOrUndefined(gid) !== undefined,
      register: (entity) => registrations.registerSpawned(entity),
      deregister: async (gid) => {
        await registrations.deregister(gid);
      },
      answerOwner: (gid, decision, by, request) => directory.resolve(gid).answerOwner(decision, by, request),
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
    const spawnRequests = new SpawnRequests({
      ...deps,
      config,
      router,
      directory,
      remoteRoster,
      receiveLocal: (envelope) => spawner.receiveControl(envelope),
      lifecycle,
    });
    return {
      store,
      entityDeps,
      federation,
      turns,
      router,
      receipts,
      spawner,
      registrations,
      sends: new Sends({ ...deps, config, router, lifecycle, parked }),
      asks,
      drains: new Drains({ config, lifecycle, parked }),
      ownerAnswers: new OwnerAnswers({ host, directory, lifecycle, remoteRoster, spawnRequests }),
      spawnRequests,
      messageStatus: createMessageStatusLookup({ host, router, directory, remoteRoster, lifecycle }),
      deadLetters: deadLetterAdmin(federation),
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

  /** Calls `listener` with every nudge (U3); returns the way to stop. */
  onNudge(listener: (nudge: Nudge) => void): () => void {
    this.nudgeListeners.add(listener);
    return () => this.nudgeListeners.delete(listener);
  }

  async stop(): Promise<void> {
    const running = this.running;
    if (this.lifecycle.stopped || !running) return;
    this.lifecycle.stop();
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

  /** The gateway's actors and services once started (reads go on while it stops; calls that act are refused by the services). */
  private started(): Running {
    if (!this.running) {
      throw new BridgeError(ErrorCode.notAvailable, 'the gateway has not started yet; retry in a moment', {
        retryable: true,
      });
    }
    return this.running;
  }
}
