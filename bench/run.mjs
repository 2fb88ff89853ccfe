// Same-host messaging benchmark: msgs/s and p50/p99 latency through (a) the internal router
// and (b) the MCP interface, each beside baselines run in the same process and temp dir:
// the SQLite durability floor and, for MCP, the HTTP transport floor. Run: `npm run bench`.
// Settings (env): BENCH_ROUTER_MESSAGES, BENCH_ROUTER_CONCURRENCY, BENCH_MCP_CALLS,
// BENCH_MCP_CLIENTS, BENCH_WARMUP, BENCH_TEXT_BYTES, BENCH_ONLY (router|mcp), BENCH_DIR (parent
// of the temp dir), BENCH_KEEP=1 (keep it), BENCH_CPU_PROF=DIR (CPU-profile the daemon),
// BENCH_TIMEOUT_MS (whole run).
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { loadConfig } from '../dist/config/loadConfig.js';
import { measure } from './lib/measure.mjs';
import { killRunningChildren } from './lib/processes.mjs';
import {
  commandLine,
  loadAverage,
  machineInfo,
  ratioNote,
  renderTable,
  writeResults,
} from './lib/report.mjs';
import { mcpScenario } from './scenarios/mcp.mjs';
import { routerScenarios } from './scenarios/router.mjs';

const benchDir = new URL('.', import.meta.url).pathname;

function intEnv(name, fallback) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name}=${raw}: expected a whole number`);
  return value;
}

const settings = {
  routerMessages: intEnv('BENCH_ROUTER_MESSAGES', 5000),
  routerConcurrency: intEnv('BENCH_ROUTER_CONCURRENCY', 16),
  mcpCalls: intEnv('BENCH_MCP_CALLS', 2000),
  mcpClients: intEnv('BENCH_MCP_CLIENTS', 4),
  warmup: intEnv('BENCH_WARMUP', 200),
  textBytes: intEnv('BENCH_TEXT_BYTES', 256),
  only: process.env.BENCH_ONLY || 'router,mcp',
};
const timeoutMs = intEnv('BENCH_TIMEOUT_MS', 180_000);
const keep = process.env.BENCH_KEEP === '1';
const cpuProfDir = process.env.BENCH_CPU_PROF ? resolve(process.env.BENCH_CPU_PROF) : undefined;

const dir = mkdtempSync(join(process.env.BENCH_DIR || tmpdir(), 'bridge-bench-'));

// Whatever happens, no child process and (unless asked) no temp dir outlives the run.
process.on('exit', () => {
  killRunningChildren();
  if (keep) console.error(`kept ${dir}`);
  else rmSync(dir, { recursive: true, force: true });
});
for (const signal of ['SIGINT', 'SIGTERM']) process.once(signal, () => process.exit(130));
setTimeout(() => {
  console.error(`bench: still running after ${timeoutMs} ms (BENCH_TIMEOUT_MS); giving up`);
  process.exit(1);
}, timeoutMs).unref();

/** Opens a target (scenario or floor), drives it through `measure`, checks it, closes it. */
async function runTarget(target, ctx) {
  const opened = await target.open(ctx);
  try {
    const result = await measure({
      count: ctx.count,
      concurrency: ctx.concurrency,
      warmup: settings.warmup,
      op: opened.op,
      ...(opened.cpuMs ? { cpuMs: opened.cpuMs } : {}),
    });
    const check = opened.verify ? await opened.verify() : undefined;
    return { ...result, ...(check ? { check } : {}) };
  } finally {
    await opened.close();
  }
}

async function main() {
  const started = performance.now();
  const loadAtStart = loadAverage();
  const { synchronous } = loadConfig({ env: { BRIDGE_HOME: dir } }).config.store;
  if (cpuProfDir) mkdirSync(cpuProfDir, { recursive: true });
  const wanted = settings.only.split(',').map((part) => part.trim());
  const scenarios = [
    ...(wanted.includes('router')
      ? routerScenarios({ count: settings.routerMessages, concurrency: settings.routerConcurrency })
      : []),
    ...(wanted.includes('mcp')
      ? [mcpScenario({ count: settings.mcpCalls, concurrency: settings.mcpClients })]
      : []),
  ];

  const rows = [];
  for (const scenario of scenarios) {
    const ctx = {
      dir,
      textBytes: settings.textBytes,
      synchronous,
      count: scenario.count,
      concurrency: scenario.concurrency,
      total: settings.warmup + scenario.count,
      cpuProfDir,
    };
    // Baselines first, then the gateway, back to back on the same disk and temp dir.
    const floors = [];
    for (const floor of scenario.baselines) {
      floors.push([floor, await runTarget(floor, { ...ctx, name: `${scenario.name}-${floor.id}` })]);
    }
    const gateway = await runTarget(scenario, { ...ctx, name: scenario.name });
    for (const [floor, result] of floors) {
      const row = {
        scenario: scenario.name,
        label: scenario.label,
        measures: scenario.measures,
        baseline: floor.label,
        baselineMeasures: floor.measures,
        ratio: Math.round((gateway.msgsPerSec / result.msgsPerSec) * 1000) / 1000,
        check: gateway.check ?? 'none',
        gateway,
        floor: result,
      };
      rows.push(row);
      console.error(
        `${row.label} vs ${row.baseline}: ${gateway.msgsPerSec} vs ${result.msgsPerSec} msg/s ` +
          `(ratio ${row.ratio.toFixed(2)}), p50 ${gateway.p50Ms} ms, p99 ${gateway.p99Ms} ms`,
      );
    }
  }

  const results = {
    date: new Date().toISOString(),
    command: commandLine(),
    durationSeconds: Math.round((performance.now() - started) / 100) / 10,
    machine: machineInfo(dir, loadAtStart),
    settings: { ...settings, synchronous, journal: 'WAL' },
    ratioDefinition: ratioNote,
    rows,
  };
  console.log(`\n${renderTable(rows)}\n\n${ratioNote}`);
  console.log(
    `${results.machine.cpu}, ${results.machine.cores} cores, node ${results.machine.node}, ` +
      `temp dir on ${results.machine.tempDirFilesystem}; load average ${loadAtStart} → ${loadAverage()}; ` +
      `${results.durationSeconds} s`,
  );
  if (wanted.includes('router') && wanted.includes('mcp')) {
    writeResults({ jsonFile: join(benchDir, 'results.json'), mdFile: join(benchDir, 'results.md'), results });
    console.log('wrote bench/results.json and bench/results.md');
  } else {
    console.log('partial run (BENCH_ONLY): bench/results.* left as they were');
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error('bench failed:', err);
    process.exit(1);
  },
);
