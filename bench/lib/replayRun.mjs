// One replay measurement, in a process of its own so that its memory figures are its own:
//   node bench/lib/replayRun.mjs '{"target":"replay","sources":[...],"check":true}'
//   node bench/lib/replayRun.mjs '{"target":"floor-sqlite","sources":[...]}'
//   node bench/lib/replayRun.mjs '{"target":"floor-export","sources":[...]}'
// Prints one JSON line: events, seconds, events/s, CPU µs per event, and memory: the RSS
// before the run, the peak RSS over the first quarter of the events and over all of them
// (sampled every 1/200th of the events: replayTrace is synchronous, so a timer would never
// fire), and the process's maxRSS.
import { closeSync, openSync, readSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { StringDecoder } from 'node:string_decoder';
import BetterSqlite3 from 'better-sqlite3';
import { replayTrace } from '#bridge/replay/replayTrace';

const options = JSON.parse(process.argv[2] ?? '{}');
const mb = (bytes) => Math.round((bytes / 2 ** 20) * 10) / 10;

/** RSS samples taken as the run goes: the peak over the first quarter and over everything. */
function memoryProbe(total) {
  const quarter = Math.ceil(total / 4);
  const before = process.memoryUsage.rss();
  let peakQuarter = before;
  let peak = before;
  const every = Math.max(1, Math.floor(total / 200));
  let next = every;
  return {
    sample(done) {
      const rss = process.memoryUsage.rss();
      if (rss > peak) peak = rss;
      if (done <= quarter && rss > peakQuarter) peakQuarter = rss;
    },
    /** For the floors, which count events themselves: samples every 1/200th. */
    tick(done) {
      if (done >= next) {
        next += every;
        this.sample(done);
      }
    },
    result() {
      this.sample(Number.POSITIVE_INFINITY);
      return {
        rssBeforeMB: mb(before),
        peakRssDeltaQuarterMB: mb(peakQuarter - before),
        peakRssDeltaMB: mb(peak - before),
        maxRssMB: mb(process.resourceUsage().maxRSS * 1024),
      };
    },
  };
}

function timed(run) {
  const cpuBefore = process.cpuUsage();
  const started = performance.now();
  const outcome = run();
  const seconds = (performance.now() - started) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  const cpuMs = (cpu.user + cpu.system) / 1000;
  return {
    ...outcome,
    seconds: Math.round(seconds * 1000) / 1000,
    eventsPerSec: Math.round(outcome.events / seconds),
    cpuUsPerEvent: Math.round(((cpuMs * 1000) / outcome.events) * 100) / 100,
  };
}

/** The gateway's replay: src/replay/replayTrace.ts over every event (no trace filter). */
function runReplay({ sources, check, total }) {
  const memory = memoryProbe(total);
  const result = timed(() => {
    const summary = replayTrace({
      sources,
      traceId: undefined,
      check,
      onProgress: (done) => memory.sample(done),
    });
    return {
      events: summary.events,
      hosts: summary.hosts,
      actors: summary.actors,
      divergences: summary.divergences.length,
      firstDivergences: summary.divergences.slice(0, 3),
    };
  });
  return { ...result, memory: memory.result() };
}

/**
 * A k-way merge of `streams` (iterators of [hlc, host, seq, row] heads) by the replay order
 * (hlc, then host, then seq), with a plain binary heap; calls `each` per event. The floors' own.
 */
function mergeHeads(streams, each) {
  const before = (a, b) => (a[0] !== b[0] ? a[0] < b[0] : a[1] !== b[1] ? a[1] < b[1] : a[2] < b[2]);
  const heap = [];
  const siftDown = (i) => {
    const item = heap[i];
    for (;;) {
      const left = 2 * i + 1;
      if (left >= heap.length) break;
      const child = left + 1 < heap.length && before(heap[left + 1].key, heap[left].key) ? left + 1 : left;
      if (!before(heap[child].key, item.key)) break;
      heap[i] = heap[child];
      i = child;
    }
    heap[i] = item;
  };
  for (const stream of streams) {
    const first = stream.next();
    if (!first.done) heap.push({ key: first.value, stream });
  }
  for (let i = (heap.length >> 1) - 1; i >= 0; i--) siftDown(i);
  let events = 0;
  while (heap.length > 0) {
    const top = heap[0];
    each(top.key, ++events);
    const next = top.stream.next();
    if (next.done) {
      const last = heap.pop();
      if (heap.length > 0) {
        // The heap was not empty, so pop returned an entry.
        heap[0] = /** @type {NonNullable<typeof last>} */ (last);
        siftDown(0);
      }
    } else {
      top.key = next.value;
      siftDown(0);
    }
  }
  return events;
}

/**
 * The SQLite floor: the three tables read in log order with better-sqlite3's cheapest reader
 * (`SELECT * … ORDER BY seq`, raw rows as arrays, iterated) and merged by (hlc, host, seq).
 * No validation, no JSON.parse of `data`, no objects built.
 */
function floorSqlite({ sources, total }) {
  const memory = memoryProbe(total);
  const dbs = sources.map((path) => new BetterSqlite3(path, { readonly: true, fileMustExist: true }));
  try {
    const result = timed(() => {
      const streams = dbs.map((db) => {
        const select = db.prepare('SELECT * FROM events ORDER BY seq').raw(true);
        const columns = select.columns().map((column) => column.name);
        const [seq, hlc, host] = ['seq', 'hlc', 'host'].map((name) => columns.indexOf(name));
        return (function* () {
          for (const row of select.iterate()) yield [row[hlc], row[host], row[seq], row];
        })();
      });
      return { events: mergeHeads(streams, (_, done) => memory.tick(done)) };
    });
    return { ...result, memory: memory.result() };
  } finally {
    for (const db of dbs) db.close();
  }
}

/** The file's lines after the first, read in 1 MiB chunks. */
function* lines(path) {
  const fd = openSync(path, 'r');
  const chunk = Buffer.alloc(1 << 20);
  const decoder = new StringDecoder('utf8');
  let carry = '';
  let header = true;
  try {
    for (;;) {
      const read = readSync(fd, chunk, 0, chunk.length, null);
      if (read === 0) break;
      const text = carry + decoder.write(chunk.subarray(0, read));
      let start = 0;
      for (;;) {
        const end = text.indexOf('\n', start);
        if (end === -1) break;
        if (header) header = false;
        else yield text.slice(start, end);
        start = end + 1;
      }
      carry = text.slice(start);
    }
    carry += decoder.end();
    if (carry !== '' && !header) yield carry;
  } finally {
    closeSync(fd);
  }
}

/**
 * The export floor: each file read in 1 MiB chunks, split into lines, each line JSON.parse'd
 * (the least any reader of a JSON line must do) and merged by (hlc, host, seq). No validation.
 */
function floorExport({ sources, total }) {
  const memory = memoryProbe(total);
  const result = timed(() => {
    const streams = sources.map((path) =>
      (function* () {
        for (const line of lines(path)) {
          const event = JSON.parse(line);
          yield [event.hlc, event.host, event.seq, event];
        }
      })(),
    );
    return { events: mergeHeads(streams, (_, done) => memory.tick(done)) };
  });
  return { ...result, memory: memory.result() };
}

const targets = { replay: runReplay, 'floor-sqlite': floorSqlite, 'floor-export': floorExport };
const run = targets[options.target];
if (!run)
  throw new Error(`unknown target ${options.target}: expected one of ${Object.keys(targets).join(', ')}`);
process.stdout.write(`${JSON.stringify(run(options))}\n`);
