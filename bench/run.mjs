// Messaging benchmark: msgs/s and p50/p99 latency through (a) the internal router and (b) the
// MCP interface on one host, and (c) across two gateways federated through RabbitMQ; each beside
// baselines run in the same process and temp dir: the SQLite durability floor and, for MCP, the
// HTTP transport floor; for cross-host, raw amqplib with the same semantics on the same broker.
// (d) The cost of signing: the admin-socket and in-process cross-host scenarios with
// security.signing required, beside the same scenario with signing off as the baseline (a target
// may carry `config`, merged over BENCH_GATEWAY_CONFIG into a config file of its own), and the
// node:crypto Ed25519 sign and verify primitives on a 600-byte envelope.
// Run: `npm run bench`.
// Settings (env): BENCH_ROUTER_MESSAGES, BENCH_ROUTER_CONCURRENCY, BENCH_MCP_CALLS,
// BENCH_MCP_CLIENTS, BENCH_CROSSHOST_MESSAGES, BENCH_CROSSHOST_CONCURRENCY (the signing rows
// use these too), BENCH_CROSSHOST_DRAIN_IDLE_MS, BENCH_BROKER_URI, BENCH_DELIVERY_TIMEOUT_MS,
// BENCH_WARMUP, BENCH_TEXT_BYTES, BENCH_SIGNING_OPS (signs and verifies per primitive row),
// BENCH_ONLY (router|mcp|crosshost|signing, comma-separated), BENCH_DIR (parent of the temp dir),
// BENCH_KEEP=1 (keep it), BENCH_CPU_PROF=DIR (CPU-profile the daemons), BENCH_GATEWAY_CONFIG
// (config JSON for every gateway, e.g. '{"store":{"synchronous":"NORMAL"}}'; the floors copy it
// too), BENCH_TIMEOUT_MS (whole run).
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
  cpuDifference,
  loadAverage,
  machineInfo,
  ratioNote,
  renderPrimitives,
  renderTable,
  writeResults,
} from './lib/report.mjs';
import { crosshostScenarios } from './scenarios/crosshost.mjs';
import { mcpScenario } from './scenarios/mcp.mjs';
import { routerScenarios } from './scenarios/router.mjs';
import { signingPrimitives, signingScenarios } from './scenarios/signing.mjs';

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
  signingOps: intEnv('BENCH_SIGNING_OPS', 5000),
  only: process.env.BENCH_ONLY || 'router,mcp,crosshost,signing',
};
const allScenarios = ['router', 'mcp', 'crosshost', 'signing'];
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

/** Plain objects merged key by key (`over` wins); anything else is replaced. */
function mergeConfig(base, over) {
  const isObject = (value) => typeof value === 'object' && value !== null && !Array.isArray(value);
  if (!isObject(base) || !isObject(over)) return over;
  const merged = { ...base };
  for (const [key, value] of Object.entries(over)) merged[key] = mergeConfig(base[key], value);
  return merged;
}

/**
 * The gateways' config: BENCH_GATEWAY_CONFIG with `overrides` merged over it, written to a file
 * in the temp dir (`gatewayConfigFile`, undefined when there is nothing to write: the defaults),
 * and loaded as a gateway would load it (`gatewayConfig`).
 */
function gatewayConfigFor(name, overrides) {
  const fromEnv = process.env.BENCH_GATEWAY_CONFIG ? JSON.parse(process.env.BENCH_GATEWAY_CONFIG) : undefined;
  const wanted = overrides ? mergeConfig(fromEnv ?? {}, overrides) : fromEnv;
  const gatewayConfigFile = wanted ? join(dir, `${name}.json`) : undefined;
  if (gatewayConfigFile) writeFileSync(gatewayConfigFile, JSON.stringify(wanted));
  const gatewayConfig = loadConfig({ file: gatewayConfigFile, env: { BRIDGE_HOME: dir } }).config;
  return { gatewayConfigFile, gatewayConfig };
}

/**
 * Opens a target (scenario or floor), drives it through `measure`, checks it, closes it. A
 * target with `config` runs with that merged over the gateways' config.
 */
async function runTarget(target, baseCtx) {
  const ctx = target.config
    ? { ...baseCtx, ...gatewayConfigFor(`gateway-config-${baseCtx.name}`, target.config) }
    : baseCtx;
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
  const { gatewayConfigFile, gatewayConfig } = gatewayConfigFor('gateway-config');
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
    ...(wanted.includes('signing')
      ? signingScenarios({
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
        baselineId: floor.id,
        baselineMeasures: floor.measures,
        ratio: Math.round((gateway.msgsPerSec / result.msgsPerSec) * 1000) / 1000,
        check: gateway.check ?? 'none',
        gateway,
        floor: result,
        ...cpuDifference(gateway, result),
      };
      rows.push(row);
      console.error(
        `${row.label} vs ${row.baseline}: ${gateway.msgsPerSec} vs ${result.msgsPerSec} msg/s ` +
          `(ratio ${row.ratio.toFixed(2)}), p50 ${gateway.p50Ms} ms, p99 ${gateway.p99Ms} ms` +
          (gateway.cpuUsPerMsgOf ? `; cpu µs/msg ${cpuBreakdown(gateway)} vs ${cpuBreakdown(result)}` : '') +
          `; cpu Δ ${row.cpuDeltaUsPerMsg} µs/msg` +
          (row.cpuDeltaUsPerMsgOf ? ` (${cpuBreakdown({ cpuUsPerMsgOf: row.cpuDeltaUsPerMsgOf })})` : ''),
      );
    }
  }

  const primitives = wanted.includes('signing')
    ? await signingPrimitives({ count: settings.signingOps, warmup: settings.warmup })
    : [];
  for (const row of primitives) {
    console.error(`${row.label} (${row.bytes} bytes): ${row.result.msgsPerSec} ops/s, ${row.usPerOp} µs/op`);
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
      ...(wanted.includes('crosshost') || wanted.includes('signing')
        ? {
            broker: brokerUri.replace(/\/\/([^:@/]+):[^@/]+@/, '//$1:***@'),
            prefetch: gatewayConfig.broker.prefetch,
          }
        : {}),
    },
    ratioDefinition: ratioNote,
    rows,
    ...(primitives.length > 0 ? { primitives } : {}),
  };
  console.log(`\n${renderTable(rows)}\n\n${ratioNote}`);
  if (primitives.length > 0) console.log(`\n${renderPrimitives(primitives)}`);
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
