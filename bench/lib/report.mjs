import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import BetterSqlite3 from 'better-sqlite3';

export const ratioNote =
  'ratio = gateway msgs/s ÷ baseline msgs/s (1.00 = as fast as the floor; 0.25 = four times slower). ' +
  'p50/p99 are the gateway’s per-operation latencies in ms, base p50/p99 the baseline’s. ' +
  'cpu µs/msg is the CPU time (user+system) of the process doing the work (the daemon, both daemons for ' +
  'cross-host, the echo server, or this one for in-process targets and the amqplib floor) per message: ' +
  'steadier than msgs/s when the machine is shared. RabbitMQ’s own CPU is not in it; cross-host rows list it apart. ' +
  'cpu Δ is cpu µs/msg minus base cpu µs/msg (for signing on vs off: what signing costs per message).';

/**
 * A results table's column: its title and how a row's cell reads.
 * @typedef {[title: string, cell: (row: any) => string]} Column
 */

/** A target's CPU per message by process (`cpuUsPerMsgOf`), e.g. "daemon A 900, daemon B 700, broker 120". */
export function cpuBreakdown(result) {
  const parts = Object.entries(result.cpuUsPerMsgOf ?? {}).map(([name, us]) => `${name} ${us}`);
  return parts.length > 0 ? parts.join(', ') : `${result.cpuUsPerMsg}`;
}

/**
 * What the gateway costs in CPU beyond its baseline, per message: `cpuDeltaUsPerMsg`, and by
 * process (`cpuDeltaUsPerMsgOf`) when both measured the same processes (signing on vs off).
 */
export function cpuDifference(gateway, floor) {
  /** @type {{ cpuDeltaUsPerMsg: number, cpuDeltaUsPerMsgOf?: Record<string, number> }} */
  const delta = { cpuDeltaUsPerMsg: gateway.cpuUsPerMsg - floor.cpuUsPerMsg };
  const ours = Object.keys(gateway.cpuUsPerMsgOf ?? {});
  const theirs = Object.keys(floor.cpuUsPerMsgOf ?? {});
  if (ours.length > 0 && ours.length === theirs.length && ours.every((name) => theirs.includes(name))) {
    delta.cpuDeltaUsPerMsgOf = Object.fromEntries(
      ours.map((name) => [name, gateway.cpuUsPerMsgOf[name] - floor.cpuUsPerMsgOf[name]]),
    );
  }
  return delta;
}

/** Where and on what this run happened: results only compare across the same machine. */
export function machineInfo(dir, loadAtStart) {
  const cpus = os.cpus();
  return {
    cpu: cpus[0]?.model ?? 'unknown',
    cores: os.availableParallelism(),
    node: process.version,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    memoryGiB: Math.round(os.totalmem() / 2 ** 30),
    sqlite: /** @type {{ v: string }} */ (
      new BetterSqlite3(':memory:').prepare('SELECT sqlite_version() AS v').get()
    ).v,
    tempDir: dir,
    tempDirFilesystem: filesystemOf(dir),
    loadAverage1m: { start: loadAtStart, end: loadAverage() },
  };
}

export function loadAverage() {
  return Math.round(os.loadavg()[0] * 100) / 100;
}

function filesystemOf(dir) {
  try {
    return execFileSync('findmnt', ['-n', '-o', 'FSTYPE', '-T', dir], { encoding: 'utf8' }).trim();
  } catch {
    return 'unknown';
  }
}

/** The command line that reproduces this run, with the BENCH_* overrides that were set. */
export function commandLine() {
  const overrides = Object.entries(process.env)
    .filter(([name]) => name.startsWith('BENCH_'))
    .map(([name, value]) => `${name}=${value}`);
  const command = process.env.npm_lifecycle_event === 'bench' ? 'npm run bench' : 'node bench/run.mjs';
  return [...overrides, command].join(' ');
}

/** @type {Column[]} */
const rowColumns = [
  ['scenario', (r) => r.label],
  ['baseline', (r) => r.baseline],
  ['gateway msg/s', (r) => String(r.gateway.msgsPerSec)],
  ['baseline msg/s', (r) => String(r.floor.msgsPerSec)],
  ['ratio', (r) => r.ratio.toFixed(2)],
  ['p50 ms', (r) => r.gateway.p50Ms.toFixed(2)],
  ['p99 ms', (r) => r.gateway.p99Ms.toFixed(2)],
  ['base p50', (r) => r.floor.p50Ms.toFixed(2)],
  ['base p99', (r) => r.floor.p99Ms.toFixed(2)],
  ['cpu µs/msg', (r) => String(r.gateway.cpuUsPerMsg)],
  ['base cpu µs/msg', (r) => String(r.floor.cpuUsPerMsg)],
  ['cpu Δ µs/msg', (r) => String(r.cpuDeltaUsPerMsg)],
];

