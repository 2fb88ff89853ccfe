import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig } from '../config/loadConfig.js';
import { hostIdSchema } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import {
  type GatewayPermissions,
  gatewayPermissions,
  provisionCommands,
  type RabbitmqctlCommand,
} from '../federation/permissions.js';
import { readEntities } from '../store/entities.js';
import { openStore } from '../store/openStore.js';
import { runBrokerSetup } from './brokerSetup.js';
import type { CliValues } from './cliOptions.js';
import { printResult } from './output.js';

// `agentbridge broker provision HOST`: the rabbitmqctl commands that give one gateway its own broker
// login with least privilege (R-H2). Printed by default, run with --apply.

const usage =
  'usage: agentbridge broker provision HOST [--apply] [--vhost VHOST] [--password-file FILE] [--node NODE] [--read-dlq]';

const rerunNote =
  'Re-run this after registering or removing entities on this host: each entity inbox is named in ' +
  'the permissions, so a new entity cannot consume (and the gateway refuses to start) until it is.';

interface ProvisionView {
  host: string;
  user: string;
  vhost: string;
  node: string | null;
  eventLog: string | null;
  entities: { gid: string; name: string }[];
  permissions: GatewayPermissions;
  /** Shell lines (with the password, when one is set) for an operator to run. */
  commands: string[];
  applied: boolean;
  /** Whether the user already existed (--apply only). */
  userExisted: boolean | null;
  /** The password set by these commands, shown this once; null when an existing user keeps its own. */
  password: string | null;
  uri: string;
  note: string;
}

export async function runBroker(values: CliValues, rest: string[]): Promise<number> {
  const [sub, ...args] = rest;
  if (sub === 'setup') return runBrokerSetup(values, args);
  if (sub !== 'provision')
    throw new BridgeError(
      ErrorCode.badRequest,
      `${usage}\n   or: agentbridge broker setup [--delete-legacy]`,
    );
  return runProvision(values, args);
}

async function runProvision(values: CliValues, args: string[]): Promise<number> {
  const [host, ...extra] = args;
  if (host === undefined || extra.length > 0) throw new BridgeError(ErrorCode.badRequest, usage);
  const parsedHost = hostIdSchema.safeParse(host);
  if (!parsedHost.success) {
    throw new BridgeError(ErrorCode.badRequest, `bad HOST "${host}": ${parsedHost.error.issues[0]?.message}`);
  }
  const { config } = loadConfig({ file: values.config });
  const vhost = values.vhost ?? '/';
  const node = values.node;
  const { entities, eventLog } = await localEntities(config.home, config.hostId, host);
  const permissions = gatewayPermissions({
    hostId: host,
    deployment: config.broker.deployment,
    entities,
    queueMode: config.broker.queueMode,
    readDeadLetters: values['read-dlq'] ?? false,
  });

  let password = values['password-file'] === undefined ? undefined : readPassword(values['password-file']);
  let userExisted: boolean | null = null;
  if (values.apply) {
    userExisted = await userExists(permissions.user, node);
    // An existing login keeps its password unless a new one is given: re-running after
    // registering entities only widens the permissions, it does not log the gateway out.
    if (!userExisted && password === undefined) password = generatePassword();
  } else if (password === undefined) {
    password = generatePassword();
  }
  const commands = provisionCommands(
    permissions,
    password === undefined ? undefined : { value: password, userExists: userExisted ?? false },
    { vhost, node },
  );

  if (values.apply) {
    for (const command of commands) assertWrapperSafe(command);
    let passwordSet = false;
    for (const command of commands) {
      try {
        await rabbitmqctl(command);
      } catch (err) {
        // Do not lose a password the broker now has: this is its only showing.
        if (passwordSet && err instanceof BridgeError) {
          throw new BridgeError(
            err.code,
            `${err.message}. The user ${permissions.user} was already given the password ${password} ` +
              '(shown once); fix the cause and re-run provision --apply',
            { cause: err },
          );
        }
        throw err;
      }
      passwordSet ||= command.stdin !== undefined;
    }
  }

  const view: ProvisionView = {
    host,
    user: permissions.user,
    vhost,
    node: node ?? null,
    eventLog,
    entities: entities.map((e) => ({ gid: e.gid, name: e.name })),
    permissions,
    commands: commands.map((c) => scriptLine(c)),
    applied: values.apply ?? false,
    userExisted,
    password: password ?? null,
    uri: `amqps://${encodeURIComponent(permissions.user)}:${password === undefined ? '<its password>' : encodeURIComponent(password)}@<broker-host>:5671/${encodeURIComponent(vhost)}`,
    note: rerunNote,
  };
  return printResult(values, view, () => human(view, commands));
}

