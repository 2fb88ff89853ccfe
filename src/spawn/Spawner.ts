import { randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { type Config, type Profile, workspacesDir } from '../config/schema.js';
import { spawnConnection } from '../connect/agentConfigs.js';
import { applyEdit } from '../connect/configFiles.js';
import type { InboundHandle } from '../deliver/handover.js';
import { asBridgeError, BridgeError, ErrorCode } from '../errors.js';
import { ActorCell, type RuntimeDeps } from '../kernel/ActorCell.js';
import type { Clock } from '../kernel/clock.js';
import { resumeOrReport } from '../kernel/resumeOrReport.js';
import type { ActorKind } from '../machines/index.js';
import { spawnMachine } from '../machines/spawnMachine.js';
import type { Metrics } from '../metrics/metrics.js';
import { agentHostHello } from '../panes/agentHostInjector.js';
import { readActorHead, readLiveActors } from '../store/actorHeads.js';
import { findSpawnOfGid } from '../store/findSpawnOfGid.js';
import { purgeMessage, putMessage, readMessage, storedEnvelope } from '../store/messageBodies.js';
import { readActorEvents } from '../store/readEvents.js';
import { shellQuote } from '../text/shellQuote.js';
import { type AgentHostHello, DeliveryPath, type OwnerDecision } from '../wire/agentHost.js';
import { byteLength, digestText } from '../wire/digest.js';
import {
  type Address,
  type ControlResult,
  describeIssues,
  type Envelope,
  envelopeSchema,
  type OwnerAnswerRequest,
  type SpawnHeader,
  WireKind,
} from '../wire/envelope.js';
import { gatewayAddress } from '../wire/gatewayAddress.js';
import { namedUuid } from '../wire/ids.js';
import type { PaneTarget } from '../wire/paneTarget.js';
import { admitSpawn } from './admitSpawn.js';
import type { Launcher } from './launcher.js';
import { provisionWorkspace } from './provisionWorkspace.js';
import {
  answerResult,
  mayAnswer,
  mayStop,
  resultText,
  spawnResultOf,
  stopResult,
  unreadableSpawnResult,
} from './spawnResults.js';

export const spawnKind: ActorKind = 'spawn';
/** SPAWN envelopes (their brief) are kept under this recipient until the spawn is over. */
const spawnInbox = '>spawn';
const answerRetryMs = 5_000;
/** How long a spawned agent host may take to answer (its agent to start and open a session). */
const agentHostWaitMs = 90_000;

/**
 * Says hello to the agent host at `socketPath` every 250 ms until it answers (resolves with its
 * hello; undefined once the spawner stopped); throws after `waitMs`, or as soon as its window is
 * gone (the host exited: its agent did not start).
 */
async function waitForAgentHost(
  socketPath: string,
  waitMs: number,
  clock: Clock,
  running: { stopped(): boolean; windowOpen(): Promise<boolean> },
): Promise<AgentHostHello | undefined> {
  let last: unknown;
  for (let tries = Math.ceil(waitMs / 250); tries > 0 && !running.stopped(); tries--) {
    try {
      return await agentHostHello(socketPath, 2_000);
    } catch (err) {
      last = err;
      if (!(await running.windowOpen())) {
        throw new BridgeError(
          ErrorCode.launchFailed,
          `the agent host at ${socketPath} exited before it answered: its agent did not start (run the profile's command by hand to see why)`,
        );
      }
      await new Promise((resolve) => clock.setTimeout(() => resolve(undefined), 250));
    }
  }
  if (running.stopped()) return undefined;
  throw new BridgeError(
    ErrorCode.launchFailed,
    `the agent host at ${socketPath} did not answer within ${waitMs / 1000} s (${last instanceof Error ? last.message : String(last)}): look at its window for why`,
  );
}

/** What an answer needs of the request it answers. */
type RequestRef = Pick<Envelope, 'from' | 'traceId' | 'msgId'>;

/** The part of the config the spawner reads: its profiles and where spawned agents work. */
export type SpawnerConfig = Pick<Config, 'profiles' | 'spawn' | 'home'>;

/** How long a connected agent's brief waits for the agent's MCP client to come up. */
const briefWaitMs = 60_000;

/** What the spawner needs from the gateway around it. */
export interface SpawnerDeps extends RuntimeDeps {
  config: SpawnerConfig;
  metrics: Metrics;
  launchers: { tmux: Launcher; herdr: Launcher };
  /** The MCP endpoint spawned agents connect to, once the gateway serves it. */
  mcpUrl(): Promise<string>;
  /**
   * The agentbridge CLI as a command line, for a profile on an agent's own protocol: its window
   * runs `agent-host` with the profile's command as the agent.
   */
  agentHostCommand?: readonly string[] | undefined;
  hasName(name: string): boolean;
  hasEntity(gid: string): boolean;
  /** Registers the launched agent under the gid and token it was started with. */
  register(entity: {
    gid: string;
    token: string;
    name: string;
    kind: Profile['kind'];
    groups: string[];
    pane: PaneTarget;
  }): Promise<void>;
  deregister(gid: string): Promise<void>;
  /**
   * Gives a local worker's agent its owner's answer (EntityActor.answerOwner): resolves the
   * number of the request it answered, rejects with why when there was none to answer.
   */
  answerOwner(gid: string, decision: OwnerDecision, by: string, request?: number): Promise<number>;
  /** Hands a message to a local entity (the brief). */
  deliverLocal(envelope: Envelope): void;
  /** Sends a gateway-written message (SPAWN_RESULT) to its recipient, here or across. */
  route(envelope: Envelope): Promise<void>;
  compose(
    from: Address,
    kind: Envelope['kind'],
    to: string,
    text: string,
    extra: Partial<Envelope>,
  ): Envelope;
  newToken(): string;
}

type SpawnCell = ActorCell<typeof spawnMachine>;

/**
 * Runs SPAWN and STOP requests for this host (U4). Each spawn is a persisted actor keyed by
 * its request id, so a SPAWN that comes twice launches once. The host owns its profiles: a
 * request names one, and nothing it carries is ever run.
 */
export class Spawner {
  private readonly cells = new Map<string, SpawnCell>();
  /** Running spawned entities, by gid: what STOP may end. */
  private readonly byGid = new Map<string, SpawnCell>();
  private readonly machine;
  private stopped = false;
  /** Owner's answers from another host being judged and given, by request id: their deliveries to settle after. */
  private readonly answering = new Map<string, InboundHandle[]>();
  /** Per gid being launched connected: what ends the brief's wait for its MCP client. */
  private readonly toolsListed = new Map<string, (listed: boolean) => void>();

  constructor(private readonly deps: SpawnerDeps) {
    this.machine = spawnMachine.provide({
      actions: {
        begin: ({ context }) => queueMicrotask(() => this.begin(context.requestId)),
        launch: ({ context }) => queueMicrotask(() => void this.launch(context.requestId)),
        answer: ({ context }) => queueMicrotask(() => void this.answer(context.requestId)),
      },
    });
  }

  /** Resumes the spawns a restart interrupted (and keeps the running ones stoppable). */
  rehydrate(): number {
    let resumed = 0;
    for (const head of readLiveActors(this.deps.store, spawnKind)) {
      const identity = { actor: spawnKind, id: head.actorId, traceId: head.traceId };
      const ok = resumeOrReport(this.deps.logger, identity, () => {
        const rows = readActorEvents(this.deps.store, spawnKind, head.actorId);
        const cell = ActorCell.rehydrate(
          this.machine,
          rows,
          { kind: spawnKind, id: head.actorId, traceId: head.traceId, msgId: rows[0]?.msgId ?? null },
          this.deps,
        );
        this.track(cell);
        cell.send({ type: 'actor.rehydrated' });
      });
      if (ok) resumed++;
    }
    return resumed;
  }

  stop(): void {
    this.stopped = true;
    for (const done of [...this.toolsListed.values()]) done(false);
    for (const cell of this.cells.values()) cell.stop();
  }

  /** `gid`'s MCP client has bridge's tool list: a brief waiting for it goes in. */
  mcpToolsListed(gid: string): void {
    this.toolsListed.get(gid)?.(true);
  }

  /** Resolves true once `gid`'s MCP client has bridge's tool list, false after `briefWaitMs` or at stop. */
  private toolsListedBy(gid: string): Promise<boolean> {
    return new Promise((resolve) => {
      const done = (listed: boolean) => {
        this.deps.clock.clearTimeout(timer);
        this.toolsListed.delete(gid);
        resolve(listed);
      };
      const timer = this.deps.clock.setTimeout(() => done(false), briefWaitMs);
      this.toolsListed.set(gid, done);
    });
  }

  /** A SPAWN, STOP or OWNER_ANSWER for this host, from the control queue or from a requester on this host. */
  receiveControl(envelope: Envelope, inbound?: InboundHandle): void {
    if (envelope.kind === WireKind.spawn) this.receiveSpawn(envelope, inbound);
    else if (envelope.kind === WireKind.stop) void this.receiveStop(envelope, inbound);
    else if (envelope.kind === WireKind.ownerAnswer) {
      this.receiveOwnerAnswer(envelope, inbound).catch((err: unknown) =>
        this.deps.logger.error({ err, traceId: envelope.traceId }, "an owner's answer failed"),
      );
    } else this.settle(inbound);
  }

  /** A SPAWN for this host (from the control queue, or a local requester). */
  receiveSpawn(envelope: Envelope, inbound?: InboundHandle): void {
    const request = envelope.spawn;
    if (!request) {
      this.settle(inbound);
      return;
    }
    const id = request.requestId;
    if (this.cells.has(id) || readActorHead(this.deps.store, spawnKind, id)) {
      this.deps.logger.info(
        { traceId: envelope.traceId, requestId: id },
        'SPAWN seen before: nothing launched again',
      );
      this.settle(inbound);
      void this.answerAgain(envelope).catch((err: unknown) =>
        this.deps.logger.warn({ err, traceId: envelope.traceId }, 'could not answer a repeated SPAWN'),
      );
      return;
    }
    // Kept to be read back strictly later: only what the wire schema takes is kept at all.
    const checked = envelopeSchema.safeParse(envelope);
    if (!checked.success) {
      this.settle(inbound);
      void this.refuseUnreadable(envelope, describeIssues(checked.error));
      return;
    }
    putMessage(this.deps.store, spawnInbox, envelope);
    const cell = ActorCell.create(
      this.machine,
      {
        requestId: id,
        traceId: envelope.traceId,
        msgId: envelope.msgId,
        requester: envelope.from,
        profile: request.profile,
        ...(request.name === undefined ? {} : { name: request.name }),
        groups: request.groups ?? [],
        digest: digestText(envelope.text),
        size: byteLength(envelope.text),
      },
      { kind: spawnKind, id, traceId: envelope.traceId, msgId: envelope.msgId },
      this.deps,
    );
    this.track(cell);
    this.settle(inbound);
  }

  /** Whether `gid` is an agent this host spawned and still runs (bridge_stop may end it). */
  isRunning(gid: string): boolean {
    return this.byGid.has(gid);
  }

  /** A STOP for an agent this host spawned: close its pane, deregister it, answer. */
  async receiveStop(envelope: Envelope, inbound?: InboundHandle): Promise<void> {
    const stop = envelope.stop;
    if (!stop) return this.settle(inbound);
    const cell = this.byGid.get(stop.gid);
    let result: ControlResult;
    if (cell && cell.state === 'running' && !mayStop(envelope.from, cell.context.requester.gid)) {
      result = stopResult.forbidden(stop, envelope.from, cell.context.entityName ?? stop.gid);
    } else if (cell && cell.state === 'running') {
      const { pane } = cell.context;
      try {
        if (pane) await this.launcherFor(cell).close(pane);
        if (this.deps.hasEntity(stop.gid)) await this.deps.deregister(stop.gid);
        cell.send({ type: 'spawn.stopped', by: `${envelope.from.name}@${envelope.from.host}` });
        this.byGid.delete(stop.gid);
        result = stopResult.stopped(stop, this.deps.host);
      } catch (err) {
        result = stopResult.failed(stop, asBridgeError(err, ErrorCode.internal));
      }
    } else {
      result = this.stoppedSince(stop.gid)
        ? stopResult.stopped(stop, this.deps.host)
        : stopResult.notSpawned(stop, this.deps.host);
    }
    this.settle(inbound);
    await this.sendResult(envelope, result).catch((err: unknown) =>
      this.deps.logger.warn({ err, traceId: envelope.traceId }, 'could not answer a STOP'),
    );
  }

  /**
   * An owner's answer from another host to a permission request of an agent this host spawned:
   * taken only from whoever spawned it (or an operator on its host) and answered to it. The
   * agent is asked at most once per request: a request that comes again while it is being
   * given waits for it (its delivery is settled with the first), and one that comes later is
   * answered from its mark on the spawn.
   */
  async receiveOwnerAnswer(envelope: Envelope, inbound?: InboundHandle): Promise<void> {
    const answer = envelope.ownerAnswer;
    if (!answer) return this.settle(inbound);
    const waiting = this.answering.get(answer.requestId);
    if (waiting) {
      if (inbound) waiting.push(inbound);
      return;
    }
    const inbounds = inbound ? [inbound] : [];
    this.answering.set(answer.requestId, inbounds);
    try {
      const result = await this.ownerAnswerResult(envelope.from, answer);
      await this.sendResult(envelope, result).catch((err: unknown) =>
        this.deps.logger.warn({ err, traceId: envelope.traceId }, "could not answer an owner's answer"),
      );
    } finally {
      this.answering.delete(answer.requestId);
      for (const handle of inbounds) this.settle(handle);
    }
  }

  /** How an owner's answer from another host goes: judged, then given once or read from its mark. */
  private async ownerAnswerResult(from: Address, answer: OwnerAnswerRequest): Promise<ControlResult> {
    const { host } = this.deps;
    const cell = this.byGid.get(answer.gid);
    if (cell?.state !== 'running')
      return answerResult.notSpawned(answer, host, this.stoppedSince(answer.gid));
    const target = cell.context.entityName ?? answer.gid;
    const requester = cell.context.requester as Address;
    if (!mayAnswer(from, requester)) return answerResult.forbidden(answer, from, target, requester);
    const mark = cell.context.ownerAnswers.find((m) => m.requestId === answer.requestId);
    if (!mark) return this.giveOwnerAnswer(cell, from, answer);
    if (mark.failure) return answerResult.failed(answer, mark.failure);
    if (mark.request !== null && mark.decision !== null) {
      return answerResult.answered(answer, host, target, { request: mark.request, decision: mark.decision });
    }
    return answerResult.unknown(answer, host, target, 'its gateway stopped while giving it');
  }

  /** Marks the answer on the spawn, gives it to the agent, records how it went. */
  private async giveOwnerAnswer(
    cell: SpawnCell,
    from: Address,
    answer: OwnerAnswerRequest,
  ): Promise<ControlResult> {
    const { requestId, gid, decision, request } = answer;
    const by = `${from.name}@${from.host}`;
    const target = cell.context.entityName ?? gid;
    cell.send({ type: 'spawn.ownerAnswering', requestId, by });
    await this.deps.store.batch.flush();
    try {
      const taken = await this.deps.answerOwner(gid, decision, by, request);
      cell.send({ type: 'spawn.ownerAnswered', requestId, request: taken, decision });
      return answerResult.answered(answer, this.deps.host, target, { request: taken, decision });
    } catch (err) {
      const error = asBridgeError(err, ErrorCode.internal);
      // Its agent host did not answer: it may have taken it, so the mark stays as it is.
      if (error.code === ErrorCode.paneUnavailable) {
        return answerResult.unknown(answer, this.deps.host, target, error.message);
      }
      cell.send({ type: 'spawn.ownerAnswerFailed', requestId, code: error.code, message: error.message });
      return answerResult.failed(answer, error);
    } finally {
      await this.deps.store.batch.flush();
    }
  }

  /** Whether `gid` is an agent this host spawned and has stopped since (its spawn's log says so). */
  private stoppedSince(gid: string): boolean {
    const spawn = findSpawnOfGid(this.deps.store, gid);
    return spawn !== undefined && readActorHead(this.deps.store, spawnKind, spawn)?.state === 'stopped';
  }

  private track(cell: SpawnCell): void {
    this.cells.set(cell.context.requestId, cell);
    if (cell.context.gid !== null && cell.state === 'running') this.byGid.set(cell.context.gid, cell);
    cell.onTransition = (transition) => {
      if (transition.to === 'running' && cell.context.gid !== null) this.byGid.set(cell.context.gid, cell);
      if (transition.to === 'running' || transition.to === 'refused') {
        this.deps.metrics.spawns.inc({ outcome: transition.to });
      }
      if (transition.done) {
        this.cells.delete(cell.context.requestId);
        purgeMessage(this.deps.store, cell.context.msgId, spawnInbox);
      }
    };
  }

  private settle(inbound: InboundHandle | undefined): void {
    if (inbound) this.deps.store.batch.afterCommit(() => inbound.ack());
  }

  /** Checks the request against this host's profiles; picks the gid and the name. */
  private begin(requestId: string): void {
    const cell = this.cells.get(requestId);
    if (cell?.state !== 'requested') return;
    const stored = readMessage(this.deps.store, cell.context.msgId, spawnInbox);
    if (!stored.ok && !stored.missing) {
      this.deps.logger.error(
        { traceId: cell.context.traceId, requestId, detail: stored.detail },
        'a kept SPAWN does not parse: refused with the reason',
      );
      cell.send({
        type: 'spawn.refused',
        code: ErrorCode.badRequest,
        message: `${this.deps.host} cannot use this spawn request: ${stored.detail}`,
      });
      return;
    }
    const admission = admitSpawn(cell.context, {
      host: this.deps.host,
      profiles: this.deps.config.profiles,
      hasName: (name) => this.deps.hasName(name),
      keptRequest: storedEnvelope(stored)?.spawn,
    });
    if (admission.ok) cell.send({ type: 'spawn.launching', gid: randomUUID(), name: admission.name });
    else cell.send({ type: 'spawn.refused', code: admission.code, message: admission.message });
  }

  /**
   * Provisions, launches and registers the agent, then gives it its brief. After a crash it
   * first looks at what the interrupted attempt left: registered already means launched; an
   * unregistered window (its token was never recorded) is closed and the launch done again.
   */
  private async launch(requestId: string): Promise<void> {
    const cell = this.cells.get(requestId);
    if (cell?.state !== 'launching') return;
    const { gid, entityName: name } = cell.context;
    if (gid === null || name === null) return;
    const launcher = this.launcherFor(cell);
    const profile = this.deps.config.profiles[cell.context.profile];
    try {
      if (!profile)
        throw new BridgeError(
          ErrorCode.unknownProfile,
          `profile ${cell.context.profile} was removed from the config`,
        );
      if (this.deps.hasEntity(gid)) {
        // Registered before an interruption: the brief may not be in yet (kept once by its msgId).
        this.deliverBrief(cell, gid);
        cell.send({ type: 'spawn.launched', pane: (await launcher.find(name)) ?? null });
        return;
      }
      const leftover = await launcher.find(name);
      if (leftover) {
        this.deps.logger.warn(
          { traceId: cell.context.traceId, name },
          'closing the window an interrupted launch left; launching again',
        );
        await launcher.close(leftover);
      }
      const cwd = profile.repo
        ? await provisionWorkspace(profile.repo, this.workspaces(profile), name)
        : (profile.cwd ?? process.cwd());
      const token = this.deps.newToken();
      const mcpUrl = await this.deps.mcpUrl();
      const connection = profile.agent ? spawnConnection(profile.agent, mcpUrl, cwd) : undefined;
      if (connection?.edit) applyEdit(connection.edit);
      const agentCommand = connection ? connection.command(profile.command) : profile.command;
      const host =
        profile.path === DeliveryPath.terminal ? undefined : this.agentHostFor(profile, name, cwd, launcher);
      const pane = await launcher.launch({
        name,
        command: host ? host.command(agentCommand) : agentCommand,
        cwd,
        env: {
          ...profile.env,
          BRIDGE_MCP_URL: mcpUrl,
          BRIDGE_TOKEN: token,
          BRIDGE_GID: gid,
          BRIDGE_NAME: name,
          BRIDGE_HOST_ID: this.deps.host,
        },
      });
      if (this.stopped) return;
      // Asked before the agent can be let in: its client may list the tools as soon as it is
      // registered.
      const connected = connection && !host ? this.toolsListedBy(gid) : undefined;
      await this.deps.register({
        gid,
        token,
        name,
        kind: profile.kind,
        groups: [...profile.groups, ...cell.context.groups],
        pane: host ? host.target : pane,
      });
      // An agent on its own protocol connects its MCP servers as its session opens (so it is
      // registered first: its token must be known by then), and the host answers once it has:
      // its first prompt has bridge's tools. Messages wait for the host meanwhile (no host
      // answering reads as an unknown status).
      const hello = host ? await this.answeringOrUndone(host.answering, gid, pane, launcher) : undefined;
      // A connected agent's first turn should have bridge's tools: the brief waits until its MCP
      // client has them (the agent shows its prompt before its MCP servers are up).
      if (connected && !(await connected) && !this.stopped) {
        this.deps.logger.warn(
          { traceId: cell.context.traceId, name, waitedMs: briefWaitMs },
          "the spawned agent's MCP client did not connect in time: its brief goes in without bridge's tools ready",
        );
      }
      if (this.stopped) return;
      this.deliverBrief(cell, gid);
      cell.send({ type: 'spawn.launched', pane, ...(hello?.attach ? { attach: hello.attach } : {}) });
    } catch (err) {
      this.toolsListed.get(gid)?.(false); // a registration that failed: nothing will connect
      const error = asBridgeError(err, ErrorCode.launchFailed);
      this.deps.logger.error({ err, traceId: cell.context.traceId, name }, 'spawn failed');
      if (cell.state === 'launching')
        cell.send({ type: 'spawn.launchFailed', code: error.code, message: error.message });
    }
  }

  /**
   * Waits for a spawned agent host; one that never answers leaves nothing behind: its window is
   * closed and the entity registered for it deregistered before the launch fails.
   */
  private async answeringOrUndone(
    answering: () => Promise<AgentHostHello | undefined>,
    gid: string,
    pane: PaneTarget,
    launcher: Launcher,
  ): Promise<AgentHostHello | undefined> {
    try {
      return await answering();
    } catch (err) {
      await launcher.close(pane).catch(() => undefined);
      if (this.deps.hasEntity(gid)) await this.deps.deregister(gid);
      throw err;
    }
  }

  /**
   * For a profile on an agent's own protocol: the window's command (the agent host, with the
   * agent after `--`), the worker's target (the host's socket, in the home's `agent-hosts`), and
   * a wait until the host answers.
   */
  private agentHostFor(profile: Profile, name: string, cwd: string, launcher: Launcher) {
    const cli = this.deps.agentHostCommand;
    if (!cli) {
      throw new BridgeError(
        ErrorCode.launchFailed,
        `profile path ${profile.path} needs the agentbridge CLI to run its agent host: start the gateway with \`agentbridge start\``,
      );
    }
    const dir = join(this.deps.config.home, 'agent-hosts');
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const socketPath = join(dir, `${name}.sock`);
    const target: PaneTarget = {
      type: 'agent',
      socketPath,
      ...(profile.busy === undefined ? {} : { busy: profile.busy }),
    };
    const words = [...cli, 'agent-host', '--socket', socketPath, '--protocol', profile.path, '--cwd', cwd];
    return {
      target,
      command: (agent: string) => `${words.map(shellQuote).join(' ')} -- ${agent}`,
      answering: () =>
        waitForAgentHost(socketPath, agentHostWaitMs, this.deps.clock, {
          stopped: () => this.stopped,
          windowOpen: async () => (await launcher.find(name)) !== undefined,
        }),
    };
  }

  private workspaces(profile: Profile): string {
    return profile.cwd ?? workspacesDir(this.deps.config);
  }

  /** The brief, as the first message from the requester in the new agent's inbox. */
  private deliverBrief(cell: SpawnCell, gid: string): void {
    const spawn = storedEnvelope(readMessage(this.deps.store, cell.context.msgId, spawnInbox));
    if (!spawn || spawn.text === '') return;
    const brief = this.deps.compose(spawn.from, WireKind.send, gid, spawn.text, {
      msgId: namedUuid(cell.context.requestId, 'brief'),
      traceId: spawn.traceId,
    });
    this.deps.deliverLocal(brief);
  }

  /**
   * A SPAWN that came again (a retried bridge_spawn with the same idempotency_key, or a
   * redelivery) launches nothing, but once the first one has an outcome the requester is told
   * again how it went: the first SPAWN_RESULT may already be taken by the first call (or be on
   * its way there, not yet confirmed), and a retry that waits for one would wait in vain.
   * Still requested or launching: the answer that ends the launch serves.
   */
  private async answerAgain(envelope: Envelope): Promise<void> {
    const requestId = envelope.spawn?.requestId;
    if (requestId === undefined) return;
    await this.deps.store.batch.flush();
    const cell = this.cells.get(requestId) ?? this.recorded(requestId);
    if (!cell || cell.state === 'requested' || cell.state === 'launching') return;
    if (envelope.from.gid !== cell.context.requester.gid) {
      this.deps.logger.warn(
        { traceId: envelope.traceId, requestId },
        'a repeated SPAWN from another requester than the first: not answered',
      );
      return;
    }
    // A fresh msgId per repeat (same bytes again: same msgId, deduplicated), so the requester's
    // gateway does not drop it as the first answer's duplicate.
    await this.sendResult(
      envelope,
      spawnResultOf(cell.state, cell.context, this.deps.host),
      namedUuid(requestId, `result/spawn again ${envelope.hlc}`),
    );
  }

  /** A spawn actor as its log has it (one that is over is no longer kept in memory). */
  private recorded(requestId: string): SpawnCell | undefined {
    const rows = readActorEvents(this.deps.store, spawnKind, requestId);
    const first = rows[0];
    if (!first) return undefined;
    return ActorCell.rehydrate(
      this.machine,
      rows,
      { kind: spawnKind, id: requestId, traceId: first.traceId, msgId: first.msgId },
      this.deps,
    );
  }

  /** SPAWN_RESULT to the requester; recorded as answered once it is on its way. */
  private async answer(requestId: string): Promise<void> {
    const cell = this.cells.get(requestId);
    if (!cell || cell.context.answered || (cell.state !== 'running' && cell.state !== 'refused')) return;
    const { context } = cell;
    const result = spawnResultOf(cell.state, context, this.deps.host);
    const request: RequestRef = {
      from: context.requester as Address,
      msgId: context.msgId,
      traceId: context.traceId,
    };
    try {
      await this.sendResult(request, result);
      cell.send({ type: 'spawn.answered' });
    } catch (err) {
      this.deps.logger.warn({ err, traceId: context.traceId }, 'could not send SPAWN_RESULT; retrying');
      this.deps.clock.setTimeout(() => void this.answer(requestId), answerRetryMs);
    }
  }

  /**
   * Answers a SPAWN this host cannot take as it is (dead-lettered from the control queue, or a
   * local request the wire schema refuses) with the refusal: its requester waits for a
   * SPAWN_RESULT, and gets this one.
   */
  async refuseUnreadable(request: SpawnHeader | Envelope, why: string): Promise<void> {
    const requestId = request.spawn?.requestId;
    if (requestId === undefined) return;
    this.deps.logger.warn({ traceId: request.traceId, requestId, why }, 'SPAWN refused: it does not parse');
    this.deps.metrics.spawns.inc({ outcome: 'refused' });
    await this.sendResult(request, unreadableSpawnResult(requestId, this.deps.host, why)).catch(
      (err: unknown) =>
        this.deps.logger.warn({ err, traceId: request.traceId }, 'could not answer a refused SPAWN'),
    );
  }

  private async sendResult(
    request: RequestRef,
    result: ControlResult,
    msgId = namedUuid(result.requestId, `result/${result.op}`),
  ): Promise<void> {
    const envelope = this.deps.compose(
      gatewayAddress(this.deps.host),
      WireKind.spawnResult,
      request.from.gid,
      resultText(result, this.deps.host),
      { msgId, traceId: request.traceId, inReplyTo: request.msgId, result },
    );
    await this.deps.route(envelope);
  }

  private launcherFor(cell: SpawnCell): Launcher {
    const profile = this.deps.config.profiles[cell.context.profile];
    return profile?.injector === 'herdr' ? this.deps.launchers.herdr : this.deps.launchers.tmux;
  }
}
