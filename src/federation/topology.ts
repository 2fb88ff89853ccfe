/**
 * The broker topology of SPEC §4, as data. Names are normative. The shared part (exchanges,
 * `bridge.dlq`) is declared once by the operator (`agentbridge broker setup`) and only checked by
 * gateways; each gateway declares its own queues. Pure: no amqplib here.
 */
import { broadcastPrefix, isGroupName } from '../wire/envelope.js';

export const Exchange = {
  msg: 'bridge.msg',
  roster: 'bridge.roster',
  /**
   * Per-host control (SPAWN, STOP, RECEIPT). A topic exchange, keyed `control.<host>`, so topic
   * permissions can keep a login from binding to another host's key. It replaces the direct
   * `bridge.control` of earlier releases (RabbitMQ cannot change an exchange's type in place).
   */
  control: 'bridge.control.topic',
  dlx: 'bridge.dlx',
} as const;

/** The direct control exchange of earlier releases; `agentbridge broker setup --delete-legacy` removes it. */
export const legacyControlExchange = 'bridge.control';

export const dlqName = 'bridge.dlq';

export interface ExchangeSpec {
  name: string;
  type: 'topic' | 'direct' | 'fanout';
  durable: boolean;
}

export interface BindingSpec {
  exchange: string;
  key: string;
}

export interface QueueSpec {
  name: string;
  durable: boolean;
  exclusive: boolean;
  autoDelete: boolean;
  arguments: Record<string, unknown>;
  bindings: BindingSpec[];
  /** Bindings to remove when the queue is declared: ones an older gateway made that the rule refuses. */
  unbindings?: BindingSpec[];
}

export const QueueMode = { classic: 'classic', quorum: 'quorum' } as const;
export type QueueMode = (typeof QueueMode)[keyof typeof QueueMode];

export const sharedExchanges: readonly ExchangeSpec[] = [
  { name: Exchange.msg, type: 'topic', durable: true },
  { name: Exchange.roster, type: 'topic', durable: true },
  { name: Exchange.control, type: 'topic', durable: true },
  { name: Exchange.dlx, type: 'fanout', durable: true },
];

/** `bridge.dlq` of classic mode. */
export const dlqSpec: QueueSpec = {
  name: dlqName,
  durable: true,
  exclusive: false,
  autoDelete: false,
  arguments: {},
  bindings: [{ exchange: Exchange.dlx, key: '' }],
};

/**
 * `bridge.dlq` as `agentbridge broker setup` declares it for `mode`: in quorum mode a quorum queue,
 * replicated like the inboxes it takes from. No delivery limit: operator tooling reads it with
 * basic.get and leaves what it does not take, and each such return counts as a delivery.
 */
export function dlqSpecOf(mode: QueueMode): QueueSpec {
  return mode === QueueMode.quorum ? { ...dlqSpec, arguments: { 'x-queue-type': 'quorum' } } : dlqSpec;
}

/**
 * How often a quorum queue hands a message out before it dead-letters it as `delivery_limit`.
 * Every return counts (a consumer channel or connection lost with it unacked, a gateway crash,
 * a consumer timeout): the gateway never requeues on purpose, so twenty returns mean a message
 * that keeps taking its gateway down, not bad luck. RabbitMQ 4's default is 20 as well.
 */
export const quorumDeliveryLimit = 20;

/**
 * What every quorum queue a gateway consumes carries (R-TOP2): one active consumer at a time
 * (quorum queues ignore the consumer's `exclusive` flag; a lock queue makes a second gateway
 * fail loudly); dead-lettering at-least-once, so a dead letter leaves the queue only once
 * `bridge.dlq` has confirmed it (RabbitMQ requires `reject-publish` overflow for that, and has
 * no `reject-publish-dlx` on quorum queues); an explicit delivery limit (RabbitMQ 3.x has none
 * by default: a message redelivered without end would stay at the head for ever).
 */
export const quorumArguments = {
  'x-queue-type': 'quorum',
  'x-single-active-consumer': true,
  'x-overflow': 'reject-publish',
  'x-dead-letter-strategy': 'at-least-once',
  'x-delivery-limit': quorumDeliveryLimit,
} as const;

export function inboxName(gid: string): string {
  return `agent.${gid}.inbox`;
}

export function isInboxName(name: string): boolean {
  return /^agent\..+\.inbox$/.test(name);
}

/** The per-inbox lock queue of quorum mode: exclusive, so a second gateway's declare fails. */
export function inboxLockName(gid: string): string {
  return `agent.${gid}.lock`;
}

/**
 * The address of a broadcast (the envelope's `to`): `broadcast.all`, or `broadcast.<group>`.
 * On the broker it travels under its deployment's routing key (`deploymentKey`).
 */
export const broadcastAllKey = `${broadcastPrefix}all`;

export function broadcastKey(group?: string): string {
  return group === undefined ? broadcastAllKey : `${broadcastPrefix}${group}`;
}

/**
 * The routing key of a broadcast or PRESENCE inside one deployment (`broker.deployment`):
 * `deployment.<id>.<key>`. Deployments that share a broker (even a vhost) bind only their own,
 * so one's broadcasts and announcements never reach another's inboxes or roster. The id has no
 * dots, so no deployment's keys are a prefix of another's.
 */
export function deploymentKey(deployment: string, key: string): string {
  return `deployment.${deployment}.${key}`;
}

