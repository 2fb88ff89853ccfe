import { ZodError } from 'zod';
import { BridgeError, ErrorCode } from '../errors.js';
import { describeIssues } from '../wire/envelope.js';

/**
 * A damaged event log is bad local state, like a bad config file: the gateway cannot start on
 * it, and only the operator can choose between a backup and an empty log. These errors name
 * the file (and the row), what lives in it, and both ways on; the CLI exits 2 for them.
 */

/** What lives only in the event log: what starting with an empty one loses. */
export const eventLogHolds =
  'every registered entity (agents register again, for new tokens), the messages not yet ' +
  'delivered and their bodies, the deliveries, asks and spawns in progress, the receipts not yet ' +
  'told to senders, the idempotency keys, and the history that `agentbridge status MSGID`, `bridge ' +
  'export` and `agentbridge replay` read; the keys (BRIDGE_HOME/keys), trusted peers (trust.json) and ' +
  'config are other files and are kept';

/** SQLite's word that a file is damaged (SQLITE_CORRUPT and its variants) or no database at all. */
export function isDamagedFile(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (code.startsWith('SQLITE_CORRUPT') || code === 'SQLITE_NOTADB');
}

/** How to go on from a damaged log: a backup, deleting the one damaged row (if it is one), or an empty log. */
function waysOn(file: string, deleteRow?: string): string {
  return [
    'With the gateway stopped, restore it from a backup',
    ...(deleteRow ? [deleteRow] : []),
    `or move it aside and start with an empty one (mv ${file} ${file}.damaged, and its -wal and ` +
      `-shm files if any), which loses ${eventLogHolds}`,
  ].join('; ');
}

/** The error for an event log SQLite cannot read. */
export function damagedEventLog(file: string, cause: unknown): BridgeError {
  return new BridgeError(
    ErrorCode.badStore,
    `the event log ${file} is damaged (SQLite: ${(cause as Error).message}). ${waysOn(file)}`,
    { cause },
  );
}

/** `err`, or the damaged-log error naming `file` when SQLite says the file is damaged. */
export function asStoreDamage(file: string, err: unknown): unknown {
  return isDamagedFile(err) ? damagedEventLog(file, err) : err;
}

/** One stored row: where it is, and what deleting it alone would lose. */
export interface StoredRow {
  table: string;
  /** Its key columns and values, for the message and for the statement that deletes it. */
  key: Readonly<Record<string, unknown>>;
  /** What the row is, so that the operator knows what deleting it loses. */
  holds: string;
}

function describeRowProblem(err: unknown): string {
  return err instanceof ZodError ? describeIssues(err) : (err as Error).message;
}

/**
 * Parses one row of shared state the gateway cannot start without (an entity, say: per-actor
 * logs that do not fold are reported and left instead, see resumeOrReport). A row that does
 * not parse stops the start with an error naming the file, the row and the ways on.
 */
export function parseStoredRow<T>(file: string, row: StoredRow, parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    const key = Object.entries(row.key);
    const named = key.map(([column, value]) => `${column}=${String(value)}`).join(' ');
    const where = key
      .map(([column, value]) => `${column} = '${String(value).replaceAll("'", "''")}'`)
      .join(' AND ');
    const deleteRow = `or delete only that row (sqlite3 ${file} "DELETE FROM ${row.table} WHERE ${where}"), which loses ${row.holds}`;
    throw new BridgeError(
      ErrorCode.badStore,
      `the event log ${file} has a damaged row, ${row.table} ${named}: ${describeRowProblem(err)}. ` +
        waysOn(file, deleteRow),
      { cause: err },
    );
  }
}

/** Parses one JSON column of a stored row, naming the column when it is no JSON. */
export function parseJsonColumn(column: string, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new Error(`${column} is not JSON (${(err as Error).message})`, { cause: err });
  }
}
