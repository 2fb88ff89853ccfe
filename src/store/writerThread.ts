import { parentPort, workerData } from 'node:worker_threads';
import BetterSqlite3 from 'better-sqlite3';
import { busyTimeoutMs, configureConnection, walScrubDelayMs } from './configureConnection.js';
import {
  createTransactionRunner,
  type ThreadWriterOptions,
  type WriterReply,
  type WriterRequest,
} from './writers.js';

// The event log's writer thread: one connection, one transaction per batch it is sent.
const options = workerData as ThreadWriterOptions;
const db = new BetterSqlite3(options.file);
configureConnection(db, options.synchronous);
const run = createTransactionRunner(db);

// The WAL keeps every frame written since it was last reset, a purged body's among them, and a
// reset only rewinds it. So, soon after a commit, everything in it goes into events.db (where
// secure_delete has zeroed what was deleted) and the file is truncated to nothing.
let scrub: NodeJS.Timeout | undefined;
const scrubSoon = () => {
  scrub ??= setTimeout(scrubWal, walScrubDelayMs);
};
function scrubWal(): void {
  scrub = undefined;
  // Not waiting for readers: a busy checkpoint is tried again after the delay, and the commits
  // queued behind this one do not wait for a reader's snapshot meanwhile.
  db.pragma('busy_timeout = 0');
  try {
    const [result] = db.pragma('wal_checkpoint(TRUNCATE)') as { busy: number }[];
    if (result?.busy !== 0) scrubSoon();
  } catch {
    // SQLITE_BUSY or a failing disk: the next commit tells the gateway of a failing disk; the
    // WAL is scrubbed again after the delay either way.
    scrubSoon();
  } finally {
    db.pragma(`busy_timeout = ${busyTimeoutMs}`);
  }
}

parentPort?.on('message', (message: WriterRequest) => {
  let reply: WriterReply;
  if ('close' in message) {
    clearTimeout(scrub);
    db.close();
    parentPort?.postMessage({ id: message.id, ok: true } satisfies WriterReply);
    return;
  }
  try {
    run(message.batch);
    reply = { id: message.id, ok: true };
    scrubSoon();
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    reply = {
      id: message.id,
      ok: false,
      error: (err as Error).message,
      ...(typeof code === 'string' ? { code } : {}),
    };
  }
  parentPort?.postMessage(reply);
});
