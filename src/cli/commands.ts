import { userInfo } from 'node:os';
import { resolve } from 'node:path';
import type { z } from 'zod';
import { loadConfig } from '../config/loadConfig.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { BrokerUsage } from '../federation/BrokerConsumers.js';
import type { BrokerNodeView } from '../federation/BrokerNodes.js';
import type {
  ControlOutcome,
  MessageStatus,
  Registration,
  RosterEntry,
  SendOutcome,
} from '../gateway/Gateway.js';
import { adminRoutes, adminSocketPath } from '../interfaces/adminProtocol.js';
import type { ConsoleLogin } from '../interfaces/consoleLogin.js';
import type { BroadcastResult } from '../send/Router.js';
import { neutraliseLine } from '../text/neutralise.js';
import { attachLine, type BusyPolicy, busyPolicySchema, type OwnerDecision } from '../wire/agentHost.js';
import type { DeadLetterView, RequeueResult } from '../wire/deadLetterView.js';
import {
  describeIssues,
  type Envelope,
  entityNameSchema,
  groupNameSchema,
  groupsSchema,
  WireKind,
} from '../wire/envelope.js';
import type { PaneTarget } from '../wire/paneTarget.js';
import { callAdmin } from './adminClient.js';
import type { CliValues } from './cliOptions.js';
import { block, printResult } from './output.js';

function socketOf(values: CliValues): string {
  return adminSocketPath(loadConfig({ file: values.config }).config);
}

function tokenOf(values: CliValues): string {
  const token = values.token ?? process.env.BRIDGE_TOKEN;
  if (!token) {
    throw new BridgeError(
      ErrorCode.unauthorized,
      'no identity: set BRIDGE_TOKEN (or pass --token) to the token `agentbridge register` printed for the sending entity',
    );
  }
  return token;
}

function integerOption(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const number = Number(value);
  if (!Number.isInteger(number) || number < 0) {
    throw new BridgeError(ErrorCode.badRequest, `--${name} takes a whole number, got "${value}"`);
  }
  return number;
}

/** An option's value by the rule the gateway applies too: refused here, before it is asked. */
function checked<T extends z.ZodType>(option: string, schema: T, value: unknown): z.output<T> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  throw new BridgeError(ErrorCode.badRequest, `--${option}: ${describeIssues(result.error, 'value')}`);
}

/**
 * The pane `--tmux` / `--herdr-pane` name, or the agent host `--agent-socket` names (register,
 * connect); at most one of them.
 */
export function paneOf(values: CliValues): PaneTarget | undefined {
  const given = [values.tmux, values['herdr-pane'], values['agent-socket']].filter((v) => v !== undefined);
  if (given.length > 1) {
    throw new BridgeError(
      ErrorCode.badRequest,
      'give one of --tmux, --herdr-pane and --agent-socket, not more',
    );
  }
  const socketPath = values['agent-socket'];
  if (values.busy !== undefined && socketPath === undefined) {
    throw new BridgeError(
      ErrorCode.badRequest,
      '--busy is the policy of a worker behind an agent host: give it with --agent-socket PATH',
    );
  }
  if (values.tmux) return { type: 'tmux', target: values.tmux, socket: values['tmux-socket'] };
  if (values['herdr-pane']) return { type: 'herdr', paneId: values['herdr-pane'] };
  if (socketPath) {
    const busy = busyOf(values);
    return { type: 'agent', socketPath: resolve(socketPath), ...(busy === undefined ? {} : { busy }) };
  }
  return undefined;
}

/** `--busy steer|queue`: what a message for an agent in a turn does (wire/agentHost.ts). */
function busyOf(values: CliValues): BusyPolicy | undefined {
  return values.busy === undefined ? undefined : checked('busy', busyPolicySchema, values.busy);
}

