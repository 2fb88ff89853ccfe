import { randomBytes, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { z } from 'zod';
import { dlqName, inboxName } from '../broker/topology.js';
import { type Clock, systemClock } from '../clock/clock.js';
import { createHlc, type Hlc } from '../clock/hlc.js';
import type { Config } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { PaneInjector, PaneTarget } from '../inject/paneInjector.js';
import type { Logger } from '../log/logger.js';
import { newTraceId } from '../log/logger.js';
import { deliveryMachine } from '../machines/deliveryMachine.js';
import type { StageRecord } from '../machines/sendMachine.js';
import { createMetrics, type Metrics } from '../metrics/metrics.js';
import { endsWait, type ReceiptStage, receiptStages, type WaitableStage } from '../receipts/receipt.js';
import { ActorCell, type RuntimeDeps } from '../runtime/actorCell.js';
import { deliveryActorId, parseDeliveryActorId } from '../runtime/actorIds.js';
import { resumeOrReport } from '../runtime/resumeOrReport.js';
import { type GatewayKeys, initKeys, loadKeys } from '../security/keys.js';
import { createNoSigner, createSigner, type Signer } from '../security/messageSigning.js';
import { listTrust, TrustStore } from '../security/trustStore.js';
import { createHerdrLauncher } from '../spawn/herdrLauncher.js';
import type { Launcher } from '../spawn/launcher.js';
import { createTmuxLauncher } from '../spawn/tmuxLauncher.js';
import { countActorsByState, readActorHead, readLiveActors } from '../store/actorHeads.js';
import { type EntityRecord, insertEntity, readEntities } from '../store/entities.js';
import { openStore, type Store } from '../store/openStore.js';
import { readActorEvents, readLastHlc } from '../store/readEvents.js';
import { asStoreDamage } from '../store/storeDamage.js';
import type { DeadLetterView, RequeueResult } from '../wire/deadLetterView.js';
import {
  type Address,
  type ControlResult,
  describeIssues,
  type EntityKind,
  type Envelope,
  entityNameSchema,
  groupsSchema,
  type SpawnHeader,
  spawnRequestSchema,
  WireKind,
} from '../wire/envelope.js';
import { gatewayAddress } from '../wire/gatewayAddress.js';
import { namedUuid, uuidv7 } from '../wire/ids.js';
import { deliveryKind } from './delivery.js';
import { Directory, hashToken } from './directory.js';
import { createEntityMachines, EntityActor, type EntityActorDeps, entityKind } from './entityActor.js';
import { Federation } from './federation.js';
import type { Handover, InboundHandle } from './handover.js';
import { Receipts } from './receipts.js';
import type { Nudge } from './reminder.js';
import {
  addressOf,
  type BroadcastRequest,
  type BroadcastResult,
  keyedCall,
  keyedSend,
  Router,
  type SendCell,
  type SendRequest,
  type SendResult,
  sendKind,
} from './router.js';
import { Spawner } from './spawner.js';
import { type TurnOutcome, Turns } from './turns.js';

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
}

export interface AskOptions {
  to: string;
  question: string;
  timeoutMs?: number | undefined;
  /** A retry with the same key attaches to the same turn (after a gateway restart, say). */
  idempotencyKey?: string | undefined;
  /** Aborts when the caller hangs up: the turn is abandoned. */
  signal?: AbortSignal | undefined;
}

export interface AskOutcome {
  askId: string;
  turnId: string;
  traceId: string;
  to: Address;
  answer: Envelope;
  /** Confirm once the caller has the answer (see Handover). */
  handover: Handover;
}

export interface AnswerOutcome {
  msgId: string;
  askId: string;
  turnId: string;
  traceId: string;
  /** delivered: the waiting call has it; sent: on its way to another host; too_late: the turn is over. */
  status: 'delivered' | 'sent' | 'too_late';
  duplicate: boolean;
  why?: string;
}

