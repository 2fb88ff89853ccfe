import { randomUUID } from 'node:crypto';
import type { Config, Profile } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { PaneTarget } from '../inject/paneInjector.js';
import type { ActorKind } from '../machines/index.js';
import { type SpawnContext, type SpawnEvent, spawnMachine } from '../machines/spawnMachine.js';
import type { Metrics } from '../metrics/metrics.js';
import { ActorCell, type RuntimeDeps } from '../runtime/actorCell.js';
import { resumeOrReport } from '../runtime/resumeOrReport.js';
import { describePane, type Launcher } from '../spawn/launcher.js';
import { provisionWorkspace } from '../spawn/provisionWorkspace.js';
import { readActorHead, readLiveActors } from '../store/actorHeads.js';
import { purgeMessage, putMessage, readMessage, storedEnvelope } from '../store/messageBodies.js';
import { readActorEvents } from '../store/readEvents.js';
import { byteLength, digestText } from '../wire/digest.js';
import {
  type Address,
  type ControlResult,
  describeIssues,
  type Envelope,
  envelopeSchema,
  nameRule,
  type SpawnHeader,
  smuggledRunKeys,
  spawnRequestSchema,
  WireKind,
} from '../wire/envelope.js';
import { gatewayAddress } from '../wire/gatewayAddress.js';
import { namedUuid } from '../wire/ids.js';
import type { InboundHandle } from './handover.js';

export const spawnKind: ActorKind = 'spawn';
/** SPAWN envelopes (their brief) are kept under this recipient until the spawn is over. */
const spawnInbox = '>spawn';
const answerRetryMs = 5_000;
/** Room a refusal's message has in a SPAWN_RESULT (`controlResultSchema`). */
const maxResultMessage = 2000;

/** What an answer needs of the request it answers. */
type RequestRef = Pick<Envelope, 'from' | 'traceId' | 'msgId'>;

