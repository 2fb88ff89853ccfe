import { type BridgeError, ErrorCode } from '../errors.js';
import type { SpawnContext } from '../machines/spawnMachine.js';
import { type Address, type ControlResult, type Envelope, nameRule } from '../wire/envelope.js';

type StopRequest = NonNullable<Envelope['stop']>;

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

/** The text of a SPAWN_RESULT: what a reader of the inbox sees. */
export function resultText(result: ControlResult, host: string): string {
  return result.ok
    ? `${result.op === 'spawn' ? 'spawned' : 'stopped'} ${result.name ?? result.gid}@${host}`
    : `${result.op} refused: ${result.code}: ${result.message}`;
}

/** Who may stop a spawned agent: its requester, or any main or orchestrator (not another worker). */
export function mayStop(stopper: Address, requester: string): boolean {
  return stopper.gid === requester || stopper.kind !== 'worker';
}