/** @type {Column[]} */
const primitiveColumns = [
  ['primitive', (r) => r.label],
  ['envelope bytes', (r) => String(r.bytes)],
  ['ops/s', (r) => String(r.result.msgsPerSec)],
  ['µs/op', (r) => r.usPerOp.toFixed(1)],
  ['p50 µs', (r) => String(Math.round(r.result.p50Ms * 1000))],
  ['p99 µs', (r) => String(Math.round(r.result.p99Ms * 1000))],
  ['cpu µs/op', (r) => String(r.result.cpuUsPerMsg)],
];

/**
 * The results table, padded; as Markdown (a pipe table) or as plain text for the terminal.
 * `columns` are [title, cell] pairs, the first `textColumns` left-aligned, the rest numbers.
 * @param {object[]} rows
 * @param {{ markdown?: boolean, columns?: Column[], textColumns?: number }} [options]
 */
export function renderTable(rows, { markdown = false, columns = rowColumns, textColumns = 2 } = {}) {
  const cells = [columns.map(([title]) => title), ...rows.map((row) => columns.map(([, cell]) => cell(row)))];
  const widths = columns.map((_, i) => Math.max(...cells.map((line) => line[i].length)));
  const numeric = (i) => i >= textColumns;
  const pad = (cell, i) => (numeric(i) ? cell.padStart(widths[i]) : cell.padEnd(widths[i]));
  const rule = widths.map((width, i) =>
    markdown && numeric(i) ? `${'-'.repeat(width - 1)}:` : '-'.repeat(width),
  );
  const line = (parts) => (markdown ? `| ${parts.join(' | ')} |` : parts.join('  '));
  return [line(cells[0].map(pad)), line(rule), ...cells.slice(1).map((row) => line(row.map(pad)))].join('\n');
}

/** The signing and sealing primitives (node:crypto Ed25519, and a seal and an open in a session, on one envelope), one per line. */
export function renderPrimitives(primitives, { markdown = false } = {}) {
  return renderTable(primitives, { markdown, columns: primitiveColumns, textColumns: 1 });
}

/**
 * What signing costs a cross-host message, from the rows whose baseline is the same scenario
 * with signing off, and the primitives: one sign on A plus one verify on B.
 */
function signingSummary(rows, primitives) {
  const signingRows = rows.filter((row) => row.baselineId === 'signing-off');
  if (signingRows.length === 0 && !primitives) return [];
  const usOf = (id) => primitives?.find((row) => row.id === id)?.usPerOp;
  const sign = usOf('sign');
  const verify = usOf('verify');
  return [
    '## Cost of signing',
    '',
    ...signingRows.map(
      (row) =>
        `- **${row.label}**: ${row.gateway.msgsPerSec} msg/s signed vs ${row.floor.msgsPerSec} unsigned, ` +
        `ratio ${row.ratio.toFixed(2)}; CPU ${row.gateway.cpuUsPerMsg} vs ${row.floor.cpuUsPerMsg} µs/msg, ` +
        `Δ ${row.cpuDeltaUsPerMsg} µs/msg` +
        (row.cpuDeltaUsPerMsgOf
          ? ` (by process: ${cpuBreakdown({ cpuUsPerMsgOf: row.cpuDeltaUsPerMsgOf })})`
          : '') +
        `; p50 ${row.gateway.p50Ms} vs ${row.floor.p50Ms} ms.`,
    ),
    ...(primitives
      ? [
          '',
          renderPrimitives(primitives, { markdown: true }),
          '',
          `One cross-host message is signed once (on A) and verified once (on B)` +
            (sign !== undefined && verify !== undefined
              ? `: ${sign} + ${verify} = ${Math.round((sign + verify) * 10) / 10} µs per message by the primitives, ` +
                'the floor under the cpu Δ of the rows above (which also carries the larger AMQP headers and the checks around the signature).'
              : '.'),
        ]
      : []),
    '',
  ];
}

/**
 * What sealing costs a cross-host message, from the rows whose baseline is the same scenario
 * with sealing off: the CPU it adds, as a share of the unsealed message's (issue 34's target:
 * under 10 %).
 */
