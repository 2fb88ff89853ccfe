/**
 * Codex CLI's app-server (openai/codex `codex-rs/app-server-protocol`; `codex app-server
 * generate-json-schema` prints it): JSON-RPC, one JSON object a line on stdio (`--listen
 * stdio://`) or one a WebSocket text frame on a unix socket (`--listen unix://PATH`). The host
 * starts it on a unix socket unless its arguments name a transport, so that a person can attach
 * Codex's own TUI to the same thread (`codex resume THREAD --remote unix://PATH`, printed in the
 * mirror and by `hello`): the TUI shows each message the host hands over, and what the person
 * types there is a turn like any other (a message for the agent meanwhile steers into it, or
 * waits for it under `busy: queue`).
 *
 *   initialize {clientInfo}, then the `initialized` notification
 *   thread/start {cwd}                                  → {thread: {id}}
 *   turn/start {threadId, input: [{type: text}]}       → {turn: {id}}; a new turn
 *   turn/steer {threadId, expectedTurnId, input}       → {turnId}; into the running turn
 *   ← turn/started, item/started, item/agentMessage/delta, item/completed, turn/completed
 *   ← item/commandExecution/requestApproval, item/fileChange/requestApproval (and the older
 *     execCommandApproval, applyPatchApproval): the owner's, never a message's
 *
 * A message for an idle agent starts a turn; one for an agent in a turn steers it (`turn/steer`
 * names the turn it expects, so a message meant for a turn that just ended fails and is given
 * again as a new turn). The agent acknowledges a message by accepting the request: `turn/start`
 * or `turn/steer` answered.
 */
import { rmSync } from 'node:fs';
import { DeliveryPath } from '../wire/agentHost.js';
import {
  type AgentSession,
  type AgentSessionOptions,
  asRecord,
  createPermissionDesk,
  startAgentProcess,
} from './agentSession.js';
import { createJsonRpcPeer, type JsonRpcPeer, JsonRpcRemoteError } from './jsonRpcPeer.js';
import { connectWebSocketLines } from './webSocketLines.js';

/** How long the app-server may take to listen on its socket after it started. */
const connectTimeoutMs = 30_000;
/** The thread's name, as a person's TUI shows it. */
const threadName = 'agentbridge worker';

/** The transport `--listen URL` (or `--listen=URL`, `--stdio`) names in the agent's arguments. */
function listenOf(args: readonly string[]): string | undefined {
  for (const [i, arg] of args.entries()) {
    if (arg === '--stdio') return 'stdio://';
    if (arg === '--listen') return args[i + 1];
    if (arg.startsWith('--listen=')) return arg.slice('--listen='.length);
  }
  return undefined;
}

/** The server requests that ask the owner, and how an answer is put for each. */
const approvals: Readonly<Record<string, { allow: string; deny: string }>> = {
  'item/commandExecution/requestApproval': { allow: 'accept', deny: 'decline' },
  'item/fileChange/requestApproval': { allow: 'accept', deny: 'decline' },
  execCommandApproval: { allow: 'approved', deny: 'denied' },
  applyPatchApproval: { allow: 'approved', deny: 'denied' },
};