function human(view: ProvisionView, commands: RabbitmqctlCommand[]): string {
  const who =
    view.entities.length === 0
      ? `no entities yet${view.eventLog ? ` (${view.eventLog})` : ' (no event log in BRIDGE_HOME)'}`
      : `${view.entities.length} entit${view.entities.length === 1 ? 'y' : 'ies'} from ${view.eventLog}: ` +
        view.entities.map((e) => `${e.name} (${e.gid})`).join(', ');
  const lines = [
    `# Broker login of gateway "${view.host}": user ${view.user} on vhost "${view.vhost}", least privilege (R-H2)`,
    `# Covers ${who}.`,
  ];
  if (view.applied) {
    lines.push(`# Applied${view.node ? ` on node ${view.node}` : ''}:`);
    for (const command of commands) lines.push(`  ok  ${appliedLine(command)}`);
    if (view.userExisted && view.password === null) lines.push('# The user existed and keeps its password.');
  } else {
    lines.push('# Run as the broker administrator:', '');
    commands.forEach((command, i) => {
      lines.push(`# ${command.why}`, view.commands[i] ?? '');
    });
    lines.push('', '# If the user already exists, use change_password instead of add_user (or --apply).');
  }
  if (view.password !== null) {
    lines.push(
      '',
      `password: ${view.password}`,
      "(shown once, stored nowhere by bridge: put it in this gateway's broker URI now)",
    );
  }
  lines.push(
    '',
    `The gateway logs in with  BRIDGE_BROKER_URI=${view.uri}`,
    'plus broker.tls.ca (and .cert/.key if the broker asks for a client certificate).',
    'Not granted: declaring or deleting the shared exchanges and bridge.dlq (the operator makes them once ' +
      "with `agentbridge broker setup`), binding to bridge.dlx, binding to another host's control key, reading " +
      "bridge.dlq (every host's dead letters; pass --read-dlq for an operator's gateway).",
    view.note,
  );
  return lines.join('\n');
}

/** The entities of the gateway whose BRIDGE_HOME this is (none when it has no event log yet). */
async function localEntities(
  home: string,
  localHost: string,
  host: string,
): Promise<{ entities: { gid: string; name: string; groups: string[] }[]; eventLog: string | null }> {
  const file = join(home, 'events.db');
  if (!existsSync(file)) return { entities: [], eventLog: null };
  if (host !== localHost) {
    throw new BridgeError(
      ErrorCode.badRequest,
      `HOST "${host}" is not the gateway of this BRIDGE_HOME (${home} belongs to "${localHost}"): ` +
        `run provision where ${host}'s BRIDGE_HOME is, with BRIDGE_HOST_ID=${host}`,
    );
  }
  const store = openStore({ file, writerThread: false });
  try {
    return {
      entities: readEntities(store).map((e) => ({ gid: e.gid, name: e.name, groups: e.groups })),
      eventLog: file,
    };
  } finally {
    await store.close();
  }
}

