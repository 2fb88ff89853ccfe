/**
 * The broker topology of SPEC §4, as data. Names are normative. The shared part (exchanges,
 * `bridge.dlq`) is declared once by the operator (`bridge broker setup`) and only checked by
 * gateways; each gateway declares its own queues. Pure: no amqplib here.
 */
import { isGroupName } from '../wire/envelope.js';

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

/** The direct control exchange of earlier releases; `bridge broker setup --delete-legacy` removes it. */
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

export const dlqSpec: QueueSpec = {
  name: dlqName,
  durable: true,
  exclusive: false,
  autoDelete: false,
  arguments: {},
  bindings: [{ exchange: Exchange.dlx, key: '' }],
};

export function inboxName(gid: string): string {
  return `agent.${gid}.inbox`;
}

/** The per-inbox lock queue of quorum mode: exclusive, so a second gateway's declare fails. */
export function inboxLockName(gid: string): string {
  return `agent.${gid}.lock`;
}

export const broadcastAllKey = 'broadcast.all';

export function broadcastKey(group?: string): string {
  return group === undefined ? broadcastAllKey : `broadcast.${group}`;
}

export interface InboxOptions {
  gid: string;
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
      ? {
          ...common,
          'x-queue-type': 'quorum',
          'x-single-active-consumer': true,
          'x-overflow': 'reject-publish',
        }
      : { ...common, 'x-overflow': 'reject-publish-dlx' };
  return {
    name: inboxName(options.gid),
    durable: true,
    exclusive: false,
    autoDelete: false,
    arguments: args,
    bindings: [
      { exchange: Exchange.msg, key: options.gid },
      { exchange: Exchange.msg, key: broadcastAllKey },
      ...options.groups
        .filter(isGroupName)
        .map((group) => ({ exchange: Exchange.msg, key: broadcastKey(group) })),
    ],
    // Never a wildcard binding, whatever reached here: `broadcast.#` would take every group's.
    unbindings: [...(options.refusedGroups ?? []), ...options.groups.filter((g) => !isGroupName(g))].map(
      (group) => ({ exchange: Exchange.msg, key: broadcastKey(group) }),
    ),
  };
}

export function inboxLockSpec(gid: string): QueueSpec {
  return {
    name: inboxLockName(gid),
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

export function controlSpec(hostId: string): QueueSpec {
  return {
    name: `control.${hostId}`,
    durable: true,
    exclusive: false,
    autoDelete: false,
    arguments: { 'x-dead-letter-exchange': Exchange.dlx },
    bindings: [{ exchange: Exchange.control, key: controlKey(hostId) }],
  };
}

export function rosterKey(hostId: string): string {
  return `roster.${hostId}`;
}

export function rosterSpec(hostId: string): QueueSpec {
  return {
    name: `roster.${hostId}`,
    durable: false,
    exclusive: true,
    autoDelete: true,
    arguments: {},
    bindings: [{ exchange: Exchange.roster, key: 'roster.#' }],
  };
}
