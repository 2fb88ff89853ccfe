/**
 * The agent host: one coding agent behind its own protocol (ACP, Claude Code's stream-json,
 * Codex's app-server), a unix socket the gateway hands messages to, and a mirror of the session
 * on this process's terminal, so a person in the pane sees every prompt, reply, tool call and
 * permission request (and, for Codex, the command that attaches its own TUI to the session).
 *
 * It runs outside the gateway's process tree (in a tmux pane, say): a gateway restart neither
 * ends the agent nor loses what was handed to it. What it was handed is remembered by marker
 * (the message's id) for as long as it runs, so a gateway that crashed between handing a
 * message over and recording it asks here and never hands the same prompt twice (R-DL5).
 *
 * It hands a prompt to an idle agent, or into a running turn where the agent takes one and the
 * message may steer (`busy`), never while a permission request is open; it never answers a
 * permission itself.
 */
import { chmodSync, existsSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { createLineSplitter } from '../text/lineSplitter.js';
import { neutraliseLine } from '../text/neutralise.js';
import {
  type AgentHostHello,
  type AgentHostRequest,
  AgentHostStatus,
  agentHostMaxLine,
  agentHostRequestSchema,
  attachLine,
  type BusyPolicy,
  DeliveryPath,
  HandoverState,
  type HostHandover,
  maxPermissionTitle,
  type NativePath,
  takesMessage,
} from '../wire/agentHost.js';
import { createAcpAgent } from './acpAgent.js';
import type { AgentEvent, AgentSession, AgentSessionOptions } from './agentSession.js';
import { createClaudeStreamAgent } from './claudeStreamAgent.js';
import { createCodexAppServerAgent } from './codexAppServerAgent.js';

export interface AgentHostOptions {
  readonly socketPath: string;
  /** The agent's protocol: ACP (the default) or Claude Code's stream-json. */
  readonly protocol?: NativePath | undefined;
  readonly command: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly env?: NodeJS.ProcessEnv;
  /** Where the mirror is written (the pane): this process's stdout. */
  readonly mirror: (line: string) => void;
}

export interface AgentHost {
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** How long a message's mirrored text runs before it is cut (the whole went to the agent). */
const mirrorChars = 2_000;

export function createAgentHost(options: AgentHostOptions): AgentHost {
  const { mirror } = options;
  const handovers = new Map<string, HandoverState>();
  const waiters = new Set<() => void>();
  /** Prompts given whose turn has not ended. */
  let inFlight = 0;
  let gone: string | undefined;
  let server: Server | undefined;
  /** The command that attaches a person's own TUI to the agent's session, where there is one. */
  let attach: string | undefined;

  const show = (mark: string, text: string): void => {
    const line = neutraliseLine(text);
    mirror(`${mark} ${line.length > mirrorChars ? `${line.slice(0, mirrorChars)}…` : line}`);
  };

  const changed = (): void => {
    for (const waiter of [...waiters]) waiter();
  };

  const onEvent = (event: AgentEvent): void => {
    switch (event.kind) {
      case 'started':
        attach = event.attach;
        show(
          '──',
          `${event.agent}, session ${event.session}; the gateway hands messages in at ${options.socketPath}`,
        );
        if (attach !== undefined) show('──', attachLine(attach));
        return;
      case 'said':
        show('◀', event.text);
        return;
      case 'thought':
        show('…', event.text);
        return;
      case 'tool':
        show('⚙', `${event.title} (${event.status})`);
        return;
      case 'permission':
        show(
          '⚠',
          `${event.request.title} asks for a permission (${event.request.options.map((o) => o.name).join(' / ')}): held for its owner; messages wait`,
        );
        changed();
        return;
      case 'permission-answered':
        show('✓', `permission ${event.id}: ${event.outcome}`);
        changed();
        return;
      case 'turn-ended':
        show('■', `turn ended (${event.stopReason})`);
        return;
      case 'bad-line':
        show('!', `the agent wrote a line that is not its protocol: ${event.reason}`);
        return;
      case 'exited':
        gone = event.why;
        show('✗', event.why);
        changed();
        return;
    }
  };

  const sessionOptions: AgentSessionOptions = {
    command: options.command,
    args: options.args,
    cwd: options.cwd,
    env: options.env,
    onEvent,
    attachSocket: `${options.socketPath}.agent`,
  };
  const sessions: Record<NativePath, (options: AgentSessionOptions) => AgentSession> = {
    [DeliveryPath.acp]: createAcpAgent,
    [DeliveryPath.claudeStream]: createClaudeStreamAgent,
    [DeliveryPath.codexAppServer]: createCodexAppServerAgent,
  };
  const agent = sessions[options.protocol ?? DeliveryPath.acp](sessionOptions);

  const status = (): Pick<AgentHostHello, 'status' | 'detail' | 'permission'> => {
    if (gone !== undefined) return { status: AgentHostStatus.gone, detail: `${agent.name} is gone: ${gone}` };
    const [asked] = agent.openPermissions();
    if (asked) {
      return {
        status: AgentHostStatus.blocked,
        detail: `${agent.name} asks for a permission ("${asked.title}"): held until its owner answers`,
        permission: { request: asked.id, title: asked.title.slice(0, maxPermissionTitle) },
      };
    }
    if (inFlight > 0 || agent.turnRunning?.()) {
      return { status: AgentHostStatus.working, detail: `${agent.name} is in a turn: held until it ends` };
    }
    return { status: AgentHostStatus.idle };
  };

  const deliver = (marker: string, text: string, busy: BusyPolicy | undefined): HostHandover => {
    const known = handovers.get(marker);
    if (known !== undefined) return { state: known, agent: agent.name, path: agent.path };
    const now = status();
    // (An idle agent always takes one: said again so that `held` names only a status that holds.)
    if (now.status !== AgentHostStatus.idle && !takesMessage(now.status, agent.takesMidTurn, busy)) {
      return {
        state: HandoverState.absent,
        agent: agent.name,
        path: agent.path,
        held: { status: now.status, detail: now.detail ?? now.status },
      };
    }
    handovers.set(marker, HandoverState.handed);
    inFlight++;
    show('▶', text);
    agent
      .prompt(marker, text, () => {
        handovers.set(marker, HandoverState.acknowledged);
        changed();
      })
      .catch((err: Error) => {
        // Refused: not taken, so it may be handed again.
        if (handovers.get(marker) === HandoverState.handed) handovers.delete(marker);
        show('✗', `the prompt was refused: ${err.message}`);
      })
      .finally(() => {
        inFlight--;
        changed();
      });
    return { state: HandoverState.handed, agent: agent.name, path: agent.path };
  };

  const awaitAck = (marker: string, timeoutMs: number): Promise<HostHandover> =>
    new Promise((resolve) => {
      const settle = (): boolean => {
        const state = handovers.get(marker) ?? HandoverState.absent;
        if (state === HandoverState.handed && gone === undefined) return false;
        waiters.delete(check);
        clearTimeout(timer);
        resolve({ state, agent: agent.name, path: agent.path });
        return true;
      };
      const check = (): void => {
        settle();
      };
      const timer = setTimeout(() => {
        waiters.delete(check);
        resolve({
          state: handovers.get(marker) ?? HandoverState.absent,
          agent: agent.name,
          path: agent.path,
        });
      }, timeoutMs);
      waiters.add(check);
      settle();
    });

  /** The owner's answer to a permission request; throws when there is none to answer. */
  const answerPermission = (decision: 'allow' | 'deny', id: number | undefined): { answered: number } => {
    const open = agent.openPermissions();
    const request = id === undefined ? open[0] : open.find((p) => p.id === id);
    if (!request) {
      throw new Error(
        id === undefined ? `${agent.name} asks for no permission now` : `no open permission request ${id}`,
      );
    }
    const option = request.options.find(
      (o) => o.kind === (decision === 'allow' ? 'allow_once' : 'reject_once'),
    );
    // Allowing is never widened (to "always"); denying without a reject option cancels the request.
    if (decision === 'allow' && !option)
      throw new Error(`${agent.name} offers no allow-once option for "${request.title}"`);
    agent.answerPermission(request.id, option?.optionId);
    return { answered: request.id };
  };

  const answer = async (request: AgentHostRequest): Promise<unknown> => {
    switch (request.op) {
      case 'hello': {
        const now = status();
        return {
          path: agent.path,
          agent: agent.name,
          ...now,
          midTurn: agent.takesMidTurn,
          ...(attach === undefined ? {} : { attach }),
        } satisfies AgentHostHello;
      }
      case 'deliver':
        return deliver(request.marker, request.text, request.busy);
      case 'await':
        return awaitAck(request.marker, request.timeoutMs);
      case 'answer':
        return answerPermission(request.decision, request.id);
      case 'locate':
        return {
          state: handovers.get(request.marker) ?? HandoverState.absent,
          agent: agent.name,
          path: agent.path,
        } satisfies HostHandover;
    }
  };

  const serve = (socket: Socket): void => {
    const splitter = createLineSplitter(agentHostMaxLine);
    let answered = false;
    const reply = (body: Record<string, unknown>): void => {
      if (answered) return;
      answered = true;
      socket.end(`${JSON.stringify(body)}\n`);
    };
    socket.setEncoding('utf8');
    socket.on('error', () => socket.destroy());
    socket.on('data', (chunk: string) => {
      const [line] = splitter.push(chunk);
      if (splitter.takeOverflow())
        return reply({ ok: false, error: `a request longer than ${agentHostMaxLine} characters` });
      if (line === undefined) return;
      let parsed: ReturnType<typeof agentHostRequestSchema.safeParse>;
      try {
        parsed = agentHostRequestSchema.safeParse(JSON.parse(line));
      } catch {
        return reply({ ok: false, error: 'the request is not JSON' });
      }
      if (!parsed.success)
        return reply({
          ok: false,
          error: `not a request this host takes: ${parsed.error.issues[0]?.message ?? ''}`,
        });
      answer(parsed.data).then(
        (result) => reply({ ok: true, result }),
        (err: Error) => reply({ ok: false, error: err.message }),
      );
    });
  };

  return {
    async start() {
      await agent.start();
      if (existsSync(options.socketPath)) rmSync(options.socketPath);
      const listening = createServer(serve);
      await new Promise<void>((resolve, reject) => {
        listening.once('error', reject);
        listening.listen(options.socketPath, () => resolve());
      });
      // Whoever can write to it can hand this agent prompts: its owner only.
      chmodSync(options.socketPath, 0o600);
      server = listening;
    },

    async stop() {
      agent.stop();
      await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
      rmSync(options.socketPath, { force: true });
      if (sessionOptions.attachSocket) rmSync(sessionOptions.attachSocket, { force: true });
    },
  };
}