export async function runRegister(values: CliValues): Promise<number> {
  if (!values.kind || !values.name) {
    throw new BridgeError(
      ErrorCode.badRequest,
      'register needs --kind worker|main|orchestrator|operator and --name NAME',
    );
  }
  const result = (await callAdmin(socketOf(values), adminRoutes.register, {
    kind: values.kind,
    name: checked('name', entityNameSchema, values.name),
    ...(values.group ? { groups: checked('group', groupsSchema, values.group) } : {}),
    ...(paneOf(values) ? { pane: paneOf(values) } : {}),
  })) as Registration;
  return printResult(
    values,
    result,
    () =>
      `registered ${result.name}@${result.host} (${result.kind})\n` +
      `gid:   ${result.gid}\n` +
      `token: ${result.token}\n` +
      'Keep the token: it is shown once. Give it to the agent as BRIDGE_TOKEN, or as its MCP bearer token.',
  );
}

/** `agentbridge console`: a one-time login URL for the operator console, as operator NAME. */
export async function runConsole(values: CliValues): Promise<number> {
  const name = values.name === undefined ? undefined : checked('name', entityNameSchema, values.name);
  const result = (await callAdmin(socketOf(values), adminRoutes.consoleLogin, {
    ...(name === undefined ? {} : { name }),
  })) as ConsoleLogin;
  return printResult(
    values,
    result,
    () =>
      `Open this URL in a browser on this machine (it works once, until ${new Date(result.expiresAt).toISOString()}):\n` +
      `${result.url}\n` +
      `You act as ${result.operator.name}@${result.operator.host} (operator).`,
  );
}

export async function runDeregister(values: CliValues, rest: string[]): Promise<number> {
  const [address] = rest;
  if (!address) throw new BridgeError(ErrorCode.badRequest, 'deregister needs NAME or GID');
  const result = (await callAdmin(socketOf(values), adminRoutes.deregister, { address })) as RosterEntry;
  return printResult(values, result, () => `deregistered ${result.name}@${result.host}`);
}

export async function runSend(values: CliValues, rest: string[]): Promise<number> {
  const [to, ...words] = rest;
  const text = words.join(' ');
  if (!to || !text)
    throw new BridgeError(ErrorCode.badRequest, 'send needs TO and TEXT: agentbridge send worker-1 "hello"');
  const waitMs = integerOption('wait', values.wait);
  const waitFor = values['wait-for'];
  if (waitFor !== undefined && waitFor !== 'queued' && waitFor !== 'submitted') {
    throw new BridgeError(ErrorCode.badRequest, `--wait-for takes queued or submitted, got "${waitFor}"`);
  }
  const result = (await callAdmin(socketOf(values), adminRoutes.send, {
    token: tokenOf(values),
    to,
    text,
    kind: values['reply-to'] ? WireKind.reply : WireKind.send,
    ...(values['reply-to'] ? { inReplyTo: values['reply-to'] } : {}),
    ...(values['idempotency-key'] ? { idempotencyKey: values['idempotency-key'] } : {}),
    ...(waitMs === undefined ? {} : { waitMs }),
    ...(waitFor === undefined ? {} : { waitFor }),
    ...(values.busy === undefined ? {} : { busy: busyOf(values) }),
  })) as SendOutcome;
  return printResult(values, result, () => {
    const stage = result.timedOut
      ? ` (not ${waitFor} within delivery.receiptWaitMs; ${result.stage ?? 'no receipt yet'})`
      : result.stage === null
        ? ''
        : ` (${result.stage})`;
    const head = `${result.duplicate ? 'already sent' : 'sent'} ${result.msgId} to ${result.to.name}@${result.to.host}${stage}; trace ${result.traceId}`;
    if (result.reply) return `${head}\nreply ${from(result.reply.from)}: ${block(result.reply.text, 2)}`;
    return result.reply === null ? `${head}\nno reply within ${waitMs} ms` : head;
  });
}

/** `agentbridge spawn HOST PROFILE`: as the entity whose token is given, start an agent on HOST (U4). */
export async function runSpawn(values: CliValues, rest: string[]): Promise<number> {
  const [host, profile, ...extra] = rest;
  if (!host || !profile || extra.length > 0) {
    throw new BridgeError(
      ErrorCode.badRequest,
      'spawn needs HOST and PROFILE: agentbridge spawn host-b reviewer --brief "review PR 7" [--name rev-1]',
    );
  }
  const waitMs = integerOption('wait', values.wait);
  const outcome = (await callAdmin(socketOf(values), adminRoutes.spawn, {
    token: tokenOf(values),
    host,
    profile,
    brief: values.brief ?? '',
    ...(values.name === undefined ? {} : { name: checked('name', entityNameSchema, values.name) }),
    ...(values.group === undefined ? {} : { groups: checked('group', groupsSchema, values.group) }),
    ...(waitMs === undefined ? {} : { waitMs }),
    ...(values['idempotency-key'] ? { idempotencyKey: values['idempotency-key'] } : {}),
  })) as ControlOutcome;
  return controlOutcome(values, outcome, 'spawned');
}

