import { type BridgeError, ErrorCode } from '../errors.js';
import type { SpawnContext } from '../machines/spawnMachine.js';
import { answeredText } from '../wire/agentHost.js';
import { type Address, type ControlResult, type Envelope, nameRule } from '../wire/envelope.js';

type StopRequest = NonNullable<Envelope['stop']>;
type AnswerRequest = NonNullable<Envelope['ownerAnswer']>;

/** Room a refusal's message has in a SPAWN_RESULT (`controlResultSchema`). */
const maxResultMessage = 2000;

/** How a spawn went, as SPAWN_RESULT reports it, from its actor's state and context. */
export function spawnResultOf(state: string, context: SpawnContext, host: string): ControlResult {
  const { requestId } = context;
  if (state === 'running' && context.gid !== null) {
    return {
      requestId,
      op: 'spawn',
      ok: true,
      gid: context.gid,
      name: context.entityName ?? '',
      host,
      ...(context.attach === null ? {} : { attach: context.attach }),
    };
  }
  if (state === 'stopped' && context.gid !== null) {
    return {
      requestId,
      op: 'spawn',
      ok: false,
      gid: context.gid,
      code: ErrorCode.notSpawned,
      message:
        `request ${requestId} started ${context.entityName ?? context.gid}@${host} (${context.gid}), ` +
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

/** The refusal of a SPAWN this host cannot read as it is. */
export function unreadableSpawnResult(requestId: string, host: string, why: string): ControlResult {
  const message =
    `${host} cannot take this spawn request: ${why}. Names and groups are ${nameRule}; ` +
    `a profile is one of the host's (config \`profiles\`)`;
  return {
    requestId,
    op: 'spawn',
    ok: false,
    code: ErrorCode.badRequest,
    message: message.length > maxResultMessage ? `${message.slice(0, maxResultMessage - 3)}...` : message,
  };
}

/** Results of a STOP, by how it went. */
export const stopResult = {
  stopped: (stop: StopRequest, host: string): ControlResult => ({
    requestId: stop.requestId,
    op: 'stop',
    ok: true,
    gid: stop.gid,
    host,
  }),
  forbidden: (stop: StopRequest, stopper: Address, target: string): ControlResult => ({
    requestId: stop.requestId,
    op: 'stop',
    ok: false,
    gid: stop.gid,
    code: ErrorCode.forbidden,
    message:
      `${stopper.name}@${stopper.host} may not stop ${target}: ` +
      'a spawned agent is stopped by whoever spawned it, or by a main or orchestrator',
  }),
  failed: (stop: StopRequest, error: BridgeError): ControlResult => ({
    requestId: stop.requestId,
    op: 'stop',
    ok: false,
    gid: stop.gid,
    code: error.code,
    message: error.message,
  }),
  notSpawned: (stop: StopRequest, host: string): ControlResult => ({
    requestId: stop.requestId,
    op: 'stop',
    ok: false,
    gid: stop.gid,
    code: ErrorCode.notSpawned,
    message:
      `${stop.gid} is not a running agent spawned on ${host}: bridge_stop ends spawned agents only; ` +
      `deregister others on their host (agentbridge deregister)`,
  }),
};

/**
 * Why a worker's agent is not answered from another host: it is not an agent its host spawned
 * (one registered by hand is answered on its own host), or it was and has been stopped since.
 * Said by the answerer's gateway when its roster shows it, and by the worker's host otherwise.
 */
export function notAnsweredFromAfar(target: string, host: string, stopped: boolean): string {
  return stopped
    ? `${target} was spawned on ${host} and has been stopped since: its agent asks nothing now`
    : `${target} is not an agent spawned on ${host}: from another host only a spawned worker's agent is ` +
        `answered; answer a worker registered by hand on ${host} itself (agentbridge approve|deny there, or its console)`;
}

/** An OWNER_ANSWER refused, for `code`: nothing was given to the agent, or not known to be. */
function answerRefused(answer: AnswerRequest, code: string, message: string): ControlResult {
  return { requestId: answer.requestId, op: 'answer', ok: false, gid: answer.gid, code, message };
}

/** Results of an OWNER_ANSWER, by how it went. */
export const answerResult = {
  answered: (
    answer: AnswerRequest,
    host: string,
    name: string,
    taken: { request: number; decision: 'allow' | 'deny' },
  ): ControlResult => ({
    requestId: answer.requestId,
    op: 'answer',
    ok: true,
    gid: answer.gid,
    name,
    host,
    request: taken.request,
    decision: taken.decision,
  }),
  forbidden: (answer: AnswerRequest, answerer: Address, target: string, requester: Address) =>
    answerRefused(
      answer,
      ErrorCode.forbidden,
      `${answerer.name}@${answerer.host} may not answer ${target}'s agent: from another host, a spawned ` +
        `worker's permission requests are answered by whoever spawned it (${requester.name}@${requester.host}) ` +
        `or by an operator at ${requester.host}'s console; anyone may on its own host (agentbridge approve there)`,
    ),
  /** The agent host refused it: nothing was taken. */
  failed: (answer: AnswerRequest, error: { code: string; message: string }) =>
    answerRefused(answer, error.code, error.message),
  /** It may or may not have reached the agent (`why`): never given again, so the owner looks. */
  unknown: (answer: AnswerRequest, host: string, target: string, why: string) =>
    answerRefused(
      answer,
      ErrorCode.notAvailable,
      `${target}'s agent on ${host} may or may not have taken this answer (${why}); it is never given twice: ` +
        `see ${target}'s status (agentbridge roster) and answer again if it still asks`,
    ),
  notSpawned: (answer: AnswerRequest, host: string, stopped: boolean) =>
    answerRefused(answer, ErrorCode.notSpawned, notAnsweredFromAfar(answer.gid, host, stopped)),
};

const doneWords: Record<ControlResult['op'], string> = {
  spawn: 'spawned',
  stop: 'stopped',
  answer: 'answered',
};

/** The text of a SPAWN_RESULT: what a reader of the inbox sees. */
export function resultText(result: ControlResult, host: string): string {
  if (!result.ok) return `${result.op} refused: ${result.code}: ${result.message}`;
  const who = `${result.name ?? result.gid}@${host}`;
  if (result.op === 'answer' && result.request !== undefined && result.decision !== undefined) {
    return answeredText(who, result.request, result.decision);
  }
  return `${doneWords[result.op]} ${who}`;
}

/** Who may stop a spawned agent: its requester, or any main or orchestrator (not another worker). */
export function mayStop(stopper: Address, requester: string): boolean {
  return stopper.gid === requester || stopper.kind !== 'worker';
}

/**
 * Who may answer a spawned worker's agent from another host: whoever spawned it, or an operator
 * (a person at the console) on the spawner's host. Allowing a shell command is more than
 * stopping an agent, so a main or orchestrator elsewhere may not.
 */
export function mayAnswer(answerer: Address, requester: Address): boolean {
  return answerer.gid === requester.gid || (answerer.kind === 'operator' && answerer.host === requester.host);
}