function readPassword(file: string): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new BridgeError(
      ErrorCode.badRequest,
      `cannot read --password-file ${file}: ${(err as Error).message}`,
      { cause: err },
    );
  }
  const password = text.replace(/\r?\n$/, '');
  if (password === '' || /[\r\n]/.test(password)) {
    throw new BridgeError(ErrorCode.badRequest, `--password-file ${file} must hold one non-empty line`);
  }
  if (password.trim() !== password) {
    // rabbitmqctl trims the password it reads on stdin: the login would get another one.
    throw new BridgeError(
      ErrorCode.badRequest,
      `the password in --password-file ${file} starts or ends with whitespace, which rabbitmqctl would ` +
        'trim away; remove it',
    );
  }
  return password;
}

function generatePassword(): string {
  return randomBytes(24).toString('base64url');
}

/**
 * A command as an operator would run it: a password goes in through `printf`, a shell builtin,
 * so it is in no process's argv.
 */
function scriptLine(command: RabbitmqctlCommand): string {
  const line = shellLine(['rabbitmqctl', ...command.args]);
  if (command.stdin === undefined) return line;
  return `printf '%s\\n' ${shellLine([command.stdin.replace(/\n$/, '')])} | ${line}`;
}

/** A command as it ran, the password left out. */
function appliedLine(command: RabbitmqctlCommand): string {
  const line = shellLine(['rabbitmqctl', ...command.args]);
  return command.stdin === undefined ? line : `${line}   (password on stdin)`;
}

/** POSIX-shell quoting, for lines an operator copies. */
export function shellLine(args: string[]): string {
  return args
    .map((arg) => (/^[A-Za-z0-9_./:@%+=,-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`))
    .join(' ');
}

/**
 * Debian's rabbitmqctl is a wrapper that, run as root, re-parses its arguments with `sh -c`
 * inside double quotes: a backtick, a `$name`, `\\` or `\$` would be expanded or eaten on the
 * way. Refuse those instead of setting a mangled permission. (The password goes on stdin,
 * which the wrapper passes through untouched.)
 */
function assertWrapperSafe(command: RabbitmqctlCommand): void {
  for (const arg of command.args) {
    if (/[`"]|\$(?![)|]|$)|\\[\\$`"]/.test(arg)) {
      throw new BridgeError(
        ErrorCode.badRequest,
        `"${arg}" holds a character (\` " $ or \\) that rabbitmqctl's shell wrapper would mangle; ` +
          'choose another group name, or run the printed commands by hand',
      );
    }
  }
}

async function userExists(user: string, node: string | undefined): Promise<boolean> {
  const out = await rabbitmqctl({
    args: [...(node === undefined ? [] : ['-n', node]), 'list_users', '-q', '--formatter', 'json'],
    why: 'list users',
  });
  let users: unknown;
  try {
    users = JSON.parse(out);
  } catch (err) {
    throw new BridgeError(
      ErrorCode.brokerUnavailable,
      `rabbitmqctl list_users printed something unexpected: ${out.slice(0, 200)}`,
      { cause: err },
    );
  }
  return Array.isArray(users) && users.some((u) => (u as { user?: unknown }).user === user);
}

function rabbitmqctl(command: RabbitmqctlCommand): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile('rabbitmqctl', command.args, { timeout: 120_000 }, (err, stdout, stderr) => {
      if (!err) {
        resolve(stdout);
        return;
      }
      const detail = (stderr || err.message).trim().split('\n').slice(0, 6).join(' ');
      const unreachable =
        (err as NodeJS.ErrnoException).code === 'ENOENT' ||
        /unable to perform an operation on node/.test(detail);
      reject(
        new BridgeError(
          ErrorCode.brokerUnavailable,
          `${appliedLine(command)} failed: ${detail}` +
            (unreachable
              ? '. Run provision where rabbitmqctl can reach the broker node (--node NAME), as root or the rabbitmq user'
              : ''),
          { cause: err },
        ),
      );
    });
    // Ended at once when there is nothing to feed, so a command that asks for input fails.
    child.stdin?.on('error', () => {
      // rabbitmqctl exited before reading it (it failed): its exit status says why.
    });
    child.stdin?.end(command.stdin ?? '');
  });
}
