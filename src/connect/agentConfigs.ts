import { join } from 'node:path';
import { type Agent, agents } from '../config/agents.js';
import { BridgeError, ErrorCode } from '../errors.js';
import { shellQuote } from '../text/shellQuote.js';

/**
 * What `agentbridge connect` writes into an agent's own configuration so that it reaches this
 * gateway's MCP endpoint as one entity and never asks permission for bridge's tools (and only
 * for them). Pure: each edit turns a file's text (undefined: no file) into the text to write,
 * and takes bridge's part out again. The formats, as each agent documents and reads them:
 *
 * - Claude Code (2.1): MCP servers in `~/.claude.json` (`mcpServers`, or per project under
 *   `projects["<dir>"].mcpServers`: its "local" scope), `{type: "http", url, headers}`; a
 *   permission rule `mcp__<server>` in `permissions.allow` of `~/.claude/settings.json` (or the
 *   project's `.claude/settings.local.json`) allows every tool of that server and nothing else.
 *   https://code.claude.com/docs/en/mcp, https://code.claude.com/docs/en/permissions
 * - Codex CLI (0.171): `[mcp_servers.<server>]` in `~/.codex/config.toml` (`$CODEX_HOME`) or a
 *   trusted project's `.codex/config.toml`, with `url`, `http_headers` or
 *   `bearer_token_env_var`, and `default_tools_approval_mode = "approve"` for that server's tools
 *   (codex-rs/config/src/mcp_types.rs); https://developers.openai.com/codex/config-reference/
 * - Gemini CLI (0.61): `mcpServers.<server>` in `~/.gemini/settings.json` or the project's
 *   `.gemini/settings.json`, `{httpUrl, headers, trust: true}`: `trust` skips the confirmation
 *   for that server's tools only; values may name `${ENV}` variables, which it expands
 *   (google-gemini/gemini-cli docs/tools/mcp-server.md).
 *
 * The token never goes into a file others could read: in the user's own config it is written
 * into a file made 0600 (Claude Code keeps `~/.claude.json` so itself); a project's files, which
 * may be committed, only name the `BRIDGE_TOKEN` variable.
 */

export type Scope = 'user' | 'project';

/** The MCP server's name in every agent's config: its tools read `mcp__bridge__bridge_send`. */
export const serverName = 'bridge';
/** The variable a project's config names instead of the token. */
export const tokenVariable = 'BRIDGE_TOKEN';

export interface ConnectTarget {
  agent: Agent;
  scope: Scope;
  /** The user's home directory (HOME). */
  home: string;
  /** The project directory (for the project scope). */
  cwd: string;
  /** Codex's home when CODEX_HOME is set. */
  codexHome?: string | undefined;
  /** The gateway's MCP endpoint. */
  url: string;
  token: string;
}

/** One file's part of a connection. */
export interface FileEdit {
  path: string;
  /** Whether the text written holds the token (the file is then made 0600). */
  secret: boolean;
  /** The file's text with bridge's part in; `before` undefined: the file does not exist. */
  apply(before: string | undefined): string;
  /** The file's text with bridge's part out again (it may have changed since). */
  remove(current: string): string;
}

export function connectEdits(target: ConnectTarget): FileEdit[] {
  switch (target.agent) {
    case 'claude':
      return claudeEdits(target);
    case 'codex':
      return [codexEdit(target)];
    case 'gemini':
      return [geminiEdit(target)];
  }
}

export function isAgent(name: string | undefined): name is Agent {
  return (agents as readonly string[]).includes(name ?? '');
}

/** The permission rule that allows every tool of bridge's server in Claude Code. */
const claudeRule = `mcp__${serverName}`;

/** The token as a file or flag names it, for the agent to expand from its environment. */
const tokenReference = `\${${tokenVariable}}`;

/** Claude Code's entry for bridge's server. */
function claudeServer(url: string, token: string) {
  return { type: 'http', url, headers: { Authorization: `Bearer ${token}` } };
}

type TomlSetting = [key: string, value: string];

/** Codex's settings of bridge's server, as TOML keys and values, with how it authenticates. */
function codexServer(url: string, auth: TomlSetting[]): TomlSetting[] {
  return [['url', tomlString(url)], ...auth, ['default_tools_approval_mode', '"approve"']];
}

/** The token in a header (a user-scope file, 0600). */
const codexHeader = (token: string): TomlSetting => [
  'http_headers',
  `{ Authorization = ${tomlString(`Bearer ${token}`)} }`,
];

/** The token named by its variable, for Codex to read from its environment. */
const codexTokenVariable: TomlSetting = ['bearer_token_env_var', tomlString(tokenVariable)];

