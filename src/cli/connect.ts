import { chmodSync, existsSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { resolve } from 'node:path';
import { type Agent, agents } from '../config/agents.js';
import { loadConfig } from '../config/loadConfig.js';
import type { Config } from '../config/schema.js';
import {
  type ConnectTarget,
  connectEdits,
  isAgent,
  type Scope,
  serverName,
  tokenVariable,
} from '../connect/agentConfigs.js';
import { modeOf, readText, writeText } from '../connect/configFiles.js';
import { disconnectCommand, type Ledger, ledgerPath, readLedger } from '../connect/ledger.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { Registration } from '../gateway/Gateway.js';
import { adminRoutes, adminSocketPath } from '../interfaces/adminProtocol.js';
import { urlHost } from '../interfaces/checkHostAndOrigin.js';
import { entityNameSchema } from '../wire/envelope.js';
import type { PaneTarget } from '../wire/paneTarget.js';
import { callAdmin } from './adminClient.js';
import type { CliValues } from './cliOptions.js';
import { paneOf } from './commands.js';
import { printResult } from './output.js';

/**
 * `agentbridge connect claude|codex|gemini --as main|worker|orchestrator NAME [--scope user|project]`:
 * registers NAME (or reuses it, given its token in BRIDGE_TOKEN) and writes the agent's own MCP
 * configuration for it, with bridge's tools allowed (src/connect/agentConfigs.ts). What it
 * changed is kept in a ledger in the gateway's home, so that `agentbridge disconnect` puts every
 * file back byte for byte when nobody changed it since, and otherwise takes out bridge's part only.
 */

interface Where {
  agent: Agent;
  scope: Scope;
  cwd: string;
  home: string;
  codexHome: string | undefined;
}

function whereOf(values: CliValues, agentName: string | undefined, verb: string): Where {
  if (!isAgent(agentName)) {
    throw new BridgeError(
      ErrorCode.badRequest,
      `${verb} needs the agent: agentbridge ${verb} ${agents.join('|')} …`,
    );
  }
  const scope = values.scope ?? 'user';
  if (scope !== 'user' && scope !== 'project') {
    throw new BridgeError(ErrorCode.badRequest, `--scope takes user or project, got "${scope}"`);
  }
  return {
    agent: agentName,
    scope,
    cwd: resolve(process.cwd()),
    home: process.env.HOME ?? homedir(),
    codexHome: process.env.CODEX_HOME || undefined,
  };
}

/** The running gateway's MCP endpoint (its port may come from its own environment), else the config's. */
async function mcpUrl(config: Config, required: boolean): Promise<string> {
  try {
    const status = (await callAdmin(adminSocketPath(config), adminRoutes.status)) as { mcpUrl?: string };
    if (status.mcpUrl) return status.mcpUrl;
  } catch (err) {
    if (required) throw err;
  }
  return `http://${urlHost(config.mcp.host)}:${config.mcp.port}/mcp`;
}

/** The pane connect runs in, for a worker set up from inside it as an agent's setup would. */
function ownPane(): PaneTarget | undefined {
  if (process.env.HERDR_PANE_ID) return { type: 'herdr', paneId: process.env.HERDR_PANE_ID };
  if (process.env.TMUX_PANE) return { type: 'tmux', target: process.env.TMUX_PANE };
  return undefined;
}

export async function runConnect(values: CliValues, rest: string[]): Promise<number> {
  const [agentName, name, ...extra] = rest;
  const where = whereOf(values, agentName, 'connect');
  const kind = values.as;
  if (!name || extra.length > 0 || (kind !== 'main' && kind !== 'worker' && kind !== 'orchestrator')) {
    throw new BridgeError(
      ErrorCode.badRequest,
      `connect needs who the agent is: agentbridge connect ${where.agent} --as main|worker|orchestrator NAME [--scope user|project] [--print]`,
    );
  }
  entityNameSchema.parse(name);
  const pane = kind === 'worker' ? (paneOf(values) ?? ownPane()) : undefined;
  if (kind === 'worker' && !pane) {
    throw new BridgeError(
      ErrorCode.badRequest,
      'a worker is typed into its pane: pass --tmux TARGET or --herdr-pane ID, or run connect inside that pane',
    );
  }
  const { config } = loadConfig({ file: values.config });
  const ledgerFile = ledgerPath(config.home, where);
  if (existsSync(ledgerFile) && !values.print) {
    throw new BridgeError(
      ErrorCode.badRequest,
      `${where.agent} is already connected here (${ledgerFile}): ${disconnectCommand(where)} first`,
    );
  }
  const url = await mcpUrl(config, !values.print);
  const target = (token: string): ConnectTarget => ({ ...where, url, token });

  if (values.print) {
    const edits = connectEdits(target(`<the token of ${name}>`));
    return printResult(
      values,
      { files: edits.map((e) => ({ path: e.path, text: e.apply(readText(e.path)) })) },
      () =>
        edits
          .map((e) => `--- ${e.path}${e.secret ? ' (mode 0600)' : ''}\n${e.apply(readText(e.path))}`)
          .join('\n'),
    );
  }

  const { token, gid, registered } = await identity(adminSocketPath(config), kind, name, pane);
  const edits = connectEdits(target(token));
  // Every edit is made in memory first: a file that cannot be edited changes nothing.
  const planned = edits.map((edit) => {
    const before = readText(edit.path);
    return {
      edit,
      before,
      beforeMode: before === undefined ? null : modeOf(edit.path),
      after: edit.apply(before),
    };
  });
  const ledger: Ledger = {
    ...where,
    name,
    ...(gid === undefined ? {} : { gid }),
    registered,
    files: planned.map((p) => ({
      path: p.edit.path,
      before: p.before ?? null,
      beforeMode: p.beforeMode,
      after: p.after,
    })),
  };
  writeText(ledgerFile, `${JSON.stringify(ledger, null, 2)}\n`, 0o600);
  for (const p of planned) writeText(p.edit.path, p.after, p.edit.secret ? 0o600 : (p.beforeMode ?? 0o644));
  const result = {
    agent: where.agent,
    scope: where.scope,
    name,
    gid,
    registered,
    files: planned.map((p) => p.edit.path),
  };
  return printResult(values, result, () =>
    [
      `connected ${where.agent} as ${name} (${kind}${registered ? ', registered now' : ', already registered'}) to ${url}`,
      ...planned.map((p) => `  wrote ${p.edit.path}${p.edit.secret ? ' (0600: it holds the token)' : ''}`),
      `bridge's tools (server "${serverName}") are allowed; every other tool still asks.`,
      ...(where.agent === 'gemini'
        ? [
            'Gemini CLI loads MCP servers only in a folder it trusts: trust the folder when it asks (or set its security.folderTrust).',
          ]
        : []),
      ...(where.scope === 'project' && where.agent !== 'claude'
        ? [
            `The project's file names ${tokenVariable} instead of the token: start ${where.agent} with ${tokenVariable} set to ${name}'s token.`,
          ]
        : []),
      `Undo: ${disconnectCommand(where)}`,
    ].join('\n'),
  );
}

/** The entity's token: registered now, or the existing entity's from BRIDGE_TOKEN. */
async function identity(
  socket: string,
  kind: string,
  name: string,
  pane: PaneTarget | undefined,
): Promise<{ token: string; gid?: string; registered: boolean }> {
  try {
    const registration = (await callAdmin(socket, adminRoutes.register, {
      kind,
      name,
      ...(pane ? { pane } : {}),
    })) as Registration;
    return { token: registration.token, gid: registration.gid, registered: true };
  } catch (err) {
    if (!(err instanceof BridgeError) || err.code !== ErrorCode.nameTaken) throw err;
    const token = process.env[tokenVariable];
    if (!token) {
      throw new BridgeError(
        ErrorCode.nameTaken,
        `${name} is registered already: to connect an agent as it, set ${tokenVariable} to its token (never on the command line); or pick another name`,
      );
    }
    return { token, registered: false };
  }
}

export async function runDisconnect(values: CliValues, rest: string[]): Promise<number> {
  const [agentName, ...extra] = rest;
  const where = whereOf(values, agentName, 'disconnect');
  if (extra.length > 0)
    throw new BridgeError(
      ErrorCode.badRequest,
      `disconnect takes the agent only: agentbridge disconnect ${where.agent}`,
    );
  const { config } = loadConfig({ file: values.config });
  const ledgerFile = ledgerPath(config.home, where);
  if (!existsSync(ledgerFile)) {
    throw new BridgeError(
      ErrorCode.badRequest,
      `${where.agent} is not connected here${where.scope === 'project' ? ' for this project' : ''} (no ${ledgerFile})`,
    );
  }
  const ledger = readLedger(ledgerFile);
  const edits = connectEdits({ ...ledger, home: where.home, codexHome: where.codexHome, url: '', token: '' });
  const outcomes: string[] = [];
  for (const file of [...ledger.files].reverse()) {
    const current = readText(file.path);
    if (current === file.after) {
      // Untouched since connect: as it was, byte for byte.
      if (file.before === null) rmSync(file.path, { force: true });
      else {
        writeFileSync(file.path, file.before);
        if (file.beforeMode !== null) chmodSync(file.path, file.beforeMode);
      }
      outcomes.push(`  restored ${file.path}${file.before === null ? ' (removed: connect made it)' : ''}`);
    } else if (current !== undefined) {
      const edit = edits.find((e) => e.path === file.path);
      if (edit) writeFileSync(file.path, edit.remove(current));
      outcomes.push(`  took bridge's entries out of ${file.path} (it changed since connect)`);
    }
  }
  if (ledger.registered) {
    await callAdmin(adminSocketPath(config), adminRoutes.deregister, {
      address: ledger.gid ?? ledger.name,
    }).catch((err: unknown) =>
      outcomes.push(`  could not deregister ${ledger.name}: ${(err as Error).message}`),
    );
  }
  rmSync(ledgerFile);
  return printResult(
    values,
    { agent: ledger.agent, name: ledger.name, deregistered: ledger.registered },
    () =>
      [
        `disconnected ${ledger.agent} (${ledger.name}${ledger.registered ? ', deregistered' : ''})`,
        ...outcomes,
      ].join('\n'),
  );
}