export function createCodexAppServerAgent(options: AgentSessionOptions): AgentSession {
  const { onEvent } = options;
  const permissions = createPermissionDesk(onEvent);
  let peer: JsonRpcPeer | undefined;
  let stopProcess = (): void => {};
  let threadId = '';
  let name = 'Codex CLI';
  /** The running turn, once the server said it started. */
  let turnId: string | undefined;
  /** Messages in the running turn: settled when it completes. */
  let inTurn: Array<{ resolve: (stopReason: string) => void; reject: (err: Error) => void }> = [];

  const onRequest = (method: string, params: unknown): Promise<unknown> => {
    const answers = approvals[method];
    if (!answers) return Promise.reject(new Error(`the client does not handle ${method}`));
    const body = asRecord(params);
    const command = Array.isArray(body.command) ? body.command.join(' ') : body.command;
    const title = typeof command === 'string' ? `run ${command}` : String(body.reason ?? method);
    return permissions
      .ask(title, [
        { optionId: 'allow', name: 'Allow', kind: 'allow_once' },
        { optionId: 'deny', name: 'Deny', kind: 'reject_once' },
      ])
      .then((choice) => ({ decision: choice === 'allow' ? answers.allow : answers.deny }));
  };

  const onNotification = (method: string, params: unknown): void => {
    const body = asRecord(params);
    switch (method) {
      case 'turn/started':
        turnId = String(asRecord(body.turn).id ?? '');
        return;
      case 'turn/completed': {
        const status = String(asRecord(body.turn).status ?? 'completed');
        turnId = undefined;
        const ended = inTurn;
        inTurn = [];
        for (const turn of ended) turn.resolve(status);
        onEvent({ kind: 'turn-ended', stopReason: status });
        return;
      }
      case 'item/completed': {
        const item = asRecord(body.item);
        if (item.type === 'agentMessage') onEvent({ kind: 'said', text: String(item.text ?? '') });
        else if (item.type === 'commandExecution')
          onEvent({
            kind: 'tool',
            title: `run ${String(item.command ?? '')}`,
            status: String(item.status ?? 'done'),
          });
        return;
      }
      default:
        return;
    }
  };

  const input = (text: string) => [{ type: 'text', text, text_elements: [] }];

  return {
    path: DeliveryPath.codexAppServer,
    takesMidTurn: true,
    get name() {
      return name;
    },

    async start() {
      const given = listenOf(options.args);
      // Its own transport if the arguments name one; else a unix socket a person's TUI can join.
      const socketPath =
        given === undefined ? options.attachSocket : given.startsWith('unix://') ? given.slice(7) : undefined;
      const args =
        given === undefined && socketPath !== undefined
          ? [...options.args, '--listen', `unix://${socketPath}`]
          : options.args;
      if (socketPath !== undefined) rmSync(socketPath, { force: true });
      const { child, exited, stop } = startAgentProcess(options, args, (err) => {
        peer?.close(err.message);
        permissions.cancelAll();
        for (const turn of inTurn) turn.reject(err);
        inTurn = [];
      });
      const handlers = {
        request: onRequest,
        notification: onNotification,
        badLine: (reason: string) => onEvent({ kind: 'bad-line', reason }),
      };
      let rpc: JsonRpcPeer;
      if (socketPath === undefined) {
        stopProcess = stop;
        rpc = createJsonRpcPeer(child.stdout, child.stdin, handlers);
      } else {
        child.stdout.resume();
        const lines = await connectWebSocketLines(socketPath, connectTimeoutMs, exited);
        stopProcess = () => {
          lines.close();
          stop();
        };
        rpc = createJsonRpcPeer(lines.input, lines.output, handlers);
        // The socket is the session: without it the agent takes nothing more, so it is ended
        // (and reads as gone) rather than left running unreachable.
        void lines.closed.then((why) => {
          rpc.close(why);
          stop();
        });
      }
      peer = rpc;
      const init = asRecord(
        await Promise.race([
          rpc.request('initialize', {
            clientInfo: { name: 'agentbridge', title: 'agentbridge agent host', version: '1' },
          }),
          exited,
        ]),
      );
      // Its user agent names the client, then Codex's version: `agentbridge/0.171.0 (…)`.
      const version =
        typeof init.userAgent === 'string' ? /\/(\d[\w.-]*)/.exec(init.userAgent)?.[1] : undefined;
      if (version) name = `Codex CLI ${version}`;
      rpc.notify('initialized', {});
      const started = asRecord(
        await Promise.race([rpc.request('thread/start', { cwd: options.cwd }), exited]),
      );
      threadId = String(asRecord(started.thread).id ?? '');
      if (threadId === '') throw new Error('thread/start answered without a thread id');
      let attach: string | undefined;
      if (socketPath !== undefined) {
        // A thread is kept (and can be resumed by a TUI) once it has a turn or a name.
        await Promise.race([rpc.request('thread/name/set', { threadId, name: threadName }), exited]);
        attach = `${options.command} resume ${threadId} --remote unix://${socketPath}`;
      }
      onEvent({ kind: 'started', agent: `${name} over its app-server`, session: threadId, attach });
    },

    turnRunning: () => turnId !== undefined,

    async prompt(_marker, text, onAcknowledged) {
      if (!peer) throw new Error('the agent has not started');
      const rpc = peer;
      const ended = new Promise<string>((resolve, reject) => {
        const running = turnId;
        const steer = running
          ? rpc.request('turn/steer', { threadId, expectedTurnId: running, input: input(text) })
          : rpc.request('turn/start', { threadId, input: input(text) });
        steer.then(
          (result) => {
            const accepted = asRecord(result);
            // A turn/start answers with its turn: it runs now, even before turn/started comes.
            if (!running) turnId = String(asRecord(accepted.turn).id ?? turnId ?? '');
            inTurn.push({ resolve, reject });
            onAcknowledged();
          },
          (err: unknown) =>
            reject(
              err instanceof JsonRpcRemoteError
                ? new Error(`${err.method} refused: ${err.error.message}`)
                : err,
            ),
        );
      });
      return ended;
    },

    openPermissions: () => permissions.open(),
    answerPermission: (id, optionId) => permissions.answer(id, optionId),

    stop() {
      peer?.close('the host stopped');
      stopProcess();
    },
  };
}
