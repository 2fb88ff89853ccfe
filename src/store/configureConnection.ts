import type { Database } from 'better-sqlite3';

/**
 * What every connection to the event log sets, the reading one and the writer thread's alike.
 * `secure_delete`: a deleted row's bytes (a delivered body, purged) are overwritten with zeros in
 * its page, and a freed page (a long body's overflow pages) is zeroed, so no checkpoint carries
 * delivered text into events.db or its free pages (R-H9). The WAL's older frames still hold it
 * until the file is truncated: the writer thread does that soon after a commit
 * (`walScrubDelayMs`).
 */
export function configureConnection(db: Database, synchronous: 'FULL' | 'NORMAL'): void {
  db.pragma('journal_mode = WAL');
  db.pragma(`synchronous = ${synchronous}`);
  db.pragma(`busy_timeout = ${busyTimeoutMs}`);
  db.pragma('secure_delete = ON');
}

export const busyTimeoutMs = 5000;

/**
 * How soon after a commit the writer thread checkpoints the WAL into events.db and truncates it:
 * the longest a purged body stays in `events.db-wal`. Commits in the meantime share the one
 * checkpoint, so a busy gateway truncates at most this often.
 */
export const walScrubDelayMs = 1000;