/** What the spawner needs from the gateway around it. */
export interface SpawnerDeps extends RuntimeDeps {
  config: Config;
  metrics: Metrics;
  launchers: { tmux: Launcher; herdr: Launcher };
  /** The MCP endpoint spawned agents connect to, once the gateway serves it. */
  mcpUrl(): Promise<string>;
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

type SpawnCell = ActorCell<SpawnContext, SpawnEvent>;

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
        const cell = ActorCell.rehydrate<SpawnContext, SpawnEvent>(
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
    for (const cell of this.cells.values()) cell.stop();
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
    const cell = ActorCell.create<SpawnContext, SpawnEvent>(
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

  /** A STOP for an agent this host spawned: close its pane, deregister it, answer. */
  async receiveStop(envelope: Envelope, inbound?: InboundHandle): Promise<void> {
    const stop = envelope.stop;
    if (!stop) return this.settle(inbound);
    const cell = this.byGid.get(stop.gid);
    let result: ControlResult;
    if (cell && cell.state === 'running' && !mayStop(envelope.from, cell.context.requester.gid)) {
      result = {
        requestId: stop.requestId,
        op: 'stop',
        ok: false,
        gid: stop.gid,
        code: ErrorCode.forbidden,
        message:
          `${envelope.from.name}@${envelope.from.host} may not stop ${cell.context.entityName ?? stop.gid}: ` +
          'a spawned agent is stopped by whoever spawned it, or by a main or orchestrator',
      };
    } else if (cell && cell.state === 'running') {
      const pane = this.paneOf(cell);
      try {
        if (pane) await this.launcherFor(cell).close(pane);
        if (this.deps.hasEntity(stop.gid)) await this.deps.deregister(stop.gid);
        cell.send({ type: 'spawn.stopped', by: `${envelope.from.name}@${envelope.from.host}` });
        this.byGid.delete(stop.gid);
        result = { requestId: stop.requestId, op: 'stop', ok: true, gid: stop.gid, host: this.deps.host };
      } catch (err) {
        const error =
          err instanceof BridgeError ? err : new BridgeError(ErrorCode.internal, (err as Error).message);
        result = {
          requestId: stop.requestId,
          op: 'stop',
          ok: false,
          gid: stop.gid,
          code: error.code,
          message: error.message,
        };
      }
    } else {
      const head = readActorHead(this.deps.store, spawnKind, this.requestOfGid(stop.gid) ?? '');
      result =
        head?.state === 'stopped'
          ? { requestId: stop.requestId, op: 'stop', ok: true, gid: stop.gid, host: this.deps.host }
          : {
              requestId: stop.requestId,
              op: 'stop',
              ok: false,
              gid: stop.gid,
              code: ErrorCode.notSpawned,
              message:
                `${stop.gid} is not a running agent spawned on ${this.deps.host}: bridge_stop ends spawned agents only; ` +
                `deregister others on their host (bridge deregister)`,
            };
    }
    this.settle(inbound);
    await this.sendResult(envelope, result).catch((err: unknown) =>
      this.deps.logger.warn({ err, traceId: envelope.traceId }, 'could not answer a STOP'),
    );
  }

  private requestOfGid(gid: string): string | undefined {
    const row = this.deps.store
      .prepare<[string], { actor_id: string }>(
        "SELECT actor_id FROM events WHERE actor_kind = 'spawn' AND event = 'spawn.launching' AND json_extract(data, '$.gid') = ? LIMIT 1",
      )
      .get(gid);
    return row?.actor_id;
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
    const refuse = (code: string, message: string): void =>
      cell.send({ type: 'spawn.refused', code, message });
    const { config } = this.deps;
    const stored = readMessage(this.deps.store, cell.context.msgId, spawnInbox);
    if (!stored.ok && !stored.missing) {
      this.deps.logger.error(
        { traceId: cell.context.traceId, requestId, detail: stored.detail },
        'a kept SPAWN does not parse: refused with the reason',
      );
      refuse(ErrorCode.badRequest, `${this.deps.host} cannot use this spawn request: ${stored.detail}`);
      return;
    }
    const request = spawnRequestSchema.safeParse({
      requestId,
      profile: cell.context.profile,
      ...(cell.context.name === undefined ? {} : { name: cell.context.name }),
      groups: cell.context.groups,
    });
    if (!request.success) {
      refuse(
        ErrorCode.badRequest,
        `${this.deps.host} cannot use this spawn request: ${describeIssues(request.error)}`,
      );
      return;
    }
    const smuggled = smuggledRunKeys(storedEnvelope(stored)?.spawn);
    if (smuggled.length > 0) {
      refuse(
        ErrorCode.spawnRefused,
        `the request carries ${smuggled.join(', ')}: a requester names a profile only, never a command; ` +
          `${this.deps.host} runs what its own profiles say (config \`profiles\`)`,
      );
      return;
    }
    const profile = Object.hasOwn(config.profiles, cell.context.profile)
      ? config.profiles[cell.context.profile]
      : undefined;
    if (!profile) {
      const known = Object.keys(config.profiles);
      refuse(
        ErrorCode.unknownProfile,
        `${this.deps.host} has no profile "${cell.context.profile}"; ` +
          (known.length > 0
            ? `its profiles: ${known.join(', ')}`
            : 'it has no profiles configured (config `profiles`)'),
      );
      return;
    }
    const name = cell.context.name ?? `${cell.context.profile}-${requestId.slice(-6)}`;
    if (!spawnRequestSchema.shape.name.safeParse(name).success) {
      refuse(
        ErrorCode.badRequest,
        `profile "${cell.context.profile}" makes no entity name by default: name the agent (${nameRule})`,
      );
      return;
    }
    if (this.deps.hasName(name)) {
      refuse(
        ErrorCode.nameTaken,
        `an entity named "${name}" already runs on ${this.deps.host}; pick another name`,
      );
      return;
    }
    cell.send({ type: 'spawn.launching', gid: randomUUID(), name });
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
        const pane = (await launcher.find(name)) ?? undefined;
        cell.send({ type: 'spawn.launched', pane: pane ? describePane(pane) : 'unknown' });
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
      const pane = await launcher.launch({
        name,
        command: profile.command,
        cwd,
        env: {
          ...profile.env,
          BRIDGE_MCP_URL: await this.deps.mcpUrl(),
          BRIDGE_TOKEN: token,
          BRIDGE_GID: gid,
          BRIDGE_NAME: name,
          BRIDGE_HOST_ID: this.deps.host,
        },
      });
      if (this.stopped) return;
      await this.deps.register({
        gid,
        token,
        name,
        kind: profile.kind,
        groups: [...profile.groups, ...cell.context.groups],
        pane,
      });
      this.deliverBrief(cell, gid);
      cell.send({ type: 'spawn.launched', pane: describePane(pane) });
    } catch (err) {
      const error =
        err instanceof BridgeError ? err : new BridgeError(ErrorCode.launchFailed, (err as Error).message);
      this.deps.logger.error({ err, traceId: cell.context.traceId, name }, 'spawn failed');
      if (cell.state === 'launching')
        cell.send({ type: 'spawn.launchFailed', code: error.code, message: error.message });
    }
  }

  private workspaces(profile: Profile): string {
    return profile.cwd ?? this.deps.config.spawn.workspaces ?? `${this.deps.config.home}/workspaces`;
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
      this.resultOf(requestId, cell),
      namedUuid(requestId, `result/spawn again ${envelope.hlc}`),
    );
  }

