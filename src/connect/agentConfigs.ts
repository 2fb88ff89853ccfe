import { join } from 'node:path';
import { BridgeError, ErrorCode } from '../errors.js';

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

export const agents = ['claude', 'codex', 'gemini'] as const;
export type Agent = (typeof agents)[number];
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

function claudeEdits(target: ConnectTarget): FileEdit[] {
  const server = { type: 'http', url: target.url, headers: { Authorization: `Bearer ${target.token}` } };
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

function geminiEdit(target: ConnectTarget): FileEdit {
  const user = target.scope === 'user';
  const path = user
    ? join(target.home, '.gemini', 'settings.json')
    : join(target.cwd, '.gemini', 'settings.json');
  const token = user ? target.token : `\${${tokenVariable}}`;
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
  const auth = user
    ? `http_headers = { Authorization = ${tomlString(`Bearer ${target.token}`)} }`
    : `bearer_token_env_var = ${tomlString(tokenVariable)}`;
  const block = [
    tomlBegin,
    `[mcp_servers.${serverName}]`,
    `url = ${tomlString(target.url)}`,
    auth,
    'default_tools_approval_mode = "approve"',
    tomlEnd,
    '',
  ].join('\n');
  return {
    path,
    secret: user,
    apply: (before) => {
      const text = codexRemove(before ?? '');
      if (new RegExp(`^\\s*\\[mcp_servers\\.${serverName}[\\].]`, 'm').test(text)) {
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

/** The TOML text without bridge's block (and the blank line that set it apart). */
function codexRemove(text: string): string {
  const begin = text.indexOf(tomlBegin);
  if (begin < 0) return text;
  const endAt = text.indexOf(tomlEnd, begin);
  const end =
    endAt < 0 ? text.length : endAt + tomlEnd.length + (text[endAt + tomlEnd.length] === '\n' ? 1 : 0);
  const head = text.slice(0, begin).replace(/\n\n$/, '\n');
  return head + text.slice(end);
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