function claudeEdits(target: ConnectTarget): FileEdit[] {
  const server = claudeServer(target.url, target.token);
  // The project scope is Claude Code's "local" scope: this project only, in the user's own file.
  const serversAt = target.scope === 'user' ? ['mcpServers'] : ['projects', target.cwd, 'mcpServers'];
  const settings =
    target.scope === 'user'
      ? join(target.home, '.claude', 'settings.json')
      : join(target.cwd, '.claude', 'settings.local.json');
  return [
    jsonEdit(join(target.home, '.claude.json'), true, serversAt, server),
    {
      path: settings,
      secret: false,
      apply: (before) =>
        editJson(settings, before, (doc) => {
          const allow = arrayAt(doc, ['permissions', 'allow'], settings);
          if (!allow.includes(claudeRule)) allow.push(claudeRule);
        }),
      remove: (current) =>
        editJson(settings, current, (doc) => {
          const allow = arrayAt(doc, ['permissions', 'allow'], settings);
          const at = allow.indexOf(claudeRule);
          if (at >= 0) allow.splice(at, 1);
          prune(doc, ['permissions', 'allow']);
        }),
    },
  ];
}

/**
 * How a spawned agent comes connected (a profile's `agent`), without touching the user's own
 * config files in their home (Gemini: its working directory's): the token is in the spawned
 * environment as BRIDGE_TOKEN, and each agent is told to take it from there, never given it on
 * its command line or in a file.
 *
 * - Claude Code: `--mcp-config <json>` (a server whose header names `${BRIDGE_TOKEN}`, which
 *   Claude expands as in `.mcp.json`) and `--allowedTools mcp__bridge` appended to the command
 *   (https://code.claude.com/docs/en/cli-reference, https://code.claude.com/docs/en/mcp).
 * - Codex CLI: `-c mcp_servers.bridge.…` overrides appended: url, `bearer_token_env_var`,
 *   `default_tools_approval_mode` (https://developers.openai.com/codex/config-reference/).
 * - Gemini CLI: no flag defines a server, and it reads a system settings file only when root
 *   owns it and every directory above it (isFileAndDirectorySecureSync in its bundle): the
 *   project scope's edit of the agent's working directory (`.gemini/settings.json`, naming
 *   `${BRIDGE_TOKEN}`), as `connect --scope project` writes it
 *   (google-gemini/gemini-cli docs/tools/mcp-server.md).
 */
export interface SpawnConnection {
  /** The profile's command with the agent's connection flags appended (shell words). */
  command(base: string): string;
  /** An edit of a file in the agent's working directory, made before it starts. */
  readonly edit?: FileEdit;
}

export function spawnConnection(agent: Agent, url: string, cwd: string): SpawnConnection {
  const appended = (words: string[]) => (base: string) => [base, ...words.map(shellQuote)].join(' ');
  switch (agent) {
    case 'claude':
      return {
        command: appended([
          '--mcp-config',
          JSON.stringify({ mcpServers: { [serverName]: claudeServer(url, tokenReference) } }),
          '--allowedTools',
          claudeRule,
        ]),
      };
    case 'codex': {
      // No headers: a user-scope connection of the same HOME names its own entity's token in one.
      const settings = codexServer(url, [['http_headers', '{}'], codexTokenVariable]);
      return {
        command: appended(
          settings.flatMap(([key, value]) => ['-c', `mcp_servers.${serverName}.${key}=${value}`]),
        ),
      };
    }
    case 'gemini':
      return {
        command: (base) => base,
        edit: geminiEdit({ agent, scope: 'project', cwd, home: '', url, token: '' }),
      };
  }
}

function geminiEdit(target: ConnectTarget): FileEdit {
  const user = target.scope === 'user';
  const path = user
    ? join(target.home, '.gemini', 'settings.json')
    : join(target.cwd, '.gemini', 'settings.json');
  const token = user ? target.token : tokenReference;
  return jsonEdit(path, user, ['mcpServers'], {
    httpUrl: target.url,
    headers: { Authorization: `Bearer ${token}` },
    trust: true,
  });
}

/** Marks bridge's block in a TOML file, so that it comes out exactly as it went in. */
const tomlBegin =
  '# agentbridge connect: bridge MCP server (agentbridge disconnect codex removes this block)';
const tomlEnd = '# end of agentbridge connect';

function codexEdit(target: ConnectTarget): FileEdit {
  const user = target.scope === 'user';
  const dir = user ? (target.codexHome ?? join(target.home, '.codex')) : join(target.cwd, '.codex');
  const path = join(dir, 'config.toml');
  const block = [
    tomlBegin,
    `[mcp_servers.${serverName}]`,
    ...codexServer(target.url, [user ? codexHeader(target.token) : codexTokenVariable]).map(
      ([key, value]) => `${key} = ${value}`,
    ),
    tomlEnd,
    '',
  ].join('\n');
  return {
    path,
    secret: user,
    apply: (before) => {
      const text = codexRemove(before ?? '');
      if (text.split('\n').some(isBridgeHeader)) {
        throw new BridgeError(
          ErrorCode.badRequest,
          `${path} already has an MCP server named "${serverName}" that agentbridge did not write: remove it (codex mcp remove ${serverName}) and connect again`,
        );
      }
      if (text === '') return block;
      return `${text}${text.endsWith('\n') ? '' : '\n'}\n${block}`;
    },
    remove: codexRemove,
  };
}