/** `agentbridge stop GID`: end an agent started with spawn. */
export async function runStop(values: CliValues, rest: string[]): Promise<number> {
  const [gid, ...extra] = rest;
  if (!gid || extra.length > 0)
    throw new BridgeError(ErrorCode.badRequest, 'stop needs the GID of a spawned agent');
  const waitMs = integerOption('wait', values.wait);
  const outcome = (await callAdmin(socketOf(values), adminRoutes.stop, {
    token: tokenOf(values),
    gid,
    ...(waitMs === undefined ? {} : { waitMs }),
  })) as ControlOutcome;
  return controlOutcome(values, outcome, 'stopped');
}

/**
 * `agentbridge approve|deny WORKER [--request N]`: the owner's answer to a permission request of
 * a worker's agent (one behind an agent host), the oldest open one unless --request names it.
 * A spawned worker on another host is answered as the entity that spawned it (`--token`).
 */
export function runOwnerAnswer(decision: OwnerDecision) {
  return async (values: CliValues, rest: string[]): Promise<number> => {
    const [worker, ...extra] = rest;
    const verb = decision === 'allow' ? 'approve' : 'deny';
    if (!worker || extra.length > 0) {
      throw new BridgeError(
        ErrorCode.badRequest,
        `${verb} needs the worker's name: agentbridge ${verb} WORKER[@HOST] [--request N] [--token T]`,
      );
    }
    const request = integerOption('request', values.request);
    const waitMs = integerOption('wait', values.wait);
    const token = values.token ?? process.env.BRIDGE_TOKEN;
    const answer = (await callAdmin(socketOf(values), adminRoutes.ownerAnswer, {
      worker,
      decision,
      ...(request === undefined ? {} : { request }),
      by: userInfo().username,
      ...(token === undefined ? {} : { token }),
      ...(waitMs === undefined ? {} : { waitMs }),
    })) as { said: string };
    return printResult(values, answer, () => answer.said);
  };
}

function controlOutcome(values: CliValues, outcome: ControlOutcome, done: string): number {
  const result = outcome.result;
  if (result && !result.ok) {
    throw new BridgeError(
      ErrorCode.spawnRefused,
      `${outcome.host} refused: ${result.code ?? 'refused'}: ${result.message ?? ''}`,
    );
  }
  return printResult(values, outcome, () =>
    result
      ? `${done} ${result.name ?? result.gid}@${outcome.host} (${result.gid}); trace ${outcome.traceId}` +
        (result.attach === undefined ? '' : `\n${attachLine(neutraliseLine(result.attach))}`)
      : `request ${outcome.requestId} sent to ${outcome.host}; no result yet (it arrives by drain)`,
  );
}

export async function runDrain(values: CliValues): Promise<number> {
  const max = integerOption('max', values.max);
  const waitMs = integerOption('wait', values.wait);
  const result = (await callAdmin(socketOf(values), adminRoutes.drain, {
    token: tokenOf(values),
    ...(max === undefined ? {} : { max }),
    ...(waitMs === undefined ? {} : { waitMs }),
  })) as Envelope[];
  return printResult(values, result, () =>
    result.length === 0
      ? 'no messages'
      : result.map((m) => `${m.msgId} ${m.kind} ${from(m.from)}: ${block(m.text, 2)}`).join('\n'),
  );
}

