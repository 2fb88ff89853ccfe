import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { Database, Statement } from 'better-sqlite3';

/** One write: a statement and its parameters. */
export interface WriteOp {
  sql: string;
  params: unknown[];
}

/** Commits batches of writes, each in one transaction, one batch at a time. */
export interface Writer {
  commit(ops: readonly WriteOp[]): Promise<void>;
  close(): Promise<void>;
}

/**
 * A batch as a writer runs it: each statement's SQL text crosses once, the first time a batch
 * uses it (`defined`, under the id later batches name it by); `shape` holds each op's statement
 * id and parameter count, and `params` every op's parameters in one flat list. Cloning that to
 * the writer thread costs a fraction of cloning an object (and the SQL text) per op.
 */
export interface EncodedBatch {
  defined: Array<[id: number, sql: string]>;
  shape: Int32Array;
  params: unknown[];
}

/** Encodes batches for one writer: it remembers which statements that writer has been given. */
export function createBatchEncoder(): (ops: readonly WriteOp[]) => EncodedBatch {
  const ids = new Map<string, number>();
  return (ops) => {
    const defined: Array<[number, string]> = [];
    const shape = new Int32Array(ops.length * 2);
    const params: unknown[] = [];
    ops.forEach((op, i) => {
      let id = ids.get(op.sql);
      if (id === undefined) {
        id = ids.size;
        ids.set(op.sql, id);
        defined.push([id, op.sql]);
      }
      shape[2 * i] = id;
      shape[2 * i + 1] = op.params.length;
      for (const param of op.params) params.push(param);
    });
    return { defined, shape, params };
  };
}

/** Runs an encoded batch in one transaction on a connection, keeping its statements. Shared by both writers. */
export function createTransactionRunner(db: Database): (batch: EncodedBatch) => void {
  const statements: Statement[] = [];
  const transaction = db.transaction(({ shape, params }: EncodedBatch) => {
    let at = 0;
    for (let i = 0; i < shape.length; i += 2) {
      const count = shape[i + 1] as number;
      (statements[shape[i] as number] as Statement).run(...params.slice(at, at + count));
      at += count;
    }
  });
  return (batch) => {
    // Prepared outside the transaction, so a batch that fails leaves them known for the next.
    for (const [id, sql] of batch.defined) statements[id] = db.prepare(sql);
    transaction(batch);
  };
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
  const encode = createBatchEncoder();
  return {
    commit: async (ops) => run(encode(ops)),
    close: async () => {},
  };
}

export interface ThreadWriterOptions {
  file: string;
  synchronous: 'FULL' | 'NORMAL';
}

/** Messages between the writer thread and the gateway. */
export type WriterRequest = { id: number; batch: EncodedBatch } | { id: number; close: true };
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
  const encode = createBatchEncoder();
  let closing: Promise<void> | undefined;
  return {
    commit: (ops) => request({ id: ++nextId, batch: encode(ops) }),
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
