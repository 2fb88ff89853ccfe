/**
 * A coding agent over the Agent Client Protocol (agentclientprotocol.com; Gemini CLI's
 * `gemini --acp`, OpenCode's `opencode acp`): we are the client, the agent a child process
 * speaking JSON-RPC on its stdio.
 *
 *   initialize {protocolVersion: 1, clientCapabilities}   → {protocolVersion, agentInfo?, …}
 *   session/new {cwd, mcpServers}                          → {sessionId}
 *   session/prompt {sessionId, prompt: [{type: text}]}     → {stopReason}, when the turn ends
 *   ← session/update {sessionId, update}                    streamed while the turn runs
 *   ← session/request_permission {sessionId, toolCall, options}
 *                                                          answered by the owner, never by a message
 *
 * The client offers no file system and no terminal (`clientCapabilities`), so the agent uses
 * its own tools, and asks before those that need a permission. A session runs one prompt turn
 * at a time (protocol/prompt-turn): a prompt for a busy agent waits for the turn to end.
 */
import { DeliveryPath } from '../wire/agentHost.js';
import {
  type AgentSession,
  type AgentSessionOptions,
  asRecord,
  createPermissionDesk,
  startAgentProcess,
} from './agentSession.js';
import { createJsonRpcPeer, type JsonRpcPeer } from './jsonRpcPeer.js';

export const acpProtocolVersion = 1;

export function createAcpAgent(options: AgentSessionOptions): AgentSession {
  const { onEvent } = options;
  let stopProcess = (): void => {};
  let peer: JsonRpcPeer | undefined;
  let sessionId = '';
  let name = options.command;
  /** Called at the next session update of the running turn. */
  let acknowledge: (() => void) | undefined;
  const permissions = createPermissionDesk(onEvent);

  const acknowledged = (): void => {
    acknowledge?.();
    acknowledge = undefined;
  };

  /** A session update (agentclientprotocol.com/protocol/prompt-turn#3-agent-reports-output). */
  const reportUpdate = (update: Record<string, unknown>): void => {
    const kind = update.sessionUpdate;
    const content = asRecord(update.content);
    const text = content.type === 'text' ? String(content.text ?? '') : undefined;
    if (kind === 'agent_message_chunk' && text !== undefined) onEvent({ kind: 'said', text });
    else if (kind === 'agent_thought_chunk' && text !== undefined) onEvent({ kind: 'thought', text });
    else if (kind === 'tool_call') {
      onEvent({
        kind: 'tool',
        title: String(update.title ?? 'a tool call'),
        status: String(update.status ?? 'pending'),
      });
    } else if (kind === 'tool_call_update' && update.status !== undefined) {
      onEvent({ kind: 'tool', title: String(update.title ?? 'tool call'), status: String(update.status) });
    }
  };

  const onRequest = (method: string, params: unknown): Promise<unknown> => {
    if (method !== 'session/request_permission') {
      return Promise.reject(new Error(`the client offers no ${method}`));
    }
    const body = asRecord(params);
    const toolCall = asRecord(body.toolCall);
    const offered = (Array.isArray(body.options) ? body.options : []).map((o) => {
      const option = asRecord(o);
      return { optionId: String(option.optionId), name: String(option.name), kind: String(option.kind) };
    });
    // Asking means it is at work on the prompt.
    acknowledged();
    return permissions
      .ask(String(toolCall.title ?? toolCall.kind ?? 'a tool call'), offered)
      .then((optionId) => ({
        outcome: optionId === undefined ? { outcome: 'cancelled' } : { outcome: 'selected', optionId },
      }));
  };

  return {
    path: DeliveryPath.acp,
    takesMidTurn: false,
    get name() {
      return name;
    },

    async start() {
      const { child, exited, stop } = startAgentProcess(options, options.args, (err) => {
        peer?.close(err.message);
        permissions.cancelAll();
      });
      stopProcess = stop;
      const rpc = createJsonRpcPeer(child.stdout, child.stdin, {
        request: onRequest,
        notification: (method, params) => {
          if (method !== 'session/update') return;
          const body = asRecord(params);
          if (body.sessionId !== sessionId) return;
          acknowledged();
          reportUpdate(asRecord(body.update));
        },
        badLine: (reason) => onEvent({ kind: 'bad-line', reason }),
      });
      peer = rpc;
      const init = asRecord(
        await Promise.race([
          rpc.request('initialize', {
            protocolVersion: acpProtocolVersion,
            clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
          }),
          exited,
        ]),
      );
      const info = asRecord(init.agentInfo);
      if (typeof info.name === 'string') {
        const title = String(info.title ?? info.name);
        name = typeof info.version === 'string' ? `${title} ${info.version}` : title;
      }
      const session = asRecord(
        await Promise.race([rpc.request('session/new', { cwd: options.cwd, mcpServers: [] }), exited]),
      );
      if (typeof session.sessionId !== 'string') throw new Error('session/new answered without a sessionId');
      sessionId = session.sessionId;
      onEvent({ kind: 'started', agent: `${name} over ACP`, session: sessionId });
    },

    async prompt(_marker, text, onAcknowledged) {
      if (!peer) throw new Error('the agent has not started');
      acknowledge = onAcknowledged;
      try {
        const result = asRecord(
          await peer.request('session/prompt', { sessionId, prompt: [{ type: 'text', text }] }),
        );
        const stopReason = String(result.stopReason ?? 'unknown');
        // A turn that ended before any update still took the prompt.
        acknowledged();
        onEvent({ kind: 'turn-ended', stopReason });
        return stopReason;
      } finally {
        acknowledge = undefined;
      }
    },

    openPermissions: () => permissions.open(),
    answerPermission: (id, optionId) => permissions.answer(id, optionId),

    stop() {
      peer?.close('the host stopped');
      stopProcess();
    },
  };
}