export async function runRoster(values: CliValues): Promise<number> {
  const result = (await callAdmin(socketOf(values), adminRoutes.roster)) as RosterEntry[];
  return printResult(values, result, () => {
    if (result.length === 0) return 'no entities registered; add one with `agentbridge register`';
    const rows = result.map((e) => [
      `${e.name}@${e.host}`,
      e.kind,
      e.status,
      e.depth === undefined ? '-' : String(e.depth),
      e.lastActiveAt === undefined ? '-' : secondsAgo(e.lastActiveAt),
      e.groups.join(','),
      e.gid,
    ]);
    return table(['ENTITY', 'KIND', 'STATUS', 'QUEUED', 'ACTIVE', 'GROUPS', 'GID'], rows);
  });
}

/** Who sent a message, as a line shows it: `from name@host`. */
function from(sender: { name: string; host: string }): string {
  return `from ${neutraliseLine(sender.name)}@${neutraliseLine(sender.host)}`;
}

/** `12s ago`, `4m ago`, `3h ago`: how long since a moment (ms), for reading. */
function secondsAgo(at: number): string {
  const seconds = Math.max(0, Math.round((Date.now() - at) / 1000));
  if (seconds < 120) return `${seconds}s ago`;
  if (seconds < 7200) return `${Math.round(seconds / 60)}m ago`;
  return `${Math.round(seconds / 3600)}h ago`;
}

export async function runBroadcast(values: CliValues, rest: string[]): Promise<number> {
  const text = rest.join(' ');
  if (!text)
    throw new BridgeError(
      ErrorCode.badRequest,
      'broadcast needs TEXT: agentbridge broadcast "stop and report"',
    );
  const result = (await callAdmin(socketOf(values), adminRoutes.broadcast, {
    token: tokenOf(values),
    text,
    ...(values.group?.[0] ? { group: checked('group', groupNameSchema, values.group[0]) } : {}),
    ...(values['idempotency-key'] ? { idempotencyKey: values['idempotency-key'] } : {}),
  })) as BroadcastResult;
  return printResult(values, result, () => {
    const copies = result.localCopies === undefined ? '' : ` (${result.localCopies} local copies)`;
    const partial = result.partial ? '\nsome inboxes were full and refused their copy (dead-lettered)' : '';
    return `broadcast ${result.msgId} to ${result.key}${copies}${partial}`;
  });
}

export async function runDlq(values: CliValues, rest: string[]): Promise<number> {
  const [action, msgId] = rest;
  const socket = socketOf(values);
  if (action === 'list' || action === 'show') {
    const max = integerOption('max', values.max);
    const letters = (await callAdmin(
      socket,
      adminRoutes.dlqList,
      max === undefined ? {} : { max },
    )) as DeadLetterView[];
    if (action === 'show') {
      if (!msgId)
        throw new BridgeError(ErrorCode.badRequest, 'dlq show needs a MSGID (see `agentbridge dlq list`)');
      const letter = letters.find((l) => l.msgId === msgId);
      if (!letter)
        throw new BridgeError(
          ErrorCode.badRequest,
          `no dead letter with msgId ${msgId} in the first ${letters.length}; ${outOfSight}, or raise --max`,
        );
      return printResult(values, letter, () =>
        [
          `msgId:   ${letter.msgId}`,
          `reason:  ${neutraliseLine(letter.reason)}${letter.detail ? ` (${neutraliseLine(letter.detail)})` : ''}`,
          `queue:   ${neutraliseLine(letter.queue)}`,
          `to:      ${neutraliseLine(letter.routingKey)}`,
          `from:    ${neutraliseLine(letter.host || '?')} at ${neutraliseLine(letter.at || '?')}`,
          ...(letter.sealed ? [`sealed:  ${sealedLine(letter.sealed)}`] : []),
          `body:    ${block(letter.body, 'body:    '.length)}`,
        ].join('\n'),
      );
    }
    return printResult(values, letters, () =>
      letters.length === 0
        ? 'the dead-letter queue is empty'
        : table(
            ['MSGID', 'REASON', 'QUEUE', 'DETAIL'],
            letters.map((l) => [l.msgId ?? '-', l.reason, l.queue, l.detail.slice(0, 60)]),
          ),
    );
  }
  if (action === 'requeue') {
    if (!msgId && !values.all)
      throw new BridgeError(ErrorCode.badRequest, 'dlq requeue needs a MSGID or --all');
    const result = (await callAdmin(socket, adminRoutes.dlqRequeue, {
      ...(msgId ? { msgId } : {}),
      ...(values.force ? { force: true } : {}),
    })) as RequeueResult;
    return printResult(values, result, () => describeRequeue(result, msgId ?? '--all'));
  }
  throw new BridgeError(
    ErrorCode.badRequest,
    'dlq takes list, show MSGID or requeue (MSGID | --all) [--force]',
  );
}

