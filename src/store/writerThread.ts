import { parentPort, workerData } from 'node:worker_threads';
import BetterSqlite3 from 'better-sqlite3';
import {
  createTransactionRunner,
  type ThreadWriterOptions,
  type WriterReply,
  type WriterRequest,
} from './writers.js';

// The event log's writer thread: one connection, one transaction per batch it is sent.
const options = workerData as ThreadWriterOptions;
const db = new BetterSqlite3(options.file);
db.pragma('journal_mode = WAL');
db.pragma(`synchronous = ${options.synchronous}`);
db.pragma('busy_timeout = 5000');
const run = createTransactionRunner(db);

parentPort?.on('message', (message: WriterRequest) => {
  let reply: WriterReply;
  if ('close' in message) {
    db.close();
    parentPort?.postMessage({ id: message.id, ok: true } satisfies WriterReply);
    return;
  }
  try {
    run(message.ops);
    reply = { id: message.id, ok: true };
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
