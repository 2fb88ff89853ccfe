import { join } from 'node:path';
import Database from 'better-sqlite3';

/**
 * Opens a gateway's `events.db` (which must exist) for `fn` and closes it after: how a test
 * plants what an older release or a damaged disk left there, or reads what a gateway kept.
 * Only while that gateway is stopped, for writes.
 */
export function withEventsDb<T>(home: string, fn: (db: Database.Database) => T): T {
  const db = new Database(join(home, 'events.db'), { fileMustExist: true });
  try {
    return fn(db);
  } finally {
    db.close();
  }
}
