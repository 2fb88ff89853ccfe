/**
 * The pane port over an agent host's socket (`agentbridge agent-host`, wire/agentHost.ts): a
 * worker whose agent takes its prompts over the agent's own protocol (ACP) instead of a
 * terminal. The delivery machine's steps map onto it as they do onto a pane: `type` hands the
 * message to the agent (`typed` = handed over), `submit` waits for the agent to acknowledge it
 * (`submitted` = the agent took the turn), `locate` asks the host where a message is after a
 * crash, and `inspect` holds a message while the agent is in a turn or asks for a permission.
 */
import { createConnection } from 'node:net';
import { BridgeError, ErrorCode } from '../errors.js';
import { createLineSplitter } from '../text/lineSplitter.js';
import {
  type AgentHostHello,
  type AgentHostRequest,
  AgentHostStatus,
  agentHostAnswerSchema,
  agentHostHelloSchema,
  agentHostMaxLine,
  BusyPolicy,
  HandoverState,
  type HostHandover,
  hostHandoverSchema,
  takesMessage,
} from '../wire/agentHost.js';
import {
  DeferReason,
  type PaneHold,
  type PaneInjector,
  type PaneMessage,
  PaneStatus,
  type SubmitOutcome,
  type TypeOutcome,
} from './paneInjector.js';

export interface AgentHostInjectorOptions {
  readonly socketPath: string;
  /** What a message for an agent in a turn does unless it says (the worker's, else the gateway's). */
  readonly busy?: BusyPolicy | undefined;
  /** How long the agent may take to acknowledge a prompt it was handed, per `submit`. */
  readonly acknowledgeTimeoutMs?: number;
  /** How long the host may take to answer a request that does not wait. */
  readonly requestTimeoutMs?: number;
  /** How often the worker's status is asked of the host while it is watched. */
  readonly statusPollMs?: number;
}

/** The worker's status as the gateway's pump and roster read it, under the worker's policy. */
function statusOf(hello: AgentHostHello, busy: BusyPolicy): PaneStatus {
  if (takesMessage(hello.status, hello.midTurn, busy)) return PaneStatus.idle;
  if (hello.status === AgentHostStatus.blocked) return PaneStatus.blocked;
  return hello.status === AgentHostStatus.gone ? PaneStatus.unknown : PaneStatus.working;
}

/** One request on its own connection: one JSON line out, one back. */
export function agentHostRequest(
  socketPath: string,
  request: AgentHostRequest,
  timeoutMs: number,
): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const socket = createConnection(socketPath);
    const splitter = createLineSplitter(agentHostMaxLine);
    let settled = false;
    const finish = (err: Error | undefined, result?: unknown): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      if (err) reject(err);
      else resolve(result);
    };
    const timer = setTimeout(
      () =>
        finish(
          new BridgeError(
            ErrorCode.paneUnavailable,
            `the agent host at ${socketPath} did not answer ${request.op} within ${timeoutMs} ms`,
            { retryable: true },
          ),
        ),
      timeoutMs,
    );
    socket.setEncoding('utf8');
    socket.once('connect', () => socket.write(`${JSON.stringify(request)}\n`));
    socket.on('error', (err: NodeJS.ErrnoException) =>
      finish(
        new BridgeError(
          ErrorCode.paneUnavailable,
          `no agent host answers at ${socketPath} (${err.code ?? err.message}): start it with \`agentbridge agent-host --socket ${socketPath} -- AGENT…\``,
          { retryable: true },
        ),
      ),
    );
    socket.on('data', (chunk: string) => {
      const [line] = splitter.push(chunk);
      if (line === undefined) return;
      let answer: ReturnType<typeof agentHostAnswerSchema.safeParse>;
      try {
        answer = agentHostAnswerSchema.safeParse(JSON.parse(line));
      } catch {
        return finish(new Error(`the agent host at ${socketPath} answered with a line that is not JSON`));
      }
      if (!answer.success)
        return finish(new Error(`the agent host at ${socketPath} answered out of protocol`));
      if (!answer.data.ok)
        return finish(
          new Error(`the agent host at ${socketPath} refused ${request.op}: ${answer.data.error}`),
        );
      finish(undefined, answer.data.result);
    });
    socket.on('close', () =>
      finish(new Error(`the agent host at ${socketPath} closed without answering ${request.op}`)),
    );
  });
}

/** Says hello to the host: who it is and how its agent is. */
export async function agentHostHello(socketPath: string, timeoutMs = 5_000): Promise<AgentHostHello> {
  return agentHostHelloSchema.parse(await agentHostRequest(socketPath, { op: 'hello' }, timeoutMs));
}

