import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { runNode } from '../lib/processes.mjs';
import { replayLogs } from '../lib/replayLog.mjs';
import { commandLine, loadAverage, machineInfo, renderTable, writeResultsSection } from '../lib/report.mjs';

/**
 * (e) Replay throughput (issue 6): `replayTrace` (src/replay/replayTrace.ts) over three hosts'
 * generated logs of at least `events` events (bench/lib/replayLog.mjs, cached in
 * bench/.cache/), every event (no trace filter), in events/s: (a) the k-way merge by hybrid
 * logical clock alone (`check: false`), (b) the merge with every actor re-run through the
 * current machines; each from the SQLite `events.db` files and from `agentbridge export` files of
 * them. Beside each, a floor: the cheapest way to read the same logs in order and merge them
 * (bench/lib/replayRun.mjs). Each run has a process of its own, for its memory figures: the
 * peak RSS growth over the first quarter of the events and over all of them (bounded memory:
 * the second is not ~4x the first), and its maxRSS. Every re-run must find zero divergences.
 */

export const replayTargets = { merge: 200_000, check: 100_000 };

const runScript = new URL('../lib/replayRun.mjs', import.meta.url).pathname;

const formats = [
  { id: 'sqlite', label: 'SQLite events.db', file: (host) => host.db, floor: 'floor-sqlite' },
  { id: 'export', label: 'NDJSON export', file: (host) => host.export, floor: 'floor-export' },
];
const modes = [
  { id: 'merge', label: 'merge', check: false, target: replayTargets.merge },
  { id: 'check', label: 'merge + re-run check', check: true, target: replayTargets.check },
];

const floorMeasures = {
  sqlite:
    'better-sqlite3 reading the three tables with `SELECT * FROM events ORDER BY seq`, raw rows (arrays) iterated, merged by (hlc, host, seq) with a plain binary heap: no validation, no JSON.parse of data, no objects built',
  export:
    'the three export files read in 1 MiB chunks and split into lines, each line JSON.parse’d (the least a reader of JSON lines must do), merged by (hlc, host, seq) with a plain binary heap: no validation',
};

async function measureIn(options, timeoutMs) {
  const stdout = await runNode([runScript, JSON.stringify(options)], { timeoutMs });
  // split always yields at least one element, so the last one exists.
  return JSON.parse(/** @type {string} */ (stdout.trim().split('\n').at(-1)));
}

/** The best of `runs` runs (highest events/s), each in a fresh process. */
async function bestOf(runs, options, timeoutMs) {
  let best;
  for (let i = 0; i < runs; i++) {
    const result = await measureIn(options, timeoutMs);
    if (!best || result.eventsPerSec > best.eventsPerSec) best = result;
  }
  return best;
}

const round = (value, digits) => Math.round(value * 10 ** digits) / 10 ** digits;

/** Runs the replay benchmark; returns its results (rows, logs, machine, settings). */
export async function runReplayBench({ events, runs = 1, timeoutMs = 600_000, log = console.error }) {
  const started = performance.now();
  const loadAtStart = loadAverage();
  const logs = await replayLogs({ events, log });
  const total = logs.events;
  const rows = [];
  for (const format of formats) {
    const sources = logs.hosts.map((host) => join(logs.dir, format.file(host)));
    const floor = await bestOf(runs, { target: format.floor, sources, total }, timeoutMs);
    if (floor.events !== total)
      throw new Error(`${format.floor} read ${floor.events} events, expected ${total}`);
    log(`replay ${format.id} floor: ${floor.eventsPerSec} events/s`);
    for (const mode of modes) {
      const gateway = await bestOf(runs, { target: 'replay', sources, check: mode.check, total }, timeoutMs);
      if (gateway.events !== total) {
        throw new Error(
          `replay (${format.id}, ${mode.id}) yielded ${gateway.events} events, expected ${total}`,
        );
      }
      if (gateway.divergences !== 0) {
        throw new Error(
          `replay (${format.id}, ${mode.id}) found ${gateway.divergences} divergences in generated logs: ` +
            JSON.stringify(gateway.firstDivergences),
        );
      }
      const { memory } = gateway;
      const growth =
        memory.peakRssDeltaQuarterMB > 0 ? memory.peakRssDeltaMB / memory.peakRssDeltaQuarterMB : 1;
      const row = {
        scenario: `replay-${mode.id}-${format.id}`,
        label: `replay: ${mode.label}, ${format.label}`,
        format: format.id,
        mode: mode.id,
        floorLabel: `${format.id} floor`,
        gateway,
        floor,
        ratio: round(gateway.eventsPerSec / floor.eventsPerSec, 3),
        target: mode.target,
        targetRatio: round(gateway.eventsPerSec / mode.target, 3),
        targetMet: gateway.eventsPerSec >= mode.target,
        memoryGrowth: round(growth, 2),
        check:
          (mode.check ? `${gateway.actors} actors re-run, 0 divergences` : `${gateway.actors} actors`) +
          `; ${total} events from ${gateway.hosts.length} hosts`,
      };
      rows.push(row);
      log(
        `${row.label}: ${gateway.eventsPerSec} events/s (floor ${floor.eventsPerSec}, ratio ${row.ratio.toFixed(2)}; ` +
          `target ${mode.target}, ${row.targetMet ? 'met' : 'NOT met'}, ${row.targetRatio.toFixed(2)}x); ` +
          `cpu ${gateway.cpuUsPerEvent} µs/event; peak RSS +${memory.peakRssDeltaQuarterMB} MB over the first quarter, ` +
          `+${memory.peakRssDeltaMB} MB over all (x${row.memoryGrowth}), maxRSS ${memory.maxRssMB} MB`,
      );
    }
  }
  return {
    date: new Date().toISOString(),
    command: commandLine(),
    durationSeconds: round((performance.now() - started) / 1000, 1),
    machine: machineInfo(logs.dir, loadAtStart),
    settings: { events, runs },
    logs: {
      dir: logs.dir,
      events: total,
      hosts: logs.hosts.map(({ host, skewMs, events: count }) => ({ host, skewMs, events: count })),
      simulatedSeconds: logs.simulatedSeconds,
      validation: logs.validation,
      generatedSeconds: logs.generatedSeconds,
      cached: logs.cached,
    },
    targets: replayTargets,
    floors: floorMeasures,
    rows,
  };
}

