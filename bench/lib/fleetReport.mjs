import { renderTable, writeResultsSection } from './report.mjs';

/**
 * The fleet scenarios' part of bench/results.json (its `fleet` key: one entry per scenario) and
 * bench/results.md (one section between markers, one table with every scenario's rows). A run of
 * some of them (BENCH_ONLY=latency) replaces those scenarios' entries and keeps the others', then
 * renders the section again from all of them; the rest of both files is left as it is.
 *
 * A row: { label, metric, unit, gateway, baseline, baselineLabel, better: 'lower' | 'higher',
 * target?: { op: '<' | '≥', value }, note? }; `ratio` and `met` are derived here.
 */

export const fleetOrder = ['latency', 'scale', 'broadcast', 'roster', 'quorum'];

export const fleetRatioNote =
  'ratio compares the gateway with the baseline so that ≥ 1.00 means as good or better: baseline ÷ gateway ' +
  'for times, latencies and memory, gateway ÷ baseline for rates (0.25 = four times slower, or four times the memory). ' +
  'Where the baseline *is* the target (scale, roster), ratio ≥ 1.00 means the target is met. ' +
  'target/met: the issue’s target for that figure, where it has one.';

/** Adds `ratio` and `met` to a row. */
export function finishRow(row) {
  const { gateway, baseline, better, target } = row;
  const ratio =
    typeof gateway === 'number' && typeof baseline === 'number' && gateway > 0 && baseline > 0
      ? Math.round((better === 'higher' ? gateway / baseline : baseline / gateway) * 1000) / 1000
      : null;
  const met =
    target && typeof gateway === 'number'
      ? target.op === '<'
        ? gateway < target.value
        : gateway >= target.value
      : null;
  return { ...row, ratio, met };
}

export function formatValue(value, unit) {
  if (value === null || value === undefined) return '—';
  if (typeof value === 'string') return value;
  const digits = Math.abs(value) >= 100 ? 0 : Math.abs(value) >= 10 ? 1 : 2;
  return `${value.toFixed(digits)} ${unit}`;
}

/** @type {import('./report.mjs').Column[]} */
const fleetColumns = [
  ['scenario', (r) => r.label],
  ['measure', (r) => r.metric],
  ['baseline', (r) => r.baselineLabel],
  ['gateway', (r) => formatValue(r.gateway, r.unit)],
  ['baseline value', (r) => formatValue(r.baseline, r.baselineUnit ?? r.unit)],
  ['ratio', (r) => (r.ratio === null ? '—' : r.ratio.toFixed(2))],
  ['target', (r) => (r.target ? `${r.target.op} ${formatValue(r.target.value, r.unit)}` : '—')],
  ['met', (r) => (r.met === null ? '—' : r.met ? 'yes' : 'NO')],
];

/** The fleet rows as a table (Markdown or terminal text). */
export function renderFleet(rows, { markdown = false } = {}) {
  return renderTable(rows, { markdown, columns: fleetColumns, textColumns: 3 });
}

const sectionStart =
  '<!-- fleet:start (written by node bench/run.mjs: latency, scale, broadcast, roster) -->';
const sectionEnd = '<!-- fleet:end -->';

function machineLine(machine) {
  return (
    `${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB} GiB; ${machine.os}; Node ${machine.node}, ` +
    `SQLite ${machine.sqlite}; temp dir on ${machine.tempDirFilesystem}; load average (1 min) ` +
    `${machine.loadAverage1m.start} → ${machine.loadAverage1m.end}`
  );
}

function fleetSection(fleet) {
  const names = [
    ...fleetOrder.filter((name) => fleet[name]),
    ...Object.keys(fleet).filter((n) => !fleetOrder.includes(n)),
  ];
  const rows = names.flatMap((name) => fleet[name].rows);
  return [
    sectionStart,
    '## Fleet: latency at a fixed rate, 10,000 entities, broadcast to 1,000 inboxes, roster convergence, quorum vs classic',
    '',
    'Each scenario keeps its own rows: a run of one (`BENCH_ONLY=latency node bench/run.mjs`) replaces only its rows. ' +
      'When and where each ran is listed under the table.',
    '',
    renderFleet(rows, { markdown: true }),
    '',
    fleetRatioNote,
    '',
    ...names.flatMap((name) => {
      const result = fleet[name];
      return [
        `### ${name}: ${result.title}`,
        '',
        `Run ${result.date} with \`${result.command}\` (${result.durationSeconds} s); ${machineLine(result.machine)}.`,
        `Settings: ${Object.entries(result.settings)
          .map(([key, value]) => `${key}=${value}`)
          .join(', ')}.`,
        '',
        ...result.measures.map((line) => `- ${line}`),
        ...(result.check ? [`- Check: ${result.check}`] : []),
        ...(result.notes ?? []).map((line) => `- ${line}`),
        '',
      ];
    }),
    sectionEnd,
    '',
  ].join('\n');
}

/**
 * Puts fleet scenario results (`{ [name]: result }`) into results.json (`fleet`, merged by
 * scenario) and results.md (the fleet section, replaced or appended).
 */
export function writeFleetResults({ jsonFile, mdFile, results }) {
  writeResultsSection({
    jsonFile,
    mdFile,
    start: sectionStart,
    end: sectionEnd,
    update: (json) => {
      json.fleet = { ...(json.fleet ?? {}), ...results };
      return json.fleet;
    },
    render: fleetSection,
  });
}
