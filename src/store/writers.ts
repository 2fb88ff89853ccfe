import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { Database, Statement } from 'better-sqlite3';

/** One write: a statement and its parameters. Data, so it can cross to the writer thread. */
export interface WriteOp {
  readonly sql: string;
  params: unknown[];
}

/** Commits batches of writes, each in one transaction, one batch at a time. */
export interface Writer {
  commit(ops: readonly WriteOp[]): Promise<void>;
  close(): Promise<void>;
}

/** Runs a batch in one transaction on a connection, caching statements. Shared by both writers. */
export function createTransactionRunner(db: Database): (ops: readonly WriteOp[]) => void {
  const statements = new Map<string, Statement>();
  return db.transaction((ops: readonly WriteOp[]) => {
    for (const op of ops) {
      let statement = statements.get(op.sql);
      if (!statement) {
        statement = db.prepare(op.sql);
        statements.set(op.sql, statement);
      }
      statement.run(...op.params);
    }
  });
}

/**
 * The built gateway runs writerThread.js; under the test runner the sources are TypeScript,
 * so the thread first registers tsx (a dev dependency) to load writerThread.ts.
 */
function startWriterThread(options: ThreadWriterOptions): Worker {
  if (!import.meta.url.endsWith('.ts')) {
    return new Worker(new URL('./writerThread.js', import.meta.url), { workerData: options });
  }
  const tsxRoot = dirname(createRequire(import.meta.url).resolve('tsx/package.json'));
  const tsx = pathToFileURL(join(tsxRoot, 'dist', 'esm', 'api', 'index.mjs')).href;
  const entry = new URL('./writerThread.ts', import.meta.url).href;
  const bootstrap = `import(${JSON.stringify(tsx)}).then((api) => { api.register(); return import(${JSON.stringify(entry)}); });`;
  return new Worker(bootstrap, { eval: true, workerData: options });
}

/** Commits on the calling thread (in-memory databases, tools). */
export function createInlineWriter(db: Database): Writer {
  const run = createTransactionRunner(db);
  return {
    commit: async (ops) => run(ops),
    close: async () => {},
  };
}

export interface ThreadWriterOptions {
  file: string;
  synchronous: 'FULL' | 'NORMAL';
}

/** Messages between the writer thread and the gateway. */
export type WriterRequest = { id: number; ops: readonly WriteOp[] } | { id: number; close: true };
export type WriterReply =
  | { id: number; ok: true }
  /** `code` is SQLite's (SQLITE_CORRUPT, …): an Error's own fields do not cross threads. */
  | { id: number; ok: false; error: string; code?: string };

/**
 * Commits on a worker thread with its own connection, so that a commit's fsync never blocks
 * the gateway's event loop; the gateway reads on its own connection (WAL allows both).
 */
export function createThreadWriter(options: ThreadWriterOptions): Writer {
  const worker = startWriterThread(options);
  worker.unref();
  let nextId = 0;
  const pending = new Map<number, { resolve: () => void; reject: (err: Error) => void }>();
  let failure: Error | undefined;
  const failAll = (err: Error) => {
    failure = err;
    for (const waiter of pending.values()) waiter.reject(err);
    pending.clear();
  };
  worker.on('message', (reply: WriterReply) => {
    const waiter = pending.get(reply.id);
    pending.delete(reply.id);
    if (reply.ok) waiter?.resolve();
    else waiter?.reject(Object.assign(new Error(reply.error), reply.code ? { code: reply.code } : {}));
  });
  worker.on('error', (err) => failAll(err));
  worker.on('exit', (code) => {
    if (pending.size > 0) failAll(new Error(`the event-log writer thread exited (code ${code})`));
  });
  const request = (message: WriterRequest): Promise<void> => {
    if (failure) return Promise.reject(failure);
    return new Promise((resolve, reject) => {
      pending.set(message.id, { resolve, reject });
      worker.postMessage(message);
    });
  };
  let closing: Promise<void> | undefined;
  return {
    commit: (ops) => request({ id: ++nextId, ops }),
    close() {
      closing ??= (async () => {
        // A writer that already died answers nothing: terminating it below is what matters.
        await request({ id: ++nextId, close: true }).catch(() => {});
        await worker.terminate();
        failure ??= new Error('the event log is closed');
      })();
      return closing;
    },
  };
}
