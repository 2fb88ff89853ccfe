import type { Config } from '../config/schema.js';
import type { Directory } from '../deliver/Directory.js';
import type { EntityActor } from '../deliver/EntityActor.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { RemoteRoster } from '../federation/RemoteRoster.js';
import type { Clock } from '../kernel/clock.js';
import type { Lifecycle } from '../kernel/Lifecycle.js';
import { addressOf, keyedCall, type Router } from '../send/Router.js';
import type { Store } from '../store/openStore.js';
import type { OwnerDecision } from '../wire/agentHost.js';
import {
  type ControlResult,
  describeIssues,
  type Envelope,
  spawnRequestSchema,
  WireKind,
} from '../wire/envelope.js';
import { namedUuid, uuidv7 } from '../wire/ids.js';

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

export interface SpawnRequestsDeps {
  store: Store;
  clock: Clock;
  host: string;
  config: Pick<Config, 'spawn' | 'limits'>;
  router: Router;
  directory: Directory;
  /** Federated only: where remote agents are found; single-host, control requests stay here. */
  remoteRoster: RemoteRoster | undefined;
  /** Hands a control request for this host to its handler, as the control queue would. */
  receiveLocal: (envelope: Envelope) => void;
  lifecycle: Lifecycle;
}

/**
 * The requester's side of spawning (U4): a SPAWN, STOP or OWNER_ANSWER goes to the target host (this one
 * without the broker), and the call waits for its result up to its wait.
 */
export class SpawnRequests {
  constructor(private readonly deps: SpawnRequestsDeps) {}

  /**
   * Asks `host` to start an agent from one of its profiles (U4) and waits (up to `waitMs`) for
   * the SPAWN_RESULT. On this host it runs without the broker.
   */
  async spawn(requester: EntityActor, options: SpawnOptions): Promise<ControlOutcome> {
    const { clock, router, store, config, host, lifecycle } = this.deps;
    lifecycle.assertRunning();
    const now = clock.now();
    const key = options.idempotencyKey;
    const requestId = key === undefined ? uuidv7(now) : namedUuid(requester.gid, `spawn\u0000${key}`);
    const { profile, name, groups, brief } = options;
    const keyed = keyedCall(key, WireKind.spawn, options.host, { profile, name, groups, brief });
    if (keyed) router.claimKey(requester, keyed, requestId);
    // A retry keeps the first request's trace.
    if (key !== undefined) await store.batch.flush();
    const traceId = key === undefined ? undefined : router.traceOfSent(requestId);
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
    const envelope = router.compose(addressOf(requester, host), WireKind.spawn, options.host, options.brief, {
      msgId: requestId,
      ...(traceId === undefined ? {} : { traceId }),
      expiresAt: now + config.spawn.requestTtlMs,
      spawn: spawn.data,
    });
    return this.control(requester, envelope, options.host, options.waitMs);
  }

  /** Asks the host of a spawned agent to stop it and deregister it (U4). */
  async stopSpawned(requester: EntityActor, gid: string, waitMs?: number): Promise<ControlOutcome> {
    const { directory, remoteRoster, clock, router, lifecycle } = this.deps;
    lifecycle.assertRunning();
    const local = directory.byGidOrUndefined(gid);
    const host = local ? this.deps.host : remoteRoster?.find(gid)[0]?.host;
    if (host === undefined) {
      throw new BridgeError(
        ErrorCode.unknownRecipient,
        `no entity ${gid} on ${this.deps.host} or in the roster: call bridge_roster to see who runs where`,
      );
    }
    const requestId = uuidv7(clock.now());
    const envelope = router.compose(addressOf(requester, this.deps.host), WireKind.stop, host, '', {
      msgId: requestId,
      stop: { requestId, gid },
    });
    return this.control(requester, envelope, host, waitMs);
  }

  /**
   * Asks the host of a spawned worker to give its agent the requester's answer to a permission
   * request (OWNER_ANSWER, issue 33); that host judges whether the requester may.
   */
  async answerSpawned(
    requester: EntityActor,
    gid: string,
    host: string,
    answer: { decision: OwnerDecision; request?: number; waitMs?: number | undefined },
  ): Promise<ControlOutcome> {
    const { clock, router, lifecycle } = this.deps;
    lifecycle.assertRunning();
    const requestId = uuidv7(clock.now());
    const { decision, request } = answer;
    const envelope = router.compose(addressOf(requester, this.deps.host), WireKind.ownerAnswer, host, '', {
      msgId: requestId,
      ownerAnswer: { requestId, gid, decision, ...(request === undefined ? {} : { request }) },
    });
    return this.control(requester, envelope, host, answer.waitMs);
  }

  private async control(
    requester: EntityActor,
    envelope: Envelope,
    host: string,
    waitMs: number | undefined,
  ): Promise<ControlOutcome> {
    const { config } = this.deps;
    const wait = Math.min(waitMs ?? config.spawn.waitMs, config.limits.maxWaitMs);
    const waiter = requester.waitForReply(undefined, wait);
    waiter.answering(envelope.msgId);
    try {
      if (host === this.deps.host) this.deps.receiveLocal(envelope);
      else {
        if (!this.deps.remoteRoster) {
          throw new BridgeError(
            ErrorCode.notAvailable,
            `${host} is another host and this gateway runs single-host (set broker.uri / BRIDGE_BROKER_URI)`,
          );
        }
        await this.deps.router.sendControl(envelope, host);
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
}