/**
 * The TOML text without bridge's block: the markers, the blank line that set it apart, and
 * bridge's server table (with any `mcp_servers.bridge.*` subtable). Codex writes its own tables
 * where it pleases, inside the markers too (it appends after the last table): those stay. A
 * text without the markers is left alone (a server named bridge that connect did not write).
 */
function codexRemove(text: string): string {
  if (!text.includes(tomlBegin)) return text;
  const kept: string[] = [];
  // Only lines between the markers are looked at: outside them nothing is connect's.
  let inBlock = false;
  let inBridgeTable = false;
  for (const line of text.split('\n')) {
    const trimmed = line.trim();
    if (trimmed === tomlBegin) {
      if (kept.at(-1)?.trim() === '') kept.pop();
      inBlock = true;
      inBridgeTable = false;
      continue;
    }
    if (trimmed === tomlEnd) {
      inBlock = false;
      inBridgeTable = false;
      continue;
    }
    if (inBlock && /^\[/.test(trimmed)) inBridgeTable = isBridgeHeader(trimmed);
    if (!inBridgeTable) kept.push(line);
  }
  return kept.join('\n');
}

/** Whether a TOML line opens bridge's server table or one of its subtables (`[mcp_servers.bridge.tools.x]`). */
function isBridgeHeader(line: string): boolean {
  const header = /^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$/.exec(line);
  if (!header) return false;
  const path = (header[1] ?? '').split('.').map((key) => key.trim().replace(/^(["'])(.*)\1$/, '$2'));
  return path[0] === 'mcp_servers' && path[1] === serverName;
}

function tomlString(value: string): string {
  return JSON.stringify(value); // a TOML basic string escapes as JSON does for these characters
}

type JsonObject = Record<string, unknown>;

/** An edit that puts `value` at `at` + serverName in a JSON file, and takes it out again. */
function jsonEdit(path: string, secret: boolean, at: string[], value: unknown): FileEdit {
  return {
    path,
    secret,
    apply: (before) =>
      editJson(path, before, (doc) => {
        objectAt(doc, at, path)[serverName] = value;
      }),
    remove: (current) =>
      editJson(path, current, (doc) => {
        delete objectAt(doc, at, path)[serverName];
        prune(doc, at);
      }),
  };
}

function editJson(path: string, text: string | undefined, change: (doc: JsonObject) => void): string {
  let doc: unknown = {};
  if (text !== undefined && text.trim() !== '') {
    try {
      doc = JSON.parse(text);
    } catch (err) {
      throw new BridgeError(
        ErrorCode.badRequest,
        `${path} is not valid JSON (${(err as Error).message}): fix or move it, then connect again`,
      );
    }
  }
  if (!isObject(doc))
    throw new BridgeError(ErrorCode.badRequest, `${path} does not hold a JSON object: fix or move it`);
  change(doc);
  return `${JSON.stringify(doc, null, 2)}\n`;
}

function objectAt(doc: JsonObject, at: string[], path: string): JsonObject {
  let node = doc;
  for (const key of at) {
    const next = node[key] ?? {};
    if (!isObject(next)) {
      throw new BridgeError(
        ErrorCode.badRequest,
        `${path}: "${at.join('.')}" is not an object: fix it, then connect again`,
      );
    }
    node[key] = next;
    node = next;
  }
  return node;
}

function arrayAt(doc: JsonObject, at: string[], path: string): unknown[] {
  const parent = objectAt(doc, at.slice(0, -1), path);
  const key = at.at(-1) as string;
  const list = parent[key] ?? [];
  if (!Array.isArray(list)) {
    throw new BridgeError(
      ErrorCode.badRequest,
      `${path}: "${at.join('.')}" is not a list: fix it, then connect again`,
    );
  }
  parent[key] = list;
  return list;
}

/** Removes the objects and lists along `at` that are empty now, innermost first. */
function prune(doc: JsonObject, at: string[]): void {
  for (let depth = at.length; depth > 0; depth--) {
    const parent = objectAt(doc, at.slice(0, depth - 1), '');
    const key = at[depth - 1] as string;
    const value = parent[key];
    const empty = Array.isArray(value)
      ? value.length === 0
      : isObject(value) && Object.keys(value).length === 0;
    if (!empty) return;
    delete parent[key];
  }
}

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
