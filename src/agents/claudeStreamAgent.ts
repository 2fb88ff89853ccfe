/**
 * Claude Code in its headless stream-json mode (code.claude.com/docs/en/headless: `claude -p
 * --input-format stream-json --output-format stream-json`): the process owner writes user
 * messages as JSON lines on its stdin for as long as stdin stays open, and reads the session as
 * JSON lines on its stdout.
 *
 *   → {"type":"user","message":{"role":"user","content":[{"type":"text","text":…}]}}
 *   ← {"type":"system","subtype":"init","session_id":…}
 *   ← {"type":"user",…,"isReplay":true}     the message taken (`--replay-user-messages`)
 *   ← {"type":"assistant","message":{"content":[text | tool_use]}}
 *   ← {"type":"result","subtype":…}          the turn's end
 *   ← {"type":"control_request","request_id":…,"request":{"subtype":"can_use_tool",…}}
 *   → {"type":"control_response","response":{"subtype":"success","request_id":…,"response":{"behavior":…}}}
 *
 * A message written while a turn runs is taken at the turn's next inference boundary, so a
 * worker on this path is given messages mid-turn. The agent acknowledges a message by replaying
 * it (`--replay-user-messages`), or, for the message a turn starts with, by the turn's init
 * (Claude 2.1 replays only with the model's first answer): that, not the write, is `submitted`. Tool permissions come to
 * the process owner as control requests (`--permission-prompt-tool stdio`) and go to the
 * worker's owner, never to a message. The flags are added when the command lacks them.
 */
import { createLineSplitter } from '../text/lineSplitter.js';
import { DeliveryPath } from '../wire/agentHost.js';
import {
  type AgentSession,
  type AgentSessionOptions,
  asRecord,
  createPermissionDesk,
  startAgentProcess,
} from './agentSession.js';

/** The flags this path needs, each added when the command lacks it. */
const requiredFlags: ReadonlyArray<readonly string[]> = [
  ['-p'],
  ['--input-format', 'stream-json'],
  ['--output-format', 'stream-json'],
  ['--verbose'],
  ['--replay-user-messages'],
  ['--permission-prompt-tool', 'stdio'],
];

/** The command's arguments with every flag this path needs. */
export function claudeStreamArgs(args: readonly string[]): string[] {
  const out = [...args];
  for (const [flag, value] of requiredFlags) {
    if (flag === undefined || out.includes(flag) || (flag === '-p' && out.includes('--print'))) continue;
    out.push(flag, ...(value === undefined ? [] : [value]));
  }
  return out;
}

/** The text blocks of a message's content (a string, or an array of blocks). */
function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  return (Array.isArray(content) ? content : [])
    .map(asRecord)
    .filter((block) => block.type === 'text')
    .map((block) => String(block.text ?? ''))
    .join('');
}