/** @type {import('../lib/report.mjs').Column[]} */
const replayColumns = [
  ['scenario', (r) => r.label],
  ['baseline', (r) => r.floorLabel],
  ['events/s', (r) => String(r.gateway.eventsPerSec)],
  ['floor events/s', (r) => String(r.floor.eventsPerSec)],
  ['ratio', (r) => r.ratio.toFixed(2)],
  ['target events/s', (r) => String(r.target)],
  ['÷ target', (r) => r.targetRatio.toFixed(2)],
  ['cpu µs/event', (r) => String(r.gateway.cpuUsPerEvent)],
  ['floor cpu µs/event', (r) => String(r.floor.cpuUsPerEvent)],
  ['RSS Δ ¼ MB', (r) => String(r.gateway.memory.peakRssDeltaQuarterMB)],
  ['RSS Δ MB', (r) => String(r.gateway.memory.peakRssDeltaMB)],
  ['maxRSS MB', (r) => String(r.gateway.memory.maxRssMB)],
];

export const replayRatioNote =
  'ratio = replay events/s ÷ floor events/s; ÷ target = replay events/s ÷ the target (≥ 1.00: met). ' +
  'cpu µs/event is the CPU time (user+system, GC threads included) of the process doing the replay per event. ' +
  'RSS Δ ¼ is the peak growth of the resident set over the first quarter of the events, RSS Δ over all of them ' +
  '(from the RSS just before the replay; sampled every 1/200th of the events); maxRSS is the whole process’s peak.';

/** The replay results as a table (Markdown or terminal text). */
export function renderReplay(results, { markdown = false } = {}) {
  return renderTable(results.rows, { markdown, columns: replayColumns });
}

const sectionStart = '<!-- replay:start (written by BENCH_ONLY=replay node bench/run.mjs) -->';
const sectionEnd = '<!-- replay:end -->';

function replaySection(results) {
  const { machine, logs, rows } = results;
  const hosts = logs.hosts
    .map((h) => `${h.host} ${h.events} events, clock ${h.skewMs >= 0 ? '+' : ''}${h.skewMs} ms`)
    .join('; ');
  const met = (mode) => rows.filter((r) => r.mode === mode).every((r) => r.targetMet);
  return [
    sectionStart,
    '## Replay throughput (agentbridge replay)',
    '',
    `Run ${results.date} with \`${results.command}\` (${results.durationSeconds} s).`,
    '',
    `- CPU: ${machine.cpu}, ${machine.cores} cores; ${machine.memoryGiB} GiB; ${machine.os}; Node ${machine.node}, SQLite ${machine.sqlite}`,
    `- Load average (1 min) at start ${machine.loadAverage1m.start}, at end ${machine.loadAverage1m.end}`,
    `- Logs: ${logs.events} events across ${logs.hosts.length} hosts (${hosts}), ${logs.simulatedSeconds} s of simulated traffic, generated by bench/lib/replayLog.mjs into ${machine.tempDir} on ${machine.tempDirFilesystem}; validated: ${logs.validation.actors} actors, ${logs.validation.crossHost} cross-host and ${logs.validation.local} local messages, every receive after its send, no divergence`,
    `- Each row: the best of ${results.settings.runs} run${results.settings.runs === 1 ? '' : 's'} (highest events/s), each in a process of its own`,
    `- Targets: merge ≥ ${results.targets.merge} events/s (${met('merge') ? 'met' : 'NOT met'}), merge + re-run check ≥ ${results.targets.check} events/s (${met('check') ? 'met' : 'NOT met'})`,
    '',
    renderReplay(results, { markdown: true }),
    '',
    replayRatioNote,
    '',
    '- **merge**: `replayTrace({ sources, traceId: undefined, check: false })` over the three hosts’ logs: each source read and validated in log order, merged by hybrid logical clock.',
    '- **merge + re-run check**: the same with `check: true`: every actor re-run through the current machines (XState pure transitions); 0 divergences asserted.',
    ...Object.entries(results.floors).map(([id, text]) => `- baseline **${id} floor**: ${text}.`),
    `- Memory: peak RSS growth over all the events ÷ over the first quarter, per row: ${rows.map((r) => `x${r.memoryGrowth}`).join(', ')} ` +
      '(a reader that held the whole timeline would show ~x4; ~x1 is a stream).',
    sectionEnd,
    '',
  ].join('\n');
}

/**
 * Puts the replay results into bench/results.json (its `replay` key) and bench/results.md (its
 * own section, between markers, replaced on each run or appended), leaving the rest as it is.
 */
export function writeReplayResults({ jsonFile, mdFile, results }) {
  writeResultsSection({
    jsonFile,
    mdFile,
    start: sectionStart,
    end: sectionEnd,
    update: (json) => {
      json.replay = results;
      return results;
    },
    render: replaySection,
  });
}