/**
 * Why a letter may not be found: RabbitMQ queues cannot be browsed, and a reader holds what it
 * reads until it is done.
 */
const outOfSight =
  'a letter another reader (agentbridge dlq list, the console) is reading at this moment is out of sight until it is done: try again';

/** What a requeue did, and for letters it left, why and how to send them anyway. */
function describeRequeue(result: RequeueResult, target: string): string {
  const moved = `requeued ${result.requeued} dead letter${result.requeued === 1 ? '' : 's'}`;
  const skipped = Object.entries(result.skipped);
  const left = skipped.reduce((sum, [, n]) => sum + n, 0);
  if (left === 0 && result.requeued === 0 && target !== '--all')
    return `${moved}: none with msgId ${target} in bridge.dlq now; ${outOfSight}, or see what is there with \`agentbridge dlq list\``;
  if (left === 0) return moved;
  const byReason = skipped.map(([reason, n]) => `${n} ${reason}`).join(', ');
  return (
    `${moved}; left ${left} in bridge.dlq: ${byReason}. They were refused on arrival and would be ` +
    "refused again (`agentbridge dlq show MSGID` says why): fix the cause (the sender's key in the trust " +
    `store, the message), then send them anyway with \`agentbridge dlq requeue ${target} --force\``
  );
}

interface StatusView {
  host: string;
  pid: number;
  uptimeSeconds: number;
  mode: string;
  broker: {
    state: string;
    lastError: string | null;
    node: string | null;
    nodes: BrokerNodeView[];
    usage: BrokerUsage;
    unconfirmed: string[];
    queueMode: string;
    peers: string[];
    deadLetterQueue: number | undefined;
    inboxes: Record<string, number | undefined>;
  } | null;
  signing: { mode: string; publicKey: string | null; trustedHosts: string[]; problem: string | null } | null;
  store: string;
  entities: RosterEntry[];
  deliveries: Record<string, number>;
  deadLetters: Record<string, number>;
  mcpSessions: { total: number; byEntity: Record<string, number> };
}

/** `agentbridge status MSGID`: the stages of a message sent from this gateway (R-RC1). */
async function runMessageStatus(values: CliValues, msgId: string): Promise<number> {
  const result = (await callAdmin(socketOf(values), adminRoutes.messageStatus, { msgId })) as MessageStatus;
  return printResult(values, result, () => {
    const to = result.to.name ? `${result.to.name}@${result.to.host} (${result.to.gid})` : result.to.gid;
    const stages = result.stages.map((s) => {
      const why = [s.reason, s.detail].filter((part) => part !== undefined).join(': ');
      return `  ${new Date(s.at).toISOString()}  ${s.stage}${why ? `  ${why}` : ''}`;
    });
    return [
      `message:  ${result.msgId} (${result.kind})`,
      `to:       ${to}`,
      `stage:    ${result.stage ?? `none yet (send ${result.sendState})`}`,
      `send:     ${result.sendState}${result.failure ? ` (${result.failure})` : ''}`,
      `trace:    ${result.traceId}`,
      ...(stages.length > 0 ? ['stages:', ...stages] : []),
    ].join('\n');
  });
}

/** Which node the gateway is on and what it knows of the others (one line for one node). */
function brokerNodeLines(current: string | null, nodes: readonly BrokerNodeView[]): string[] {
  if (nodes.length <= 1) return current ? [`broker node:  ${current}`] : [];
  return [
    `broker nodes: ${current ? `on ${current}` : 'on none'} (${nodes.length} nodes)`,
    ...nodes.map((n) => {
      const failing = n.state === 'failing' ? `, ${n.failures} failed (${n.lastError ?? '?'})` : '';
      const retry = n.retryAt === null ? '' : `, next try ${new Date(n.retryAt).toISOString()}`;
      return `  ${n.node}  ${n.state}${failing}${retry}`;
    }),
  ];
}