export interface SpawnOptions {
  host: string;
  profile: string;
  brief: string;
  name?: string | undefined;
  groups?: string[] | undefined;
  waitMs?: number | undefined;
  idempotencyKey?: string | undefined;
}

export interface ControlOutcome {
  requestId: string;
  traceId: string;
  host: string;
  /** done: the result came back (see `result`); pending: not within the wait, it arrives by drain. */
  status: 'done' | 'pending';
  result?: ControlResult;
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

/** What a registration names, by the one rule for names and groups (R-U8: no wildcard groups). */
const registrationSchema = z.object({ name: entityNameSchema, groups: groupsSchema.optional() });

function newToken(): string {
  return `brt_${randomBytes(24).toString('base64url')}`;
}

function askEnded(state: string, turnId: string): BridgeError {
  return new BridgeError(
    state === 'expired' ? ErrorCode.askExpired : ErrorCode.askAbandoned,
    `that ask (turn ${turnId}) is already ${state}: ask again with a new idempotency_key`,
  );
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
  /**
   * Hold the call open until the message reached this stage (or a later one, or a dead end),
   * at most `delivery.receiptWaitMs` (R-RC1).
   */
  waitFor?: WaitableStage | undefined;
}

export interface SendOutcome extends SendResult {
  /** The reply that resolved an open send, if one came in time. */
  reply?: Envelope | null;
  /** That reply's handover: confirm it once the caller has the reply (see Handover). */
  handover?: Handover;
  /** The latest stage recorded for the message when the call returned; null: none yet. */
  stage: ReceiptStage | null;
  /** With waitFor: the stage was not reached within delivery.receiptWaitMs. */
  timedOut?: boolean;
}

/** Where a message this gateway sent is now (bridge_status, R-RC1). */
export interface MessageStatus {
  msgId: string;
  traceId: string;
  kind: string;
  /** The recipient's gid (a routing key for a broadcast), with its name and host when known. */
  to: { gid: string; name?: string; host?: string };
  /** The latest stage a receipt reported; null: none yet. */
  stage: ReceiptStage | null;
  stages: StageRecord[];
  /** The send actor's own state: accepted, published, confirmed, routed-local, failed, or a stage. */
  sendState: string;
  /** Why the send failed, when it did. */
  failure: string | null;
}

/** A wait for a stage, as it ended. */
interface StageWait {
  stage: ReceiptStage | null;
  timedOut: boolean;
}

const dropStages: readonly ReceiptStage[] = ['dead-lettered', 'too-late'];

function stageOfState(state: string | undefined): ReceiptStage | null {
  return (receiptStages as readonly string[]).includes(state ?? '') ? (state as ReceiptStage) : null;
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
  readonly clock: Clock;
  private store!: Store;
  private hlc!: Hlc;
  private router!: Router;
  private deps!: RuntimeDeps;
  private entityDeps!: EntityActorDeps;
  private federation: Federation | undefined;
  private turns!: Turns;
  private spawner!: Spawner;
  private receipts!: Receipts;
  private stopping = false;
  private readonly nudgeListeners = new Set<(nudge: Nudge) => void>();
  private mcpUrlKnown!: (url: string) => void;
  private readonly mcpUrlReady = new Promise<string>((resolve) => {
    this.mcpUrlKnown = resolve;
  });

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
    const file = join(this.config.home, 'events.db');
    try {
      await this.startOn(file);
    } catch (err) {
      // A damaged page shows at the first read that reaches it, anywhere in the resumption.
      throw asStoreDamage(file, err);
    }
  }

