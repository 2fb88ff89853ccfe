import { broadcastPrefix } from '../wire/envelope.js';
import {
  controlKey,
  controlLockName,
  controlSpec,
  deploymentKey,
  dlqName,
  Exchange,
  inboxBroadcastKeys,
  inboxLockName,
  inboxName,
  legacyBroadcastKeys,
  QueueMode,
  rosterBindingKey,
  rosterKey,
  rosterQueueName,
} from './topology.js';

/**
 * The least-privilege broker login of one gateway (R-H2), computed from the topology of
 * SPEC §4 and RabbitMQ's permission model: `configure` to declare (and delete) a resource,
 * `write` to publish to an exchange or bind a queue, `read` to consume a queue or bind to an
 * exchange. Declaring a queue with a dead-letter exchange also needs write on that exchange and
 * read on the queue. Topic permissions (topic exchanges only) restrict the routing keys a
 * login may publish with (write) and bind with (read). Pure: no I/O.
 */

/** What a gateway's permissions depend on: its host id and its current local entities. */
export interface GatewayPermissionsInput {
  hostId: string;
  /** `broker.deployment`: the only broadcast and PRESENCE keys the login may use. */
  deployment: string;
  entities: readonly { gid: string; groups: readonly string[] }[];
  queueMode: QueueMode;
  /** Also let this login read (and requeue from) the shared DLQ: operator tooling, off by default. */
  readDeadLetters?: boolean;
}

export interface TopicPermission {
  exchange: string;
  write: string;
  read: string;
}

export interface GatewayPermissions {
  user: string;
  configure: string;
  write: string;
  read: string;
  topic: TopicPermission[];
}

/** The broker login a gateway's provisioned user has: one per host. */
export function gatewayUserName(hostId: string): string {
  return `bridge-${hostId}`;
}

/** Escapes a literal for RabbitMQ's (PCRE) permission regexes. */
export function escapeRegex(literal: string): string {
  return literal.replace(/[\\^$.|?*+()[\]{}]/g, '\\$&');
}

/** `^(a|b|c)$` over literal names; `^$` (nothing) when there are none. */
export function exactly(names: Iterable<string>): string {
  const unique = [...new Set(names)].sort();
  return unique.length === 0 ? '^$' : `^(${unique.map(escapeRegex).join('|')})$`;
}

/** Routing keys a gateway publishes to `bridge.msg` with: a recipient gid, or its deployment's broadcast key. */
function messageKeysPattern(deployment: string): string {
  return `^([0-9A-Fa-f-]+|${escapeRegex(deploymentKey(deployment, broadcastPrefix))}.+)$`;
}

/** Routing keys of control messages: `control.<host>` of any host id. */
const controlKeysPattern = '^control\\.[A-Za-z0-9._-]+$';

export function gatewayPermissions(input: GatewayPermissionsInput): GatewayPermissions {
  const { hostId, deployment, entities } = input;
  const inboxes = entities.map((e) => inboxName(e.gid));
  // Every inbox has a lock queue (in both modes: a paused classic consumer is no consumer).
  const locks = entities.map((e) => inboxLockName(e.gid));
  // A quorum control queue ignores `exclusive` too: it has a lock queue of its own.
  if (input.queueMode === QueueMode.quorum) locks.push(controlLockName(hostId));
  const control = controlSpec(hostId).name;
  const roster = rosterQueueName(hostId);
  const ownQueues = [...inboxes, control, roster];

  return {
    user: gatewayUserName(hostId),
    // Declare (and delete) its own queues and inbox locks, nothing shared: the exchanges and
    // bridge.dlq are the operator's (`agentbridge broker setup`), and a gateway only checks them
    // passively, which needs no permission. RabbitMQ cannot grant declare without delete.
    configure: exactly([...ownQueues, ...locks]),
    // Publish to the shared exchanges (messages, presence, control, dead letters with a
    // reason; write on bridge.dlx is also what declaring a queue that dead-letters there
    // takes) and bind its own queues.
    write: exactly([Exchange.msg, Exchange.roster, Exchange.control, Exchange.dlx, ...ownQueues]),
    // Consume its own queues and bind them to the exchanges they hang off. Not bridge.dlx:
    // binding a queue to that fanout would copy every host's dead letters. Not bridge.dlq
    // either unless asked (operator tooling).
    read: exactly([
      Exchange.msg,
      Exchange.roster,
      Exchange.control,
      ...ownQueues,
      ...(input.readDeadLetters ? [dlqName] : []),
    ]),
    topic: [
      {
        // Bind only its own entities' gids and their broadcast keys: with read on bridge.msg
        // alone, a login could bind its inbox to another host's gid (or "#") and copy its mail.
        exchange: Exchange.msg,
        // The bare broadcast keys of earlier releases only to unbind them.
        write: messageKeysPattern(deployment),
        read: exactly(
          entities.length === 0
            ? []
            : [
                ...entities.map((e) => e.gid),
                ...entities.flatMap((e) => inboxBroadcastKeys(deployment, e.groups)),
                ...entities.flatMap((e) => legacyBroadcastKeys(e.groups)),
              ],
        ),
      },
      {
        // Announce only under its own key; its roster queue binds its deployment's.
        exchange: Exchange.roster,
        write: exactly([rosterKey(deployment, hostId)]),
        read: exactly([rosterBindingKey(deployment)]),
      },
      {
        // Send control to any host, but bind only its own host's key: a login cannot bind a
        // queue of its own to another host's control key and read its SPAWNs and receipts.
        exchange: Exchange.control,
        write: controlKeysPattern,
        read: exactly([controlKey(hostId)]),
      },
    ],
  };
}

export interface ProvisionCommandOptions {
  vhost: string;
  /** Target node (`rabbitmqctl -n`); default: rabbitmqctl's own default. */
  node?: string | undefined;
}

/** One rabbitmqctl invocation, as argv, and what it reads on standard input. */
export interface RabbitmqctlCommand {
  args: string[];
  /**
   * A secret (the password) fed on standard input, never in argv, where any local user could
   * read it in `ps` while the command runs: rabbitmqctl's add_user and change_password read the
   * password from stdin when it is not given as an argument.
   */
  stdin?: string;
  /** What it does, for the printed script. */
  why: string;
}

/**
 * The rabbitmqctl commands that create (or update) the login: the user (only when a password is
 * given), its permissions on the vhost, and its topic permissions.
 */
export function provisionCommands(
  permissions: GatewayPermissions,
  password: { value: string; userExists: boolean } | undefined,
  options: ProvisionCommandOptions,
): RabbitmqctlCommand[] {
  const node = options.node === undefined ? [] : ['-n', options.node];
  const commands: RabbitmqctlCommand[] = [];
  if (password) {
    commands.push({
      args: [...node, password.userExists ? 'change_password' : 'add_user', permissions.user],
      stdin: `${password.value}\n`,
      why: password.userExists ? 'set its password' : "create the gateway's own login",
    });
  }
  commands.push({
    args: [
      ...node,
      'set_permissions',
      '-p',
      options.vhost,
      permissions.user,
      permissions.configure,
      permissions.write,
      permissions.read,
    ],
    why: 'configure / write / read: its own queues, the shared exchanges, nothing else',
  });
  for (const topic of permissions.topic) {
    commands.push({
      args: [
        ...node,
        'set_topic_permissions',
        '-p',
        options.vhost,
        permissions.user,
        topic.exchange,
        topic.write,
        topic.read,
      ],
      why: `routing keys it may publish / bind with on ${topic.exchange}`,
    });
  }
  return commands;
}