function sealingSummary(rows) {
  const sealingRows = rows.filter((row) => row.baselineId === 'sealing-off');
  if (sealingRows.length === 0) return [];
  return [
    '## Cost of sealing',
    '',
    ...sealingRows.map((row) => {
      const share = row.floor.cpuUsPerMsg > 0 ? (100 * row.cpuDeltaUsPerMsg) / row.floor.cpuUsPerMsg : 0;
      return (
        `- **${row.label}**: ${row.gateway.msgsPerSec} msg/s sealed vs ${row.floor.msgsPerSec} in clear, ` +
        `ratio ${row.ratio.toFixed(2)}; CPU ${row.gateway.cpuUsPerMsg} vs ${row.floor.cpuUsPerMsg} µs/msg, ` +
        `Δ ${row.cpuDeltaUsPerMsg} µs/msg (${share.toFixed(1)} % of a message in clear; target under 10 %)` +
        (row.cpuDeltaUsPerMsgOf
          ? ` (by process: ${cpuBreakdown({ cpuUsPerMsgOf: row.cpuDeltaUsPerMsgOf })})`
          : '') +
        `; p50 ${row.gateway.p50Ms} vs ${row.floor.p50Ms} ms.`
      );
    }),
    '',
  ];
}

export function writeResults({ jsonFile, mdFile, results }) {
  writeFileSync(jsonFile, `${JSON.stringify(results, null, 2)}\n`);
  const { machine, settings, rows } = results;
  const scenarios = [...new Map(rows.map((row) => [row.scenario, row])).values()];
  const floors = [...new Map(rows.map((row) => [row.baseline, row])).values()];
  const md = [
    '# bridge benchmark: same-host and cross-host messaging, and the cost of signing',
    '',
    `Run ${results.date} with \`${results.command}\` (${results.durationSeconds} s).`,
    '',
    `- CPU: ${machine.cpu}, ${machine.cores} cores; ${machine.memoryGiB} GiB; ${machine.os}`,
    `- Node ${machine.node}, SQLite ${machine.sqlite}`,
    `- Load average (1 min) at start ${machine.loadAverage1m.start}, at end ${machine.loadAverage1m.end} (a start value near the core count means something else was running)`,
    `- Temp dir ${machine.tempDir} on ${machine.tempDirFilesystem}; SQLite journal WAL, synchronous ${settings.synchronous} (the default config)`,
    `- Settings: ${Object.entries(settings)
      .map(([key, value]) => `${key}=${value}`)
      .join(', ')}`,
    '',
    renderTable(rows, { markdown: true }),
    '',
    ratioNote,
    '',
    '## What each row measures',
    '',
    ...scenarios.map(
      (row) =>
        `- **${row.label}** (${row.gateway.count} msgs, concurrency ${row.gateway.concurrency}): ${row.measures}. Check: ${row.check}.` +
        (row.gateway.cpuUsPerMsgOf
          ? ` CPU µs/msg: ${cpuBreakdown(row.gateway)}; ${row.baseline}: ${cpuBreakdown(row.floor)}.`
          : ''),
    ),
    ...floors.map((row) => `- baseline **${row.baseline}**: ${row.baselineMeasures}.`),
    '',
    ...signingSummary(rows, results.primitives),
    ...sealingSummary(rows),
  ].join('\n');
  writeFileSync(mdFile, md);
}

/**
 * The head of a scenario's own section of results.md: its title, when and how it ran, the
 * machine, the load around it and its settings.
 */
export function sectionHead(title, { date, command, durationSeconds, machine, settings }) {
  return [
    `## ${title}`,
    '',
    `Run ${date} with \`${command}\` (${durationSeconds} s).`,
    '',
    `- CPU: ${machine.cpu}, ${machine.cores} cores; ${machine.memoryGiB} GiB; ${machine.os}; Node ${machine.node}`,
    `- Load average (1 min) at start ${machine.loadAverage1m.start}, at end ${machine.loadAverage1m.end} (a value near or above the core count means other work shared the machine)`,
    `- Settings: ${Object.entries(settings)
      .map(([key, value]) => `${key}=${value}`)
      .join(', ')}`,
  ];
}

/**
 * Writes one scenario's results where a partial run keeps the others': `update(json)` sets its
 * key of bench/results.json (and returns the value its section is drawn from), and its section
 * of bench/results.md, between `start` and `end` markers, is replaced (or appended).
 */
export function writeResultsSection({ jsonFile, mdFile, start, end, update, render }) {
  let json = {};
  if (existsSync(jsonFile)) {
    try {
      json = JSON.parse(readFileSync(jsonFile, 'utf8'));
    } catch {
      json = {};
    }
  }
  const value = update(json);
  writeFileSync(jsonFile, `${JSON.stringify(json, null, 2)}\n`);
  const md = existsSync(mdFile) ? readFileSync(mdFile, 'utf8') : '';
  const section = render(value);
  const at = md.indexOf(start);
  const until = md.indexOf(end);
  const updated =
    at >= 0 && until > at
      ? `${md.slice(0, at)}${section}${md.slice(until + end.length).replace(/^\n/, '')}`
      : md === ''
        ? section
        : `${md.replace(/\n*$/, '\n\n')}${section}`;
  writeFileSync(mdFile, updated);
}