  private async startOn(file: string): Promise<void> {
    const { config, logger } = this;
    this.store = openStore({
      file,
      synchronous: config.store.synchronous,
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
        onControl: (envelope, inbound) => this.onControl(envelope, inbound),
        onRefusedSpawn: (request, why) => this.onRefusedSpawn(request, why),
        onConnected: () => this.receipts?.republish(),
        refusesReply: (envelope) => this.router.refusesReply(envelope),
      });
    }
    this.turns = new Turns(deps);
    this.entityDeps = {
      ...deps,
      config,
      metrics: this.metrics,
      createInjector: this.options.createInjector,
      deadLetters: this.federation,
      onInboxLoad: (entity) => this.federation?.inboxLoadChanged(entity),
      answers: this.turns,
      onTooLate: (answer, why) => void this.sendTooLate(answer, why),
      onNudge: (nudge) => {
        for (const listener of this.nudgeListeners) listener(nudge);
      },
      machines: createEntityMachines(deps.clock, (gid) => this.directory.byGidOrUndefined(gid)),
    };
    this.router = new Router({
      ...deps,
      config,
      metrics: this.metrics,
      directory: this.directory,
      federation: this.federation,
    });
    this.receipts = new Receipts({
      ...deps,
      metrics: this.metrics,
      router: this.router,
      federation: this.federation,
      isLocal: (gid) => this.directory.byGidOrUndefined(gid) !== undefined,
    });
    this.entityDeps.receipts = this.receipts;

    this.spawner = new Spawner({
      ...deps,
      config,
      metrics: this.metrics,
      launchers: this.options.launchers ?? {
        tmux: createTmuxLauncher({ socket: config.spawn.tmuxSocket, session: config.spawn.tmuxSession }),
        herdr: createHerdrLauncher({
          socketPath: config.herdr.socketPath,
          workspace: config.spawn.herdrWorkspace,
        }),
      },
      mcpUrl: () => this.mcpUrlReady,
      hasName: (name) => this.directory.hasName(name),
      hasEntity: (gid) => this.directory.byGidOrUndefined(gid) !== undefined,
      register: (entity) => this.registerSpawned(entity),
      deregister: async (gid) => {
        await this.deregister(gid);
      },
      deliverLocal: (envelope) => this.directory.byGidOrUndefined(envelope.to)?.accept(envelope),
      route: (envelope) => this.router.routeEnvelope(envelope),
      compose: (from, kind, to, text, extra) => this.router.compose(from, kind, to, text, extra),
      newToken,
    });
    const turns = this.turns.rehydrate();