/** What `bridge.msg` carries an envelope under: its recipient gid, or its deployment's broadcast key. */
export function messageRoutingKey(deployment: string, to: string): string {
  return to.startsWith(broadcastPrefix) ? deploymentKey(deployment, to) : to;
}

/** The broadcast keys an inbox binds: its deployment's `broadcast.all` and one per group it is in. */
export function inboxBroadcastKeys(deployment: string, groups: readonly string[]): string[] {
  return [broadcastAllKey, ...groups.filter(isGroupName).map(broadcastKey)].map((key) =>
    deploymentKey(deployment, key),
  );
}

export interface InboxOptions {
  gid: string;
  /** `broker.deployment`: the broadcasts the inbox takes are its deployment's. */
  deployment: string;
  groups: readonly string[];
  /** Groups the entity's stored row names that are no group names: their bindings are removed. */
  refusedGroups?: readonly string[];
  mode: QueueMode;
  maxLength: number;
}

/** An entity's inbox (R-TOP1, R-H1): durable, dead-lettering, capped, bound to its gid and broadcasts. */
export function inboxSpec(options: InboxOptions): QueueSpec {
  const common = { 'x-dead-letter-exchange': Exchange.dlx, 'x-max-length': options.maxLength };
  const args =
    options.mode === QueueMode.quorum
      ? { ...common, ...quorumArguments }
      : { ...common, 'x-overflow': 'reject-publish-dlx' };
  return {
    name: inboxName(options.gid),
    durable: true,
    exclusive: false,
    autoDelete: false,
    arguments: args,
    bindings: [
      { exchange: Exchange.msg, key: options.gid },
      ...inboxBroadcastKeys(options.deployment, options.groups).map((key) => ({
        exchange: Exchange.msg,
        key,
      })),
    ],
    // Never a wildcard binding, whatever reached here: `broadcast.#` would take every group's.
    // Earlier releases bound the bare broadcast keys, which every deployment on the broker shares.
    unbindings: [
      ...[...(options.refusedGroups ?? []), ...options.groups.filter((g) => !isGroupName(g))].map(
        (group) => ({ exchange: Exchange.msg, key: deploymentKey(options.deployment, broadcastKey(group)) }),
      ),
      ...legacyBroadcastKeys(options.groups, options.refusedGroups).map((key) => ({
        exchange: Exchange.msg,
        key,
      })),
    ],
  };
}

/** The bare broadcast keys earlier releases bound an inbox to: unbound when it is declared. */
export function legacyBroadcastKeys(
  groups: readonly string[],
  refusedGroups: readonly string[] = [],
): string[] {
  return [broadcastAllKey, ...[...groups, ...refusedGroups].map(broadcastKey)];
}

export function inboxLockSpec(gid: string): QueueSpec {
  return lockSpec(inboxLockName(gid));
}

/**
 * A lock queue: exclusive to the connection that declared it, so another connection's declare
 * fails with 405 RESOURCE_LOCKED. It lives on the node of that connection and goes with it.
 */
function lockSpec(name: string): QueueSpec {
  return {
    name,
    durable: false,
    exclusive: true,
    autoDelete: true,
    arguments: {},
    bindings: [],
  };
}

/** The routing key of a host's control messages on `bridge.control.topic`. */
export function controlKey(hostId: string): string {
  return `control.${hostId}`;
}

/** A host's control queue: in quorum mode a quorum queue like the inboxes. */
export function controlSpec(hostId: string, mode: QueueMode = QueueMode.classic): QueueSpec {
  const common = { 'x-dead-letter-exchange': Exchange.dlx };
  return {
    name: `control.${hostId}`,
    durable: true,
    exclusive: false,
    autoDelete: false,
    arguments: mode === QueueMode.quorum ? { ...common, ...quorumArguments } : common,
    bindings: [{ exchange: Exchange.control, key: controlKey(hostId) }],
  };
}

/**
 * The lock queue of a quorum control queue, exclusive like an inbox's. Not `control.<host>.lock`:
 * host ids may hold dots, and that could be the control queue of host `<host>.lock`.
 */
export function controlLockName(hostId: string): string {
  return `lock.control.${hostId}`;
}

export function controlLockSpec(hostId: string): QueueSpec {
  return lockSpec(controlLockName(hostId));
}

/** The routing key of a host's PRESENCE on `bridge.roster`: its deployment's. */
export function rosterKey(deployment: string, hostId: string): string {
  return deploymentKey(deployment, `roster.${hostId}`);
}

/** The host `key` announces in `deployment` (rosterKey's inverse), or undefined for another key. */
export function rosterKeyHost(deployment: string, key: string): string | undefined {
  const prefix = rosterKey(deployment, '');
  return key.startsWith(prefix) && key.length > prefix.length ? key.slice(prefix.length) : undefined;
}

export function rosterQueueName(hostId: string): string {
  return `roster.${hostId}`;
}

/** A gateway's roster queue: every PRESENCE of its deployment, none of another's. */
export function rosterSpec(deployment: string, hostId: string): QueueSpec {
  return {
    name: rosterQueueName(hostId),
    durable: false,
    exclusive: true,
    autoDelete: true,
    arguments: {},
    bindings: [{ exchange: Exchange.roster, key: rosterBindingKey(deployment) }],
  };
}

export function rosterBindingKey(deployment: string): string {
  return deploymentKey(deployment, 'roster.#');
}