/** The broker consumers' footprint: "3 on 3 channels, 1 connection". */
function usageLine(usage: BrokerUsage): string {
  const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? '' : 's'}`;
  return `${usage.consumers} on ${plural(usage.channels, 'channel')}, ${plural(usage.connections, 'connection')}`;
}

export async function runStatus(values: CliValues, rest: string[] = []): Promise<number> {
  const [msgId, ...extra] = rest;
  if (extra.length > 0) throw new BridgeError(ErrorCode.badRequest, 'status takes at most one MSGID');
  if (msgId !== undefined) return runMessageStatus(values, msgId);
  const result = (await callAdmin(socketOf(values), adminRoutes.status)) as StatusView;
  return printResult(values, result, () => {
    const counts = (record: Record<string, number | undefined>) =>
      Object.entries(record)
        .map(([key, n]) => `${key}=${n ?? '?'}`)
        .join(' ');
    const broker = result.broker;
    return [
      `host:         ${result.host} (pid ${result.pid}, up ${result.uptimeSeconds}s)`,
      `mode:         ${result.mode}`,
      broker
        ? `broker:       ${broker.state}${broker.lastError ? ` (${broker.lastError})` : ''}, ${broker.queueMode} queues, peers: ${broker.peers.join(', ') || 'none'}`
        : 'broker:       none (single-host mode)',
      ...(broker
        ? [
            ...brokerNodeLines(broker.node, broker.nodes),
            `consumers:    ${usageLine(broker.usage)}`,
            ...(broker.unconfirmed.length > 0
              ? [
                  `unconfirmed:  ${broker.unconfirmed.join(', ')}: the broker has not confirmed a message to ` +
                    'them in time (a cluster without its majority?); sends to them fail until it does',
                ]
              : []),
            `inboxes:      ${counts(broker.inboxes) || 'none'}`,
            // The broker's queue is every gateway's on this broker (or vhost): not this one's count.
            `broker DLQ:   ${broker.deadLetterQueue ?? '?'} letters in bridge.dlq, from every gateway on the broker (agentbridge dlq list)`,
          ]
        : []),
      ...(result.signing
        ? [
            `signing:      ${result.signing.mode}${result.signing.publicKey ? `, key ${result.signing.publicKey}` : ''}` +
              `${result.signing.problem ? ` (${result.signing.problem})` : ''}`,
            `trusts:       ${result.signing.trustedHosts.join(', ') || 'no peer yet (agentbridge trust add HOST KEY)'}`,
          ]
        : []),
      `event log:    ${result.store}`,
      `entities:     ${result.entities.length}`,
      ...result.entities.flatMap((e) =>
        e.agent === undefined
          ? []
          : [
              `  ${neutraliseLine(e.name)}: ${e.agent.path} (${neutraliseLine(e.agent.agent)})` +
                (e.agent.attach === undefined ? '' : `; ${attachLine(neutraliseLine(e.agent.attach))}`),
            ],
      ),
      `deliveries:   ${counts(result.deliveries) || 'none yet'}`,
      `dead-lettered here since start: ${counts(result.deadLetters) || 'none'}`,
      `mcp sessions: ${result.mcpSessions.total}${result.mcpSessions.total > 0 ? ` (${counts(result.mcpSessions.byEntity)})` : ''}`,
    ].join('\n');
  });
}

/** Rows under a header, in columns; every cell on one line, neutralised (most are someone else's). */
function table(header: string[], rows: string[][]): string {
  const shown = rows.map((row) => row.map(neutraliseLine));
  const widths = header.map((h, i) => Math.max(h.length, ...shown.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  return [line(header), ...shown.map(line)].join('\n');
}

/** How a sealed dead letter read here: to whom it is sealed, and whether its text opened. */
function sealedLine(sealed: NonNullable<DeadLetterView['sealed']>): string {
  const to = neutraliseLine(sealed.to.join(', '));
  return sealed.opened
    ? `to ${to}; opened here`
    : `to ${to}; its text does not open here (${neutraliseLine(sealed.why ?? 'not sealed to this host')})`;
}
