import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import BetterSqlite3, { type Database, type Statement } from 'better-sqlite3';
import { BridgeError, ErrorCode } from '../errors.js';
import { migrations } from './schema.js';
import { WriteBatch } from './writeBatch.js';

export interface StoreOptions {
  /** SQLite file; ':memory:' for tests that need no file. */
  file: string;
  synchronous?: 'FULL' | 'NORMAL';
  /** Called when a batched commit fails; the gateway must stop, memory no longer matches disk. */
  onWriteFailure?: (err: unknown) => void;
}

/** The open event log: the database, the write batch, and a statement cache. */
export interface Store {
  readonly db: Database;
  readonly batch: WriteBatch;
  readonly file: string;
  prepare<P extends unknown[] = unknown[], R = unknown>(sql: string): Statement<P, R>;
  close(): void;
}

export function openStore(options: StoreOptions): Store {
  if (options.file !== ':memory:') mkdirSync(dirname(options.file), { recursive: true });
  let db: Database;
  try {
    db = new BetterSqlite3(options.file);
  } catch (err) {
    throw new BridgeError(
      ErrorCode.storeFailed,
      `cannot open the event log ${options.file}: ${(err as Error).message}; check the path and its permissions (BRIDGE_HOME)`,
      { cause: err },
    );
  }
  db.pragma('journal_mode = WAL');
  db.pragma(`synchronous = ${options.synchronous ?? 'FULL'}`);
  db.pragma('busy_timeout = 5000');
  db.pragma('foreign_keys = ON');
  migrate(db);

  const statements = new Map<string, Statement>();
  const onFailure =
    options.onWriteFailure ??
    ((err: unknown) => {
      throw err;
    });
  return {
    db,
    file: options.file,
    batch: new WriteBatch(db, onFailure),
    prepare<P extends unknown[] = unknown[], R = unknown>(sql: string): Statement<P, R> {
      let statement = statements.get(sql);
      if (!statement) {
        statement = db.prepare(sql);
        statements.set(sql, statement);
      }
      return statement as unknown as Statement<P, R>;
    },
    close() {
      db.close();
    },
  };
}

function migrate(db: Database): void {
  const version = db.pragma('user_version', { simple: true }) as number;
  if (version > migrations.length) {
    throw new BridgeError(
      ErrorCode.storeFailed,
      `the event log was written by a newer bridge (schema ${version}, this one knows ${migrations.length}); upgrade bridge`,
    );
  }
  db.transaction(() => {
    for (let i = version; i < migrations.length; i++) db.exec(migrations[i] as string);
    db.pragma(`user_version = ${migrations.length}`);
  })();
}
