import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { type Agent, agents } from '../config/agents.js';
import type { Scope } from './agentConfigs.js';

/**
 * What `agentbridge connect` changed, kept in the gateway's home (`connect/`, 0600): each file's
 * text before and after, so that `disconnect` puts back what nobody changed since, byte for
 * byte, and `doctor` checks that the agent configs are still there.
 */
export const ledgerSchema = z.object({
  agent: z.enum(agents),
  scope: z.enum(['user', 'project']),
  cwd: z.string(),
  name: z.string(),
  gid: z.string().optional(),
  /** connect registered the entity (disconnect deregisters it), rather than reusing it. */
  registered: z.boolean(),
  files: z.array(
    z.object({
      path: z.string(),
      before: z.string().nullable(),
      beforeMode: z.number().nullable(),
      after: z.string(),
    }),
  ),
});
export type Ledger = z.infer<typeof ledgerSchema>;

function ledgerDir(home: string): string {
  return join(home, 'connect');
}

/**
 * One connection's ledger: one per agent and place its configuration lives in (the user's
 * HOME, and CODEX_HOME for Codex; or the project directory), so that several users, or one
 * user's several HOMEs, connect through one gateway. A ledger written by an earlier release
 * (one per agent and scope) is still found.
 */
export function ledgerPath(
  home: string,
  where: { agent: Agent; scope: Scope; cwd: string; home: string; codexHome?: string | undefined },
): string {
  const place =
    where.scope === 'project'
      ? where.cwd
      : `${where.home}\0${where.agent === 'codex' ? (where.codexHome ?? '') : ''}`;
  const key = createHash('sha256').update(place).digest('hex').slice(0, 12);
  const path = join(ledgerDir(home), `${where.agent}-${where.scope}-${key}.json`);
  if (existsSync(path)) return path;
  const project =
    where.scope === 'project' ? `-${createHash('sha256').update(where.cwd).digest('hex').slice(0, 12)}` : '';
  const earlier = join(ledgerDir(home), `${where.agent}-${where.scope}${project}.json`);
  return existsSync(earlier) ? earlier : path;
}

export function readLedger(path: string): Ledger {
  return ledgerSchema.parse(JSON.parse(readFileSync(path, 'utf8')));
}

/** Every connection made from this home. */
export function allLedgers(home: string): Ledger[] {
  const dir = ledgerDir(home);
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((name) => name.endsWith('.json'))
    .map((name) => readLedger(join(dir, name)));
}

/** The command that undoes a connection. */
export function disconnectCommand(ledger: Pick<Ledger, 'agent' | 'scope'>): string {
  return `agentbridge disconnect ${ledger.agent}${ledger.scope === 'project' ? ' --scope project' : ''}`;
}