export function createClaudeStreamAgent(options: AgentSessionOptions): AgentSession {
  const { onEvent } = options;
  const permissions = createPermissionDesk(onEvent);
  let write = (_line: Record<string, unknown>): void => {
    throw new Error('the agent has not started');
  };
  let stopProcess = (): void => {};
  let name = 'Claude Code';
  let failed: string | undefined;
  let session: unknown;
  /** Whether a turn runs (from its init to its result). */
  let turnOpen = false;
  /** Messages written while no turn ran, oldest first: the next turn starts with the first. */
  let startsTurn: string[] = [];
  /** Prompts written and not replayed yet, by marker: their acknowledgement. */
  const unacknowledged = new Map<string, () => void>();
  /** Prompts replayed whose turn has not ended: settled at the next result. */
  let inTurn: Array<{ resolve: (stopReason: string) => void; reject: (err: Error) => void }> = [];
  const pending = new Map<string, { resolve: (stopReason: string) => void; reject: (err: Error) => void }>();

  /** The agent has taken the message: it joins the running turn, whose end settles it. */
  const acknowledge = (marker: string): void => {
    const onAcknowledged = unacknowledged.get(marker);
    if (!onAcknowledged) return;
    unacknowledged.delete(marker);
    startsTurn = startsTurn.filter((m) => m !== marker);
    const settle = pending.get(marker);
    pending.delete(marker);
    if (settle) inTurn.push(settle);
    onAcknowledged();
  };

  const endTurn = (stopReason: string): void => {
    turnOpen = false;
    const ended = inTurn;
    inTurn = [];
    for (const turn of ended) turn.resolve(stopReason);
    onEvent({ kind: 'turn-ended', stopReason });
  };

  const onControlRequest = (line: Record<string, unknown>): void => {
    const requestId = line.request_id;
    const request = asRecord(line.request);
    const respond = (response: Record<string, unknown>): void =>
      write({ type: 'control_response', response: { subtype: 'success', request_id: requestId, response } });
    if (request.subtype !== 'can_use_tool') {
      write({
        type: 'control_response',
        response: {
          subtype: 'error',
          request_id: requestId,
          error: `the host does not handle ${String(request.subtype)}`,
        },
      });
      return;
    }
    const input = asRecord(request.input);
    const tool = String(request.tool_name ?? 'a tool');
    const title = typeof input.command === 'string' ? `${tool}: ${input.command}` : tool;
    void permissions
      .ask(title, [
        { optionId: 'allow', name: 'Allow', kind: 'allow_once' },
        { optionId: 'deny', name: 'Deny', kind: 'reject_once' },
      ])
      .then((choice) =>
        respond(
          choice === 'allow'
            ? { behavior: 'allow', updatedInput: input }
            : { behavior: 'deny', message: "the worker's owner did not allow it" },
        ),
      );
  };

  const receive = (line: Record<string, unknown>): void => {
    switch (line.type) {
      case 'system':
        if (line.subtype !== 'init') return;
        // Every turn starts with one. A turn that starts while no turn ran starts with the
        // oldest message written meanwhile: Claude has taken it (its replay comes only with the
        // model's first answer). The mirror shows a session once.
        if (!turnOpen) {
          turnOpen = true;
          const [opening] = startsTurn;
          if (opening !== undefined) acknowledge(opening);
        }
        if (line.session_id !== session) {
          session = line.session_id;
          name =
            typeof line.claude_code_version === 'string' ? `Claude Code ${line.claude_code_version}` : name;
          onEvent({ kind: 'started', agent: `${name} over stream-json`, session: String(session ?? '') });
        }
        return;
      case 'user': {
        if (line.isReplay !== true) return;
        const text = textOf(asRecord(line.message).content);
        for (const marker of [...unacknowledged.keys()]) if (text.includes(marker)) acknowledge(marker);
        return;
      }
      case 'assistant': {
        for (const block of (Array.isArray(asRecord(line.message).content)
          ? (asRecord(line.message).content as unknown[])
          : []
        ).map(asRecord)) {
          if (block.type === 'text') onEvent({ kind: 'said', text: String(block.text ?? '') });
          else if (block.type === 'tool_use')
            onEvent({ kind: 'tool', title: String(block.name ?? 'a tool'), status: 'called' });
        }
        return;
      }
      case 'result':
        endTurn(String(line.subtype ?? 'done'));
        return;
      case 'control_request':
        onControlRequest(line);
        return;
      default:
        return;
    }
  };

  return {
    path: DeliveryPath.claudeStream,
    takesMidTurn: true,
    get name() {
      return name;
    },

    async start() {
      const { child, exited, stop } = startAgentProcess(options, claudeStreamArgs(options.args), (err) => {
        failed = err.message;
        permissions.cancelAll();
        for (const settle of [...pending.values(), ...inTurn]) settle.reject(err);
        pending.clear();
        inTurn = [];
      });
      stopProcess = stop;
      write = (message) => {
        child.stdin.write(`${JSON.stringify(message)}\n`);
      };
      const splitter = createLineSplitter(16 * 1024 * 1024);
      child.stdout.setEncoding('utf8');
      child.stdout.on('data', (chunk: string) => {
        for (const text of splitter.push(chunk)) {
          let line: unknown;
          try {
            line = JSON.parse(text);
          } catch {
            onEvent({ kind: 'bad-line', reason: `not JSON: ${text.slice(0, 120)}` });
            continue;
          }
          receive(asRecord(line));
        }
        if (splitter.takeOverflow()) onEvent({ kind: 'bad-line', reason: 'a line over 16 MiB was dropped' });
      });
      // Claude says nothing until its first message (its session opens then): its start is the
      // process running.
      await Promise.race([new Promise((resolve) => child.once('spawn', resolve)), exited]);
    },

    prompt(marker, text, onAcknowledged) {
      if (failed !== undefined) return Promise.reject(new Error(failed));
      return new Promise<string>((resolve, reject) => {
        pending.set(marker, { resolve, reject });
        unacknowledged.set(marker, onAcknowledged);
        if (!turnOpen) startsTurn.push(marker);
        write({
          type: 'user',
          message: { role: 'user', content: [{ type: 'text', text }] },
          parent_tool_use_id: null,
          session_id: '',
        });
      });
    },

    openPermissions: () => permissions.open(),
    answerPermission: (id, optionId) => permissions.answer(id, optionId),

    stop() {
      stopProcess();
    },
  };
}
