import { BridgeError, ErrorCode } from '../errors.js';
import type { Lifecycle } from '../kernel/Lifecycle.js';
import type { OwnerDecision } from '../wire/agentHost.js';
import type { Directory } from './Directory.js';

export interface OwnerAnswersDeps {
  host: string;
  directory: Directory;
  lifecycle: Lifecycle;
}

/** An owner's answer, as it was taken: whose agent, which request. */
export interface OwnerAnswer {
  worker: string;
  request: number;
  decision: OwnerDecision;
}

/**
 * `agentbridge approve|deny WORKER` (issue 33): the owner answers a permission request of a
 * worker's agent. Never a message's to answer; recorded on the worker's entity actor.
 */
export class OwnerAnswers {
  constructor(private readonly deps: OwnerAnswersDeps) {}

  async answer(worker: string, decision: OwnerDecision, by: string, request?: number): Promise<OwnerAnswer> {
    const { directory, host, lifecycle } = this.deps;
    lifecycle.assertRunning();
    const at = worker.lastIndexOf('@');
    if (at > 0 && worker.slice(at + 1) !== host) {
      throw new BridgeError(
        ErrorCode.badRequest,
        `${worker} is on ${worker.slice(at + 1)}: answer its agent on that host (agentbridge approve|deny there)`,
      );
    }
    const entity = directory.resolve(worker);
    const answered = await entity.answerOwner(decision, by, request);
    return { worker: entity.record.name, request: answered, decision };
  }
}