function holdOf(status: AgentHostHello['status'], detail: string): PaneHold {
  return {
    reason: status === AgentHostStatus.blocked ? DeferReason.blocked : DeferReason.busy,
    detail,
  };
}

export function createAgentHostInjector(options: AgentHostInjectorOptions): PaneInjector {
  const { socketPath } = options;
  const requestTimeoutMs = options.requestTimeoutMs ?? 10_000;
  const acknowledgeTimeoutMs = options.acknowledgeTimeoutMs ?? 30_000;
  const statusPollMs = options.statusPollMs ?? 1_000;
  const policy = options.busy ?? BusyPolicy.steer;
  const busyOf = (message: PaneMessage | undefined): BusyPolicy => message?.busy ?? policy;
  /** The host's last hello: what `describe` tells. */
  let seen: AgentHostHello | undefined;
  const hello = async (): Promise<AgentHostHello> => {
    seen = await agentHostHello(socketPath, requestTimeoutMs);
    return seen;
  };
  const handover = async (request: AgentHostRequest, timeoutMs = requestTimeoutMs): Promise<HostHandover> =>
    hostHandoverSchema.parse(await agentHostRequest(socketPath, request, timeoutMs));
  return {
    async inspect(message) {
      const now = await hello();
      return takesMessage(now.status, now.midTurn, busyOf(message))
        ? undefined
        : holdOf(now.status, now.detail ?? now.status);
    },

    async type(message): Promise<TypeOutcome> {
      const given = await handover({
        op: 'deliver',
        marker: message.marker,
        text: message.text,
        busy: busyOf(message),
      });
      if (given.state === HandoverState.acknowledged)
        return { kind: 'submitted', how: `${given.agent} had taken the prompt already (${given.path})` };
      if (given.state === HandoverState.handed) return { kind: 'typed' };
      const held = given.held ?? {
        status: AgentHostStatus.working,
        detail: 'the agent host did not take it',
      };
      return { kind: 'deferred', ...holdOf(held.status, held.detail) };
    },

    async submit(message): Promise<SubmitOutcome> {
      const seen = await handover(
        { op: 'await', marker: message.marker, timeoutMs: acknowledgeTimeoutMs },
        acknowledgeTimeoutMs + requestTimeoutMs,
      );
      if (seen.state === HandoverState.acknowledged) {
        return { kind: 'submitted', how: `${seen.agent} acknowledged the prompt (${seen.path})` };
      }
      if (seen.state === HandoverState.absent) {
        // Refused by the agent, or a host started since: nothing of it was taken; hand it again.
        return {
          kind: 'deferred',
          reason: DeferReason.notShown,
          detail: `${seen.agent} does not have the prompt (refused, or its host restarted)`,
        };
      }
      return {
        kind: 'not-submitted',
        detail: `${seen.agent} was handed the prompt and did not acknowledge it within ${acknowledgeTimeoutMs} ms`,
      };
    },

    async locate(message) {
      const { state } = await handover({ op: 'locate', marker: message.marker });
      if (state === HandoverState.acknowledged) return 'submitted';
      return state === HandoverState.handed ? 'typed' : 'absent';
    },

    async contains(marker) {
      return (await handover({ op: 'locate', marker })).state !== HandoverState.absent;
    },

    watchStatus(listener) {
      // The host is asked every statusPollMs; a change is reported (blocked while a permission
      // request is open, working while a turn that would not take a message runs, unknown while
      // no host answers).
      let last: PaneStatus | undefined;
      let timer: NodeJS.Timeout | undefined;
      let stopped = false;
      const look = (): void => {
        hello().then(
          (now) => report(statusOf(now, policy)),
          () => report(PaneStatus.unknown),
        );
      };
      const report = (status: PaneStatus): void => {
        if (stopped) return;
        if (status !== last) {
          last = status;
          listener(status);
        }
        timer = setTimeout(look, statusPollMs);
      };
      look();
      return () => {
        stopped = true;
        clearTimeout(timer);
      };
    },

    async answerOwner(decision, request) {
      const answered = await agentHostRequest(
        socketPath,
        { op: 'answer', decision, ...(request === undefined ? {} : { id: request }) },
        requestTimeoutMs,
      );
      return (answered as { answered: number }).answered;
    },

    describe() {
      return seen && { path: seen.path, agent: seen.agent, attach: seen.attach, permission: seen.permission };
    },

    async close() {},
  };
}
