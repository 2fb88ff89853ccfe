import { closeSync, openSync, readSync } from 'node:fs';
import { StringDecoder } from 'node:string_decoder';
import Database from 'better-sqlite3';
import { BridgeError, ErrorCode } from '../errors.js';
import { eventColumns, inLogOrder, parseStoredRowValues } from '../store/eventRow.js';
import { exportEventSchema, exportHeaderSchema, type ReplayEvent } from './replayEvent.js';

/** One host's side of a flow: an event log file, or an `agentbridge export` of one. */
export interface ReplaySource {
  readonly path: string;
  readonly format: 'sqlite' | 'export';
  /** The host whose log it is (from the rows, or the export's header). */
  readonly host: string;
  /** How many events it will yield (for progress). */
  readonly total: number;
  /** The events, in the host's log order. */
  events(): Iterable<ReplayEvent>;
  close(): void;
}

const sqliteMagic = Buffer.from('SQLite format 3\u0000', 'latin1');

/**
 * Opens a log for replay: a gateway's `events.db` (read-only; a running gateway may keep
 * writing) or an export file. `traceId` limits it to one flow; undefined takes everything.
 */
export function openSource(path: string, traceId: string | undefined): ReplaySource {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (err) {
    throw new BridgeError(ErrorCode.badRequest, `cannot read ${path}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const head = Buffer.alloc(sqliteMagic.length);
  readSync(fd, head, 0, head.length, 0);
  closeSync(fd);
  return head.equals(sqliteMagic) ? openDatabase(path, traceId) : openExport(path, traceId);
}

function openDatabase(path: string, traceId: string | undefined): ReplaySource {
  const db = new Database(path, { readonly: true, fileMustExist: true });
  try {
    const where = traceId === undefined ? '' : ' WHERE trace_id = ?';
    const args = traceId === undefined ? [] : [traceId];
    // A log from before schema migration 6 has no later events; one opened read-only is not migrated.
    const hasLater =
      db.prepare("SELECT 1 FROM pragma_table_info('events') WHERE name = 'later'").get() !== undefined;
    const events = hasLater ? '1 + iif(json_valid(later), json_array_length(later), 0)' : '1';
    const count = db.prepare(`SELECT coalesce(sum(${events}), 0) AS n FROM events${where}`).get(...args) as {
      n: number;
    };
    const first = db.prepare('SELECT host FROM events LIMIT 1').get() as { host: string } | undefined;
    // Rows as arrays (`.raw()`): about twice as fast to read as row objects, and one object
    // fewer per event to collect.
    const columns = eventColumns.map((column) => (column === 'later' && !hasLater ? 'NULL' : column));
    const select = db.prepare(`SELECT ${columns.join(', ')} FROM events${where} ORDER BY seq`).raw(true);
    return {
      path,
      format: 'sqlite',
      host: first?.host ?? '?',
      total: count.n,
      *events() {
        yield* inLogOrder(parsedRows(select.iterate(...args) as IterableIterator<unknown[]>));
      },
      close: () => db.close(),
    };
  } catch (err) {
    db.close();
    throw new BridgeError(
      ErrorCode.badRequest,
      `${path} is an SQLite file but not a bridge event log (${(err as Error).message}): give a gateway's events.db or a \`agentbridge export\` file`,
      { cause: err },
    );
  }
}

/** A log's rows (arrays, `eventColumns` in order), each as the events it holds. */
function* parsedRows(rows: Iterable<unknown[]>): Generator<ReplayEvent[]> {
  for (const values of rows) yield parseStoredRowValues(values);
}

function openExport(path: string, traceId: string | undefined): ReplaySource {
  const lines = readLines(path);
  const first = lines.next();
  if (first.done) throw new BridgeError(ErrorCode.badRequest, `${path} is empty: not a bridge export`);
  const header = parseLine(first.value.text, path, 1, (json) => exportHeaderSchema.safeParse(json));
  const parseEvent = (json: unknown) => exportEventSchema.safeParse(json);
  return {
    path,
    format: 'export',
    host: header.host,
    total: header.events,
    *events() {
      for (const { text, number } of lines) {
        if (text.trim() === '') continue;
        const event = parseLine(text, path, number, parseEvent) as ReplayEvent;
        if (traceId === undefined || event.traceId === traceId) yield event;
      }
    },
    close: () => lines.return(undefined),
  };
}

/** One line of an export, parsed and validated; errors name the file and line (`path:line`). */
function parseLine<T>(
  text: string,
  path: string,
  line: number,
  parse: (
    json: unknown,
  ) =>
    | { success: true; data: T }
    | { success: false; error: { issues: { path: PropertyKey[]; message: string }[] } },
): T {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new BridgeError(
      ErrorCode.badRequest,
      `${path}:${line}: not JSON (${(err as Error).message}): not a bridge export line`,
      { cause: err },
    );
  }
  const parsed = parse(json);
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues.map((i) => `${i.path.join('.') || '(line)'}: ${i.message}`).join('; ');
  throw new BridgeError(
    ErrorCode.badRequest,
    `${path}:${line}: not a bridge export line (${problems}); make exports with \`agentbridge export --trace ID\``,
  );
}

/** The file's lines, read in 1 MiB chunks: memory stays bounded however large the file. */
function* readLines(path: string): Generator<{ text: string; number: number }, void, undefined> {
  const fd = openSync(path, 'r');
  const chunk = Buffer.alloc(1 << 20);
  // A character split across two chunks is held back by the decoder, not mangled.
  const decoder = new StringDecoder('utf8');
  let carry = '';
  let number = 0;
  try {
    for (;;) {
      const read = readSync(fd, chunk, 0, chunk.length, null);
      if (read === 0) break;
      const text = carry + decoder.write(chunk.subarray(0, read));
      let start = 0;
      for (;;) {
        const end = text.indexOf('\n', start);
        if (end === -1) break;
        number++;
        yield { text: text.slice(start, end), number };
        start = end + 1;
      }
      carry = text.slice(start);
    }
    carry += decoder.end();
    if (carry !== '') yield { text: carry, number: number + 1 };
  } finally {
    closeSync(fd);
  }
}
