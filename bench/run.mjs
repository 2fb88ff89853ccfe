// Messaging benchmark: msgs/s and p50/p99 latency through (a) the internal router and (b) the
// MCP interface on one host, and (c) across two gateways federated through RabbitMQ; each beside
// baselines run in the same process and temp dir: the SQLite durability floor and, for MCP, the
// HTTP transport floor; for cross-host, raw amqplib with the same semantics on the same broker.
// Run: `npm run bench`.
// Settings (env): BENCH_ROUTER_MESSAGES, BENCH_ROUTER_CONCURRENCY, BENCH_MCP_CALLS,
// BENCH_MCP_CLIENTS, BENCH_CROSSHOST_MESSAGES, BENCH_CROSSHOST_CONCURRENCY,
// BENCH_CROSSHOST_DRAIN_IDLE_MS, BENCH_BROKER_URI, BENCH_DELIVERY_TIMEOUT_MS, BENCH_WARMUP,
// BENCH_TEXT_BYTES, BENCH_ONLY (router|mcp|crosshost, comma-separated), BENCH_DIR (parent of the
// temp dir), BENCH_KEEP=1 (keep it), BENCH_CPU_PROF=DIR (CPU-profile the daemons),
// BENCH_GATEWAY_CONFIG (config JSON for every gateway, e.g. '{"store":{"synchronous":"NORMAL"}}';
// the floors copy it too), BENCH_TIMEOUT_MS (whole run).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { loadConfig } from '../dist/config/loadConfig.js';
import { measure } from './lib/measure.mjs';
import { killRunningChildren, runPendingTeardowns } from './lib/processes.mjs';
import {
  commandLine,
  cpuBreakdown,
  loadAverage,
  machineInfo,
  ratioNote,
  renderTable,
  writeResults,
} from './lib/report.mjs';
import { crosshostScenarios } from './scenarios/crosshost.mjs';
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
  crosshostMessages: intEnv('BENCH_CROSSHOST_MESSAGES', 3000),
  crosshostConcurrency: intEnv('BENCH_CROSSHOST_CONCURRENCY', 8),
  crosshostDrainIdleMs: intEnv('BENCH_CROSSHOST_DRAIN_IDLE_MS', 1),
  warmup: intEnv('BENCH_WARMUP', 200),
  textBytes: intEnv('BENCH_TEXT_BYTES', 256),
  only: process.env.BENCH_ONLY || 'router,mcp,crosshost',
};
const allScenarios = ['router', 'mcp', 'crosshost'];
// guest/guest only logs in over loopback (SPEC §12).
const brokerUri = process.env.BENCH_BROKER_URI || 'amqp://guest:guest@127.0.0.1:5672';
const deliveryTimeoutMs = intEnv('BENCH_DELIVERY_TIMEOUT_MS', 30_000);
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
// Clean-ups that need the broker (deleting queues) cannot run in 'exit': run them first.
const exitAfterTeardowns = (code) => runPendingTeardowns(15_000).finally(() => process.exit(code));
for (const signal of ['SIGINT', 'SIGTERM']) process.once(signal, () => exitAfterTeardowns(130));
setTimeout(() => {
  console.error(`bench: still running after ${timeoutMs} ms (BENCH_TIMEOUT_MS); giving up`);
  exitAfterTeardowns(1);
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
      ...(opened.sideCpuMs ? { sideCpuMs: opened.sideCpuMs } : {}),
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
  // The gateways' config (the defaults unless BENCH_GATEWAY_CONFIG), which the baselines copy
  // (durability, prefetch, inbox cap, TTL).
  const gatewayConfigFile = process.env.BENCH_GATEWAY_CONFIG ? join(dir, 'gateway-config.json') : undefined;
  if (gatewayConfigFile) writeFileSync(gatewayConfigFile, process.env.BENCH_GATEWAY_CONFIG);
  const gatewayConfig = loadConfig({ file: gatewayConfigFile, env: { BRIDGE_HOME: dir } }).config;
  const { synchronous } = gatewayConfig.store;
  if (cpuProfDir) mkdirSync(cpuProfDir, { recursive: true });
  const wanted = settings.only.split(',').map((part) => part.trim());
  const unknown = wanted.filter((part) => !allScenarios.includes(part));
  if (unknown.length > 0)
    throw new Error(`BENCH_ONLY=${settings.only}: expected some of ${allScenarios.join(',')}`);
  const scenarios = [
    ...(wanted.includes('router')
      ? routerScenarios({ count: settings.routerMessages, concurrency: settings.routerConcurrency })
      : []),
    ...(wanted.includes('mcp')
      ? [mcpScenario({ count: settings.mcpCalls, concurrency: settings.mcpClients })]
      : []),
    ...(wanted.includes('crosshost')
      ? crosshostScenarios({
          count: settings.crosshostMessages,
          concurrency: settings.crosshostConcurrency,
          drainIdleMs: settings.crosshostDrainIdleMs,
        })
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
      gatewayConfig,
      gatewayConfigFile,
      brokerUri,
      deliveryTimeoutMs,
    };
    // Baselines first, then the gateway, back to back on the same disk and temp dir.
    const floors = [];
    for (const floor of scenario.baselines) {
      floors.push([floor, await runTarget(floor, { ...ctx, name: `${scenario.name}-${floor.id}` })]);
    }
    const gateway = await runTarget(scenario, { ...ctx, name: scenario.name });
    console.error(`${scenario.label}: check: ${gateway.check ?? 'none'}`);
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
          `(ratio ${row.ratio.toFixed(2)}), p50 ${gateway.p50Ms} ms, p99 ${gateway.p99Ms} ms` +
          (gateway.cpuUsPerMsgOf ? `; cpu µs/msg ${cpuBreakdown(gateway)} vs ${cpuBreakdown(result)}` : ''),
      );
    }
  }

  const results = {
    date: new Date().toISOString(),
    command: commandLine(),
    durationSeconds: Math.round((performance.now() - started) / 100) / 10,
    machine: machineInfo(dir, loadAtStart),
    settings: {
      ...settings,
      synchronous,
      journal: 'WAL',
      ...(wanted.includes('crosshost')
        ? {
            broker: brokerUri.replace(/\/\/([^:@/]+):[^@/]+@/, '//$1:***@'),
            prefetch: gatewayConfig.broker.prefetch,
          }
        : {}),
    },
    ratioDefinition: ratioNote,
    rows,
  };
  console.log(`\n${renderTable(rows)}\n\n${ratioNote}`);
  console.log(
    `${results.machine.cpu}, ${results.machine.cores} cores, node ${results.machine.node}, ` +
      `temp dir on ${results.machine.tempDirFilesystem}; load average ${loadAtStart} → ${loadAverage()}; ` +
      `${results.durationSeconds} s`,
  );
  if (allScenarios.every((part) => wanted.includes(part))) {
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