    for (const record of readEntities(this.store)) {
      if (record.refusedGroups) {
        logger.warn(
          { gid: record.gid, name: record.name, refusedGroups: record.refusedGroups },
          'stored groups that are no group names are left out (their broker bindings removed): ' +
            'register the entity again with valid --group names',
        );
      }
      resumeOrReport(logger, { actor: entityKind, id: record.gid, name: record.name }, () => {
        const entity = EntityActor.rehydrate(record, this.entityDeps);
        this.directory.add(entity);
        entity.start();
      });
    }
    let resumed = 0;
    for (const head of readLiveActors(this.store, deliveryKind)) {
      const owner = head.owner === null ? undefined : this.directory.byGidOrUndefined(head.owner);
      const msgId = parseDeliveryActorId(head.actorId)?.msgId ?? head.actorId;
      const identity = { actor: deliveryKind, id: head.actorId, traceId: head.traceId, msgId };
      const ok = resumeOrReport(logger, identity, () => {
        if (owner) owner.rehydrateDelivery(msgId, head.traceId);
        else this.deadLetterOrphan(head.actorId, msgId, head.traceId, head.owner);
      });
      if (ok) resumed++;
    }
    const spawns = this.spawner.rehydrate();
    this.receipts.start();
    logger.info(
      {
        entities: this.directory.size,
        resumedDeliveries: resumed,
        waitingTurns: turns,
        liveSpawns: spawns,
        store: this.store.file,
      },
      'gateway started',
    );
    await this.federation?.start();
  }

  /** Where MCP clients (and spawned agents) reach this gateway; set once the server listens. */
  setMcpUrl(url: string): void {
    this.mcpUrlKnown(url);
  }

  /** Calls `listener` with every nudge (U3); returns the way to stop. */
  onNudge(listener: (nudge: Nudge) => void): () => void {
    this.nudgeListeners.add(listener);
    return () => this.nudgeListeners.delete(listener);
  }

  async stop(): Promise<void> {
    if (this.stopping || !this.store) return;
    this.stopping = true;
    this.turns?.stop();
    this.spawner?.stop();
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
    const checked = registrationSchema.safeParse(request);
    if (!checked.success) {
      throw new BridgeError(ErrorCode.badRequest, `cannot register: ${describeIssues(checked.error)}`);
    }
    if (this.directory.hasName(request.name)) {
      throw new BridgeError(
        ErrorCode.nameTaken,
        `an entity named "${request.name}" is already registered on ${this.host}; pick another name`,
      );
    }
    if (request.pane && this.options.checkPane) await this.options.checkPane(request.pane);
    const token = newToken();
    const gid = randomUUID();
    await this.addEntity({ ...request, gid, token });
    return { gid, token, name: request.name, host: this.host, kind: request.kind };
  }

  /** A spawned agent, registered under the gid and token it was launched with. */
  private async registerSpawned(entity: RegisterRequest & { gid: string; token: string }): Promise<void> {
    this.assertRunning();
    if (this.directory.hasName(entity.name)) {
      throw new BridgeError(
        ErrorCode.nameTaken,
        `an entity named "${entity.name}" is already registered on ${this.host}`,
      );
    }
    await this.addEntity(entity);
  }

  private async addEntity(request: RegisterRequest & { gid: string; token: string }): Promise<void> {
    const record: EntityRecord = {
      gid: request.gid,
      name: request.name,
      kind: request.kind,
      groups: request.groups ?? [],
      pane: request.pane ?? null,
      tokenHash: hashToken(request.token),
      created: this.hlc.tick(),
    };
    insertEntity(this.store, record);
    const entity = EntityActor.create(record, this.host, this.entityDeps);
    this.directory.add(entity);
    entity.start();
    await this.store.batch.flush();
    await this.federation?.addEntity(entity);
    this.logger.info({ gid: record.gid, name: record.name, kind: record.kind }, 'entity registered');
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
    const waiter = waitMs > 0 ? sender.waitForReply(this.router.resolve(options.to).gid, waitMs) : undefined;
    let result: SendResult;
    try {
      result = await this.router.send(sender, options);
    } catch (err) {
      waiter?.cancel();
      throw err;
    }
    waiter?.answering(result.msgId);
    const staging =
      options.waitFor === undefined
        ? undefined
        : this.waitForStage(result.msgId, options.waitFor, this.config.delivery.receiptWaitMs);
    if (!waiter) {
      if (!staging) return { ...result, stage: this.stageOf(result.msgId) };
      const ended = await staging.promise;
      return { ...result, stage: ended.stage, ...(ended.timedOut ? { timedOut: true } : {}) };
    }
    // Both: a reply ends the call at once, so does a dead end (no reply can come); otherwise it
    // returns once the stage is reached (or its wait is over) and wait_ms has passed.
    type First = { reply: Handover | null } | { staged: StageWait };
    const first: First = staging
      ? await Promise.race([
          waiter.promise.then((reply) => ({ reply })),
          staging.promise.then((staged) => ({ staged })),
        ])
      : { reply: await waiter.promise };
    let handover: Handover | null;
    let staged: StageWait | undefined;
    if ('reply' in first) {
      handover = first.reply;
      if (handover) staging?.cancel();
      staged = staging ? await staging.promise : undefined;
    } else {
      staged = first.staged;
      if (staged.stage !== null && dropStages.includes(staged.stage)) waiter.cancel();
      handover = await waiter.promise;
    }
    const stage = staged && !staged.timedOut ? staged.stage : this.stageOf(result.msgId);
    return {
      ...result,
      stage,
      ...(staged?.timedOut && !handover ? { timedOut: true } : {}),
      ...(handover ? { reply: handover.envelopes[0] ?? null, handover } : { reply: null }),
    };
  }

  /** The latest stage recorded for a message this gateway sent (null: none, or no such send). */
  private stageOf(msgId: string): ReceiptStage | null {
    const live = this.router.liveSend(msgId);
    return stageOfState(live ? live.state : readActorHead(this.store, sendKind, msgId)?.state);
  }

  /**
   * Resolves once the message reached `wanted` (or a later stage, or a dead end: endsWait) and
   * that is on disk, or after `ms` (timedOut, with the stage reached so far); `cancel` ends it
   * at once.
   */
  private waitForStage(
    msgId: string,
    wanted: WaitableStage,
    ms: number,
  ): { promise: Promise<StageWait>; cancel: () => void } {
    let finish!: (timedOut: boolean) => void;
    const promise = new Promise<StageWait>((resolve) => {
      let seen = this.stageOf(msgId);
      let done = false;
      let stopWatching = () => {};
      finish = (timedOut) => {
        if (done) return;
        done = true;
        stopWatching();
        this.clock.clearTimeout(timer);
        // What the call reports is on disk first: bridge_status says the same after a crash.
        const ended = { stage: seen, timedOut };
        this.store.batch.flush().then(
          () => resolve(ended),
          () => resolve(ended),
        );
      };
      const timer = this.clock.setTimeout(() => finish(true), ms);
      if (endsWait(seen, wanted)) {
        finish(false);
        return;
      }
      stopWatching = this.router.watchSend(msgId, (cell: SendCell) => {
        seen = stageOfState(cell.state) ?? seen;
        if (endsWait(seen, wanted)) finish(false);
      });
    });
    return { promise, cancel: () => finish(false) };
  }

  /**
   * Where a message sent from this gateway is (R-RC1): its send actor's state and every stage
   * its receipts reported. `requester` (an MCP caller) may ask about its own messages, or any
   * if it is a main or an orchestrator; the operator (admin socket) passes none.
   */
  async messageStatus(requester: EntityActor | undefined, msgId: string): Promise<MessageStatus> {
    this.assertRunning();
    const cell = await this.router.loadSend(msgId);
    if (!cell) {
      throw new BridgeError(
        ErrorCode.unknownMessage,
        `no message ${msgId} was sent from ${this.host}: bridge_status knows the messages sent through ` +
          'this gateway, by the msgId bridge_send returned',
        { details: { msgId } },
      );
    }
    const { context } = cell;
    if (requester && requester.gid !== context.sender && requester.record.kind === 'worker') {
      throw new BridgeError(
        ErrorCode.forbidden,
        `message ${msgId} was not sent by ${requester.record.name}: a worker may ask only about its own ` +
          'messages (a main or an orchestrator about any)',
      );
    }
    const { stages } = context;
    return {
      msgId,
      traceId: context.traceId,
      kind: context.kind,
      to: this.addressOfGid(context.recipient, context.recipientHost),
      stage: stages.at(-1)?.stage ?? null,
      stages,
      sendState: cell.state,
      failure: context.failure,
    };
  }

  /** A gid with the name and host this gateway knows for it. */
  private addressOfGid(gid: string, host: string | undefined): MessageStatus['to'] {
    const local = this.directory.byGidOrUndefined(gid);
    if (local) return { gid, name: local.record.name, host: this.host };
    const remote = this.federation?.roster.find(gid)[0];
    if (remote) return { gid, name: remote.name, host: remote.host };
    return host === undefined ? { gid } : { gid, host };
  }

  /**
   * Asks and parks the caller until the answer comes or the turn's deadline passes (U2).
   * Rejects with ASK_EXPIRED at the deadline, ASK_ABANDONED if the turn ends otherwise.
   */
  async ask(asker: EntityActor, options: AskOptions): Promise<AskOutcome> {
    this.assertRunning();
    const { config, clock } = this;
    const timeoutMs = Math.max(
      1,
      Math.min(options.timeoutMs ?? config.ask.defaultTimeoutMs, config.limits.maxWaitMs),
    );
    const to = this.router.resolve(options.to);
    const key = options.idempotencyKey;
    // A key another call used is refused before a turn opens for this one.
    const keyed = keyedSend({ kind: WireKind.ask, text: options.question, idempotencyKey: key }, to.gid);
    if (keyed) this.router.repeatOf(asker, keyed);
    const now = clock.now();
    const turnId = key === undefined ? uuidv7(now) : namedUuid(asker.gid, `turn\u0000${key}`);
    const earlier = key === undefined ? undefined : this.turns.stateOf(turnId);
    if (earlier) {
      // A retry of the same ask: attach to the turn if it still waits, else say how it ended.
      const context = earlier.context;
      if (earlier.state !== 'waiting' || !context) throw askEnded(earlier.state, turnId);
      this.logger.info(
        { traceId: context.traceId, turnId },
        'bridge_ask retried: attached to the waiting turn',
      );
      const outcome = await this.turns.attach(turnId, options.signal);
      return this.askOutcome(outcome, context.askMsgId, turnId, context.traceId, to);
    }
    const askMsgId = key === undefined ? uuidv7(now) : namedUuid(asker.gid, key);
    const traceId = newTraceId();
    const deadline = now + timeoutMs;
    this.turns.open({
      turnId,
      askMsgId,
      traceId,
      asker: asker.gid,
      recipient: to.gid,
      startedAt: now,
      deadline,
    });
    const parked = this.turns.attach(turnId, options.signal);
    try {
      await this.router.send(asker, {
        kind: WireKind.ask,
        to: options.to,
        text: options.question,
        turnId,
        msgId: askMsgId,
        traceId,
        expiresAt: deadline,
        idempotencyKey: key,
      });
    } catch (err) {
      this.turns.abandon(turnId, `the ask could not be sent: ${(err as Error).message}`);
      await parked;
      throw err;
    }
    return this.askOutcome(await parked, askMsgId, turnId, traceId, to);
  }

  private askOutcome(
    outcome: TurnOutcome,
    askId: string,
    turnId: string,
    traceId: string,
    to: Address,
  ): AskOutcome {
    this.metrics.asks.inc({ outcome: outcome.state });
    if (outcome.state !== 'answered') {
      throw new BridgeError(
        outcome.state === 'expired' ? ErrorCode.askExpired : ErrorCode.askAbandoned,
        outcome.state === 'expired'
          ? `${to.name}@${to.host} did not answer in time (${outcome.why}; ask ${askId}): carry on without the answer or ask again; ` +
              'an answer that still comes is not injected anywhere, and its sender is told it came too late'
          : `the ask ended without an answer: ${outcome.why} (ask ${askId})`,
        { details: { askId, turnId, traceId } },
      );
    }
    const answer = outcome.handover.envelopes[0] as Envelope;
    return { askId, turnId, traceId, to, answer, handover: outcome.handover };
  }

  /**
   * Answers an ASK this entity received. Only the first answer counts (a repeat returns the
   * first one's msgId). When this gateway can tell the turn is over (the ask's deadline has
   * passed, or the asker is here and no longer waiting), it says `too_late`.
   */
  async answer(main: EntityActor, askId: string, text: string): Promise<AnswerOutcome> {
    this.assertRunning();
    await this.store.batch.flush();
    const rows = readActorEvents(this.store, deliveryKind, deliveryActorId(askId, main.gid));
    const input = rows[0]?.data as
      | { kind?: string; turnId?: string; sender?: string; deadline?: number }
      | undefined;
    if (!input) {
      throw new BridgeError(
        ErrorCode.unknownAsk,
        `no ask ${askId} was delivered to ${main.record.name}: ask_id is the msgId of an ASK you received (bridge_drain shows it)`,
      );
    }
    if (input.kind !== WireKind.ask || input.turnId === undefined || input.sender === undefined) {
      throw new BridgeError(
        ErrorCode.unknownAsk,
        `message ${askId} is a ${input.kind ?? 'message'}, not an ASK: answer it with bridge_reply`,
      );
    }
    const turnId = input.turnId;
    const traceId = rows[0]?.traceId ?? newTraceId();
    const msgId = namedUuid(main.gid, `answer\u0000${askId}`);
    if (input.deadline !== undefined && this.clock.now() > input.deadline) {
      const why = `the ask expired at ${new Date(input.deadline).toISOString()}`;
      this.logger.warn({ traceId, askId, turnId }, `answer not sent: ${why}`);
      this.router.recordRefusal(main, {
        msgId,
        traceId,
        kind: WireKind.answer,
        to: input.sender,
        text,
        code: ErrorCode.askExpired,
        detail: why,
      });
      await this.store.batch.flush();
      return { msgId, askId, turnId, traceId, status: 'too_late', duplicate: false, why };
    }
    const sent = await this.router.send(main, {
      kind: WireKind.answer,
      to: input.sender,
      text,
      inReplyTo: askId,
      turnId,
      traceId,
      idempotencyKey: `answer\u0000${askId}`,
    });
    const asker = this.directory.byGidOrUndefined(input.sender);
    if (!asker)
      return { msgId: sent.msgId, askId, turnId, traceId, status: 'sent', duplicate: sent.duplicate };
    await this.store.batch.flush();
    const state = readActorHead(this.store, deliveryKind, deliveryActorId(sent.msgId, asker.gid))?.state;
    const tooLate = state === 'too-late';
    return {
      msgId: sent.msgId,
      askId,
      turnId,
      traceId,
      status: tooLate ? 'too_late' : 'delivered',
      duplicate: sent.duplicate,
      ...(tooLate ? { why: 'the asking turn was no longer waiting' } : {}),
    };
  }

  /** Tells an answer's sender that it came too late for its turn (TOO_LATE, U2). */
  private async sendTooLate(answer: Envelope, why: string): Promise<void> {
    const notice = this.router.compose(
      gatewayAddress(this.host),
      WireKind.tooLate,
      answer.from.gid,
      `your answer ${answer.msgId} came too late and was not given to anyone: ${why}`,
      {
        msgId: namedUuid(answer.msgId, 'too-late'),
        traceId: answer.traceId,
        inReplyTo: answer.msgId,
        turnId: answer.turnId ?? answer.msgId,
      },
    );
    await this.router
      .routeEnvelope(notice)
      .catch((err: unknown) =>
        this.logger.warn({ err, traceId: answer.traceId }, 'could not send a TOO_LATE notice'),
      );
  }

  /**
   * Asks `host` to start an agent from one of its profiles (U4) and waits (up to `waitMs`) for
   * the SPAWN_RESULT. On this host it runs without the broker.
   */
  async spawn(requester: EntityActor, options: SpawnOptions): Promise<ControlOutcome> {
    this.assertRunning();
    const now = this.clock.now();
    const key = options.idempotencyKey;
    const requestId = key === undefined ? uuidv7(now) : namedUuid(requester.gid, `spawn\u0000${key}`);
    const { profile, name, groups, brief } = options;
    const keyed = keyedCall(key, WireKind.spawn, options.host, { profile, name, groups, brief });
    if (keyed) this.router.claimKey(requester, keyed, requestId);
    // A retry keeps the first request's trace.
    if (key !== undefined) await this.store.batch.flush();
    const traceId = key === undefined ? undefined : this.router.traceOfSent(requestId);
    // The wire's own rule, here at the edge: a request the target could not parse is never sent
    // (nor kept for this host's spawner to read back).
    const spawn = spawnRequestSchema.safeParse({
      requestId,
      profile: options.profile,
      ...(options.name === undefined ? {} : { name: options.name }),
      ...(options.groups === undefined ? {} : { groups: options.groups }),
    });
    if (!spawn.success) {
      throw new BridgeError(ErrorCode.badRequest, `cannot spawn: ${describeIssues(spawn.error)}`);
    }
    const envelope = this.router.compose(
      addressOf(requester, this.host),
      WireKind.spawn,
      options.host,
      options.brief,
      {
        msgId: requestId,
        ...(traceId === undefined ? {} : { traceId }),
        expiresAt: now + this.config.spawn.requestTtlMs,
        spawn: spawn.data,
      },
    );
    return this.control(requester, envelope, options.host, options.waitMs);
  }

  /** Asks the host of a spawned agent to stop it and deregister it (U4). */
  async stopSpawned(requester: EntityActor, gid: string, waitMs?: number): Promise<ControlOutcome> {
    this.assertRunning();
    const local = this.directory.byGidOrUndefined(gid);
    const host = local ? this.host : this.federation?.roster.find(gid)[0]?.host;
    if (host === undefined) {
      throw new BridgeError(
        ErrorCode.unknownRecipient,
        `no entity ${gid} on ${this.host} or in the roster: call bridge_roster to see who runs where`,
      );
    }
    const requestId = uuidv7(this.clock.now());
    const envelope = this.router.compose(addressOf(requester, this.host), WireKind.stop, host, '', {
      msgId: requestId,
      stop: { requestId, gid },
    });
    return this.control(requester, envelope, host, waitMs);
  }

  private async control(
    requester: EntityActor,
    envelope: Envelope,
    host: string,
    waitMs: number | undefined,
  ): Promise<ControlOutcome> {
    const wait = Math.min(waitMs ?? this.config.spawn.waitMs, this.config.limits.maxWaitMs);
    const waiter = requester.waitForReply(undefined, wait);
    waiter.answering(envelope.msgId);
    try {
      if (host === this.host) this.onControl(envelope, undefined);
      else {
        if (!this.federation) {
          throw new BridgeError(
            ErrorCode.notAvailable,
            `${host} is another host and this gateway runs single-host (set broker.uri / BRIDGE_BROKER_URI)`,
          );
        }
        await this.router.sendControl(envelope, host);
      }
    } catch (err) {
      waiter.cancel();
      throw err;
    }
    const base = { requestId: envelope.msgId, traceId: envelope.traceId, host };
    const handover = await waiter.promise;
    const result = handover?.envelopes[0]?.result;
    if (!handover || !result) return { ...base, status: 'pending' };
    handover.confirm();
    return { ...base, status: 'done', result };
  }

  private onControl(envelope: Envelope, inbound: InboundHandle | undefined): void {
    if (envelope.kind === WireKind.spawn) this.spawner.receiveSpawn(envelope, inbound);
    else if (envelope.kind === WireKind.stop) void this.spawner.receiveStop(envelope, inbound);
    else if (envelope.kind === WireKind.receipt && inbound) this.receipts.receive(envelope, inbound);
    else inbound?.ack();
  }

  /** A SPAWN the control queue dead-lettered for its content: its requester is told why. */
  private onRefusedSpawn(request: SpawnHeader, why: string): void {
    void this.spawner.refuseUnreadable(request, why);
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
    const sessionsByEntity = (await this.metrics.mcpSessions.get()).values.map(
      (v) => [String(v.labels.entity), v.value] as const,
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
      mcpSessions: {
        total: sessionsByEntity.reduce((sum, [, n]) => sum + n, 0),
        byEntity: Object.fromEntries(sessionsByEntity),
      },
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

  /**
   * Moves dead letters back to their inboxes (all, or one msgId), in one pass; those refused on
   * arrival only when forced. Returns how many moved and how many were left, by reason.
   */
  async requeueDeadLetters(msgId?: string, force = false): Promise<RequeueResult> {
    return this.requireFederation('bridge dlq requeue').requeueDeadLetters(msgId, force);
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
