import { existsSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { resolve } from 'node:path';
import type { z } from 'zod';
import { BridgeError, ErrorCode } from '../errors.js';
import { type Config, configSchema } from './schema.js';

/** Environment variables that override the config file (names fixed by the spec, §9). */
export const envOverrides = {
  BRIDGE_HOME: { path: ['home'], type: 'string' },
  BRIDGE_HOST_ID: { path: ['hostId'], type: 'string' },
  // One URI or a comma-separated list; it replaces the file's broker.uri or broker.uris.
  BRIDGE_BROKER_URI: { path: ['broker', 'uri'], type: 'string', replaces: ['broker', 'uris'] },
  BRIDGE_DEPLOYMENT: { path: ['broker', 'deployment'], type: 'string' },
  BRIDGE_MCP_HOST: { path: ['mcp', 'host'], type: 'string' },
  BRIDGE_MCP_PORT: { path: ['mcp', 'port'], type: 'number' },
  BRIDGE_LOG_LEVEL: { path: ['log', 'level'], type: 'string' },
  BRIDGE_HERDR_SOCKET: { path: ['herdr', 'socketPath'], type: 'string' },
} as const satisfies Record<
  string,
  { path: readonly string[]; type: 'string' | 'number'; replaces?: readonly string[] }
>;

export interface LoadConfigOptions {
  /** Explicit config file (`--config`); otherwise BRIDGE_CONFIG, then $BRIDGE_HOME/config.json. */
  file?: string | undefined;
  env?: NodeJS.ProcessEnv;
}

export interface LoadedConfig {
  config: Config;
  /** The file that was read, if any. */
  file: string | undefined;
}

function badConfig(message: string): BridgeError {
  return new BridgeError(ErrorCode.badConfig, message);
}

function setPath(target: Record<string, unknown>, path: readonly string[], value: unknown): void {
  let node = target;
  for (const key of path.slice(0, -1)) {
    const next = node[key];
    if (typeof next !== 'object' || next === null || Array.isArray(next)) node[key] = {};
    node = node[key] as Record<string, unknown>;
  }
  node[path[path.length - 1] as string] = value;
}

function deletePath(target: Record<string, unknown>, path: readonly string[]): void {
  const parent = path
    .slice(0, -1)
    .reduce<unknown>((node, key) => (node as Record<string, unknown> | undefined)?.[key], target);
  if (typeof parent === 'object' && parent !== null)
    delete (parent as Record<string, unknown>)[path.at(-1) as string];
}

function describeIssue(issue: z.core.$ZodIssue): string {
  const key = issue.path.join('.') || '(top level)';
  if (issue.code === 'unrecognized_keys') {
    const where = issue.path.length ? ` in ${key}` : '';
    return `unknown key${issue.keys.length > 1 ? 's' : ''} ${issue.keys.join(', ')}${where}`;
  }
  return `${key}: ${issue.message}`;
}

/**
 * Reads the config file (if any), applies BRIDGE_* overrides and validates the result.
 * Throws a BAD_CONFIG BridgeError naming the bad key and where it came from.
 */
export function loadConfig(options: LoadConfigOptions = {}): LoadedConfig {
  const env = options.env ?? process.env;
  const homeFromEnv = env.BRIDGE_HOME || undefined;
  const defaultFile = resolve(homeFromEnv ?? './.bridge', 'config.json');
  const file =
    options.file ?? (env.BRIDGE_CONFIG || undefined) ?? (existsSync(defaultFile) ? defaultFile : undefined);

  let raw: Record<string, unknown> = {};
  if (file !== undefined) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      throw badConfig(
        `cannot read config file ${file}: ${(err as Error).message}; fix the path or unset BRIDGE_CONFIG`,
      );
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (err) {
      throw badConfig(`config file ${file} is not valid JSON: ${(err as Error).message}`);
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      throw badConfig(`config file ${file} must hold a JSON object`);
    }
    raw = parsed as Record<string, unknown>;
  }

  for (const [name, override] of Object.entries(envOverrides)) {
    const value = env[name];
    if (value === undefined || value === '') continue;
    if (override.type === 'number') {
      const number = Number(value);
      if (value.trim() === '' || !Number.isInteger(number))
        throw badConfig(`${name}=${value} is not a whole number`);
      setPath(raw, override.path, number);
    } else {
      setPath(raw, override.path, value);
    }
    if ('replaces' in override) deletePath(raw, override.replaces);
  }

  const result = configSchema.safeParse(raw);
  if (!result.success) {
    const problems = result.error.issues.map(describeIssue).join('; ');
    const source = file ? `config file ${file} (or its BRIDGE_* overrides)` : 'BRIDGE_* environment';
    throw badConfig(`bad configuration in ${source}: ${problems}`);
  }
  const hostId = result.data.hostId ?? sanitizeHostname(hostname());
  return { config: { ...result.data, hostId, home: resolve(result.data.home) }, file };
}

function sanitizeHostname(name: string): string {
  const cleaned = name.replace(/[^A-Za-z0-9._-]/g, '-').replace(/^[^A-Za-z0-9]+/, '');
  return cleaned.slice(0, 63) || 'localhost';
}
