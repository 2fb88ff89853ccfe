import type { Directory } from '../deliver/Directory.js';
import type { EntityActor } from '../deliver/EntityActor.js';
import { BridgeError, controlError, ErrorCode } from '../errors.js';
import type { RemoteRoster, RosterEntry } from '../federation/RemoteRoster.js';
import type { Lifecycle } from '../kernel/Lifecycle.js';
import { answeredText, type OwnerDecision } from '../wire/agentHost.js';
import { ownerAnswerSince, versionAtLeast } from '../wire/envelope.js';
import type { SpawnRequests } from './SpawnRequests.js';
import { notAnsweredFromAfar } from './spawnResults.js';

export interface OwnerAnswersDeps {
  host: string;
  directory: Directory;
  lifecycle: Lifecycle;
  /** Federated only: where a worker on another host is found. */
  remoteRoster: RemoteRoster | undefined;
  spawnRequests: SpawnRequests;
}

/** An owner's answer, as it was taken: whose agent, which request; or sent and not yet answered. */
export interface OwnerAnswer {
  worker: string;
  decision: OwnerDecision;
  /** The agent's request it answered (the one it named, while `pending`). */
  request?: number;
  /** Sent to the worker's host, with no result within the wait: it comes to the answerer's inbox. */
  pending?: true;
  /** What was done, in words ("helper@b: request 2 allowed once"). */
  said: string;
}

/** Who answers from another host: the entity the answer comes from (resolved only then), and its wait. */
export interface AnsweringEntity {
  entity: () => EntityActor;
  waitMs?: number | undefined;
}

/**
 * `agentbridge approve|deny WORKER` and the console's Approve and Deny (issue 33): the owner
 * answers a permission request of a worker's agent. Never a message's to answer. A worker on
 * this host is answered here, recorded on its entity actor; a spawned worker on another host is
 * answered through its host's control queue (OWNER_ANSWER), by whoever spawned it or an operator
 * on the spawner's host (spawnResults.ts `mayAnswer`, judged by that host), and always names the
 * request: the one the answerer's roster shows open, unless it names one, so that what is
 * allowed is what was seen.
 */
export class OwnerAnswers {
  constructor(private readonly deps: OwnerAnswersDeps) {}

  async answer(
    worker: string,
    decision: OwnerDecision,
    by: string,
    request?: number,
    from?: AnsweringEntity,
  ): Promise<OwnerAnswer> {
    const { directory, lifecycle } = this.deps;
    lifecycle.assertRunning();
    const local = directory.find(worker);
    if (local) {
      const answered = await local.answerOwner(decision, by, request);
      return {
        worker: local.record.name,
        request: answered,
        decision,
        said: answeredText(local.record.name, answered, decision),
      };
    }
    const remote = this.remoteWorker(worker);
    const address = `${remote.name}@${remote.host}`;
    if (!remote.spawned)
      throw new BridgeError(ErrorCode.notSpawned, notAnsweredFromAfar(address, remote.host, false));
    const version = this.deps.remoteRoster?.versionOf(remote.host);
    if (version !== undefined && !versionAtLeast(version, ownerAnswerSince)) {
      throw new BridgeError(
        ErrorCode.notAvailable,
        `${remote.host} runs schema ${version}, which takes no answer from another host (1.5 does): ` +
          `upgrade its gateway, or answer ${remote.name}'s agent on ${remote.host}`,
      );
    }
    if (!from) {
      throw new BridgeError(
        ErrorCode.badRequest,
        `${address} is on another host: from here its agent is answered by the entity that spawned it ` +
          `(agentbridge approve|deny ${address} --token ITS_TOKEN) or by an operator in this host's console`,
      );
    }
    const shown = remote.agent?.permission?.request;
    const named = request ?? shown;
    if (named === undefined) {
      throw new BridgeError(
        ErrorCode.badRequest,
        `the roster shows no open permission request of ${address}'s agent (its host announces one within ` +
          'a heartbeat): see agentbridge roster, or name it with --request N',
      );
    }
    const outcome = await this.deps.spawnRequests.answerSpawned(from.entity(), remote.gid, remote.host, {
      decision,
      request: named,
      waitMs: from.waitMs,
    });
    const result = outcome.result;
    if (!result) {
      const pending = `${address}: the answer to request ${named} was sent to ${remote.host}; its result comes later (by drain)`;
      return { worker: address, decision, request: named, pending: true, said: pending };
    }
    if (!result.ok) throw controlError(result.code, result.message);
    const answered = result.request ?? named;
    return { worker: address, decision, request: answered, said: answeredText(address, answered, decision) };
  }

  /** The one worker `worker` names in the other hosts' roster, or why there is none. */
  private remoteWorker(worker: string): RosterEntry {
    const found = this.deps.remoteRoster?.find(worker) ?? [];
    if (found.length > 1) {
      throw new BridgeError(
        ErrorCode.ambiguousRecipient,
        `${found.length} workers are called ${worker}: name one as NAME@HOST (${found.map((e) => `${e.name}@${e.host}`).join(', ')})`,
      );
    }
    const entry = found[0];
    if (entry?.kind !== 'worker') {
      throw new BridgeError(
        ErrorCode.unknownRecipient,
        `no worker ${worker} on ${this.deps.host} or in the roster: call bridge_roster (agentbridge roster) to see who runs where`,
      );
    }
    return entry;
  }
}