  /** A spawn actor as its log has it (one that is over is no longer kept in memory). */
  private recorded(requestId: string): SpawnCell | undefined {
    const rows = readActorEvents(this.deps.store, spawnKind, requestId);
    const first = rows[0];
    if (!first) return undefined;
    return ActorCell.rehydrate<SpawnContext, SpawnEvent>(
      this.machine,
      rows,
      { kind: spawnKind, id: requestId, traceId: first.traceId, msgId: first.msgId },
      this.deps,
    );
  }

  /** How a spawn went, as SPAWN_RESULT reports it. */
  private resultOf(requestId: string, cell: SpawnCell): ControlResult {
    const { context } = cell;
    if (cell.state === 'running' && context.gid !== null) {
      return {
        requestId,
        op: 'spawn',
        ok: true,
        gid: context.gid,
        name: context.entityName ?? '',
        host: this.deps.host,
      };
    }
    if (cell.state === 'stopped' && context.gid !== null) {
      return {
        requestId,
        op: 'spawn',
        ok: false,
        gid: context.gid,
        code: ErrorCode.notSpawned,
        message:
          `request ${requestId} started ${context.entityName ?? context.gid}@${this.deps.host} (${context.gid}), ` +
          'which has been stopped since: spawn again with a new idempotency_key',
      };
    }
    return {
      requestId,
      op: 'spawn',
      ok: false,
      code: context.error?.code ?? ErrorCode.spawnRefused,
      message: context.error?.message ?? 'refused',
    };
  }

  /** SPAWN_RESULT to the requester; recorded as answered once it is on its way. */
  private async answer(requestId: string): Promise<void> {
    const cell = this.cells.get(requestId);
    if (!cell || cell.context.answered || (cell.state !== 'running' && cell.state !== 'refused')) return;
    const { context } = cell;
    const result = this.resultOf(requestId, cell);
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
      setTimeout(() => void this.answer(requestId), answerRetryMs).unref();
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
    const message =
      `${this.deps.host} cannot take this spawn request: ${why}. Names and groups are ${nameRule}; ` +
      `a profile is one of the host's (config \`profiles\`)`;
    this.deps.logger.warn({ traceId: request.traceId, requestId, why }, 'SPAWN refused: it does not parse');
    this.deps.metrics.spawns.inc({ outcome: 'refused' });
    await this.sendResult(request, {
      requestId,
      op: 'spawn',
      ok: false,
      code: ErrorCode.badRequest,
      message: message.length > maxResultMessage ? `${message.slice(0, maxResultMessage - 3)}...` : message,
    }).catch((err: unknown) =>
      this.deps.logger.warn({ err, traceId: request.traceId }, 'could not answer a refused SPAWN'),
    );
  }

  private async sendResult(
    request: RequestRef,
    result: ControlResult,
    msgId = namedUuid(result.requestId, `result/${result.op}`),
  ): Promise<void> {
    const text = result.ok
      ? `${result.op === 'spawn' ? 'spawned' : 'stopped'} ${result.name ?? result.gid}@${this.deps.host}`
      : `${result.op} refused: ${result.code}: ${result.message}`;
    const envelope = this.deps.compose(
      gatewayAddress(this.deps.host),
      WireKind.spawnResult,
      request.from.gid,
      text,
      {
        msgId,
        traceId: request.traceId,
        inReplyTo: request.msgId,
        result,
      },
    );
    await this.deps.route(envelope);
  }

  private paneOf(cell: SpawnCell): PaneTarget | undefined {
    const pane = cell.context.pane;
    if (pane === null) return undefined;
    if (pane.startsWith('tmux:')) {
      const socket = this.deps.config.spawn.tmuxSocket;
      return { type: 'tmux', target: pane.slice(5), ...(socket === undefined ? {} : { socket }) };
    }
    if (pane.startsWith('herdr:')) return { type: 'herdr', paneId: pane.slice(6) };
    return undefined;
  }

  private launcherFor(cell: SpawnCell): Launcher {
    const profile = this.deps.config.profiles[cell.context.profile];
    return profile?.injector === 'herdr' ? this.deps.launchers.herdr : this.deps.launchers.tmux;
  }
}

/** Who may stop a spawned agent: its requester, or any main or orchestrator (not another worker). */
function mayStop(stopper: Address, requester: string): boolean {
  return stopper.gid === requester || stopper.kind !== 'worker';
}
