import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import type { GatewayProcess } from './GatewayProcess.js';

/** Where a failed test leaves what its gateways had, one directory per failure. */
export const failuresRoot = '/tmp/bridge-failures';

export interface QueueState {
  name: string;
  /** Waiting for a consumer, and delivered to one but not settled yet. */
  ready: number;
  unacked: number;
  consumers: number;
}

/**
 * The broker's view of `names` (as `rabbitmqctl list_queues` reports them): a queue missing
 * from the answer does not exist. Rejects when rabbitmqctl cannot be run.
 */
export function queueStates(names: readonly string[]): Promise<QueueState[]> {
  return new Promise((resolve, reject) => {
    execFile(
      'rabbitmqctl',
      [
        'list_queues',
        '-q',
        '--formatter',
        'json',
        'name',
        'messages_ready',
        'messages_unacknowledged',
        'consumers',
      ],
      { timeout: 60_000 },
      (err, stdout, stderr) => {
        if (err) {
          reject(new Error(`rabbitmqctl list_queues failed: ${stderr || err.message}`));
          return;
        }
        const wanted = new Set(names);
        const rows = JSON.parse(stdout) as Array<{
          name: string;
          messages_ready: number;
          messages_unacknowledged: number;
          consumers: number;
        }>;
        resolve(
          rows
            .filter((row) => wanted.has(row.name))
            .map((row) => ({
              name: row.name,
              ready: row.messages_ready,
              unacked: row.messages_unacknowledged,
              consumers: row.consumers,
            })),
        );
      },
    );
  });
}

export interface Kept {
  /** Label → gateway whose log and events.db are copied. */
  gateways: Record<string, GatewayProcess>;
  /** Broker queues whose ready/unacked counts are reported (inboxes, the DLQ). */
  queues: readonly string[];
  /** More to write next to them (as JSON), e.g. the DLQ depth when the test started. */
  extra?: () => Record<string, unknown>;
}

/**
 * Keeps what is needed to tell where a test's messages went, before its gateways are disposed
 * of: each gateway's log and a consistent copy of its `events.db` (taken with SQLite's backup
 * while it may still run), and the broker's queue state, under
 * /tmp/bridge-failures/<test>-<time>/. Returns a line that names the directory and shows the
 * queue state, for the failure message, so a CI log alone says where to look.
 */
export async function keepState(test: string, kept: Kept): Promise<string> {
  const dir = join(failuresRoot, `${test}-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  let note = '';
  let queues: QueueState[] | string;
  try {
    queues = await queueStates(kept.queues);
  } catch (queueErr) {
    queues = (queueErr as Error).message;
  }
  try {
    mkdirSync(dir, { recursive: true });
    for (const [label, gateway] of Object.entries(kept.gateways)) {
      writeFileSync(join(dir, `${label}.log`), gateway.log);
      const db = join(gateway.home, 'events.db');
      if (!existsSync(db)) continue;
      const source = new Database(db, { readonly: true, fileMustExist: true });
      try {
        await source.backup(join(dir, `${label}.events.db`));
      } finally {
        source.close();
      }
    }
    writeFileSync(join(dir, 'broker.json'), JSON.stringify({ queues, ...(kept.extra?.() ?? {}) }, null, 1));
  } catch (keepErr) {
    note = ` (could not keep everything: ${(keepErr as Error).message})`;
  }
  const summary =
    typeof queues === 'string'
      ? queues
      : queues
          .map((q) => `${q.name}: ready ${q.ready}, unacked ${q.unacked}, consumers ${q.consumers}`)
          .join('; ');
  return `kept in ${dir} (logs, events.db, broker.json); broker queues: ${summary || 'none of them exist'}${note}`;
}

/** Marks a failure message that already says where its state was kept. */
export const keptMark = `kept in ${failuresRoot}/`;

/**
 * Runs a test's final checks; when they fail, keeps the gateways' state (keepState) and adds
 * where to the failure message.
 */
export async function keepOnFailure(
  test: string,
  kept: Kept,
  checks: () => void | Promise<void>,
): Promise<void> {
  try {
    await checks();
  } catch (err) {
    const where = await keepState(test, kept);
    if (err instanceof Error) {
      err.message = `${err.message}\n\n${where}`;
      throw err;
    }
    throw new Error(`${String(err)}\n\n${where}`, { cause: err });
  }
}
