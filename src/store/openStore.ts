import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import BetterSqlite3, { type Database, type Statement } from 'better-sqlite3';
import { BridgeError, ErrorCode } from '../errors.js';
import { createPrivateFile } from '../security/privateHome.js';
import { configureConnection } from './configureConnection.js';
import { migrations } from './schema.js';
import { asStoreDamage } from './storeDamage.js';
import { type CommitStats, WriteBatch } from './WriteBatch.js';
import { createInlineWriter, createThreadWriter, type Writer } from './writers.js';

export interface StoreOptions {
  /** SQLite file; ':memory:' for tests that need no file. */
  file: string;
  synchronous?: 'FULL' | 'NORMAL';
  /** Called when a batched commit fails; the gateway must stop, memory no longer matches disk. */
  onWriteFailure?: (err: unknown) => void;
  /** Commit on a writer thread (files only; the default for files) or on this thread. */
  writerThread?: boolean;
  /** Told of every committed batch (the gateway's store metrics). */
  onCommitted?: (stats: CommitStats) => void;
}

/**
 * The open event log: a connection for reads, the write batch (whose commits run on a writer
 * thread with its own connection), and a statement cache.
 */
export interface Store {
  readonly db: Database;
  readonly batch: WriteBatch;
  readonly file: string;
  prepare<P extends unknown[] = unknown[], R = unknown>(sql: string): Statement<P, R>;
  /** Commits what is pending, stops the writer and closes the connection. */
  close(): Promise<void>;
}

export function openStore(options: StoreOptions): Store {
  let db: Database;
  try {
    if (options.file !== ':memory:') {
      mkdirSync(dirname(options.file), { recursive: true, mode: 0o700 });
      // Private from its first byte; SQLite gives the -wal and -shm it makes the same mode.
      createPrivateFile(options.file);
    }
    db = new BetterSqlite3(options.file);
  } catch (err) {
    throw new BridgeError(
      ErrorCode.storeFailed,
      `cannot open the event log ${options.file}: ${(err as Error).message}; check the path and its permissions (BRIDGE_HOME)`,
      { cause: err },
    );
  }
  try {
    configureConnection(db, options.synchronous ?? 'FULL');
    db.pragma('foreign_keys = ON');
    migrate(db);
  } catch (err) {
    // The first reads of the file: where a truncated or overwritten one shows.
    db.close();
    throw asStoreDamage(options.file, err);
  }

  const statements = new Map<string, Statement>();
  const onFailure =
    options.onWriteFailure ??
    ((err: unknown) => {
      throw err;
    });
  const threaded = options.file !== ':memory:' && (options.writerThread ?? true);
  const writer: Writer = threaded
    ? createThreadWriter({ file: options.file, synchronous: options.synchronous ?? 'FULL' })
    : createInlineWriter(db);
  const batch = new WriteBatch(writer, onFailure, options.onCommitted);
  return {
    db,
    file: options.file,
    batch,
    prepare<P extends unknown[] = unknown[], R = unknown>(sql: string): Statement<P, R> {
      let statement = statements.get(sql);
      if (!statement) {
        statement = db.prepare(sql);
        statements.set(sql, statement);
      }
      return statement as unknown as Statement<P, R>;
    },
    async close() {
      if (!db.open) return;
      // A failed flush was already handed to each waiter of that batch; the store closes anyway.
      await batch.flush().catch(() => {});
      await writer.close();
      if (db.open) db.close();
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
