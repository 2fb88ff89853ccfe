// Messaging benchmark: msgs/s and p50/p99 latency through (a) the internal router and (b) the
// MCP interface on one host, and (c) across two gateways federated through RabbitMQ; each beside
// baselines run in the same process and temp dir: the SQLite durability floor and, for MCP, the
// HTTP transport floor; for cross-host, raw amqplib with the same semantics on the same broker.
// (d) The cost of signing: the admin-socket and in-process cross-host scenarios with
// security.signing required, beside the same scenario with signing off as the baseline (a target
// may carry `config`, merged over BENCH_GATEWAY_CONFIG into a config file of its own), and the
// node:crypto Ed25519 sign and verify primitives on a 600-byte envelope, and a seal and an open of
// it in a session. (d') The cost of sealing: the same two scenarios with security.encryption
// required beside off (signing on in both).
// (e) Replay throughput: `agentbridge replay`'s merge of three hosts' generated logs (at least
// BENCH_REPLAY_EVENTS events, cached in bench/.cache/), with and without the re-run check,
// from the SQLite logs and from exports of them, beside a raw read-and-merge floor; each run in
// a process of its own for its memory figures. It writes its own section of bench/results.md
// (and the `replay` key of results.json), also when run alone (BENCH_ONLY=replay).
// (f) The fleet scenarios (bench/scenarios/fleet.mjs): `latency` (cross-host at a fixed rate,
// p50/p95/p99 vs raw amqplib), `scale` (10,000 entities single-host and 10,000 on one federated
// gateway: registration, restart to ready, RSS; federated, the AMQP connections and channels used),
// `broadcast` (one broadcast to 1,000 inboxes on 3 gateways vs an amqplib fan-out), `roster`
// (convergence across 5 daemons, join and expiry, vs the heartbeat/TTL bound), `quorum` (on a
// 3-node cluster of its own started with tools/cluster.mjs: two in-process gateways A → B drained
// with quorum inboxes beside classic ones, throughput and p50/p99). Each writes its rows into the
// fleet section of bench/results.md (and `fleet` in results.json), keeping the others'; their own
// settings (BENCH_LATENCY_*, BENCH_SCALE_*, BENCH_BROADCAST_*, BENCH_ROSTER_*, BENCH_QUORUM_*) are
// documented in their files.
// (g) The cost of verified submission (R-DL6, bench/scenarios/submission.mjs): latency to typed and
// to submitted through the real tmux injector into a `cat` pane and into Claude Code at its prompt
// (offline, fake model API), beside the old unverified paste + Enter run alternately; ratios of
// p50 and p99. It writes its own section of bench/results.md (and the `submission` key of
// results.json), also when run alone (BENCH_ONLY=submission); its settings
// (BENCH_SUBMISSION_MESSAGES, BENCH_SUBMISSION_CLAUDE, BENCH_SUBMISSION_GATEWAY, ...) are documented
// in its file. A progress bar on stderr shows the step (BENCH_PROGRESS=0: off).
// (h) The operator console under load (bench/scenarios/console.mjs): a gateway with 1,000 entities
// and 10,000 recent deliveries beside an empty one, both `agentbridge start` daemons side by side; in
// headless Chromium, first contentful paint, time until the roster is complete, and the latency of
// a new entity's row and of a send from the page, with the page's main-thread time, DOM, heap, and
// the page's and daemon's cost idle and while the roster changes; ratios empty ÷ loaded. It writes its own section of bench/results.md (and the
// `console` key of results.json), also when run alone (BENCH_ONLY=console); its settings
// (BENCH_CONSOLE_ENTITIES, BENCH_CONSOLE_DELIVERIES, BENCH_CONSOLE_ROUNDS, ...) are documented in its file.
// Run: `npm run bench`.
// Settings (env): BENCH_ROUTER_MESSAGES, BENCH_ROUTER_CONCURRENCY, BENCH_MCP_CALLS,
// BENCH_MCP_CLIENTS, BENCH_CROSSHOST_MESSAGES, BENCH_CROSSHOST_CONCURRENCY (the signing rows
// use these too), BENCH_CROSSHOST_DRAIN_WAIT_MS (each drain's long-poll wait), BENCH_BROKER_URI, BENCH_DELIVERY_TIMEOUT_MS,
// BENCH_WARMUP, BENCH_TEXT_BYTES, BENCH_SIGNING_OPS (signs and verifies per primitive row),
// BENCH_REPLAY_EVENTS (at least this many events in the replay logs; default 1000000),
// BENCH_REPLAY_RUNS (runs per replay row, best kept; default 1),
// BENCH_ONLY (router|mcp|crosshost|signing|sealing|replay|latency|scale|broadcast|roster|quorum|idle|submission|
// console, comma-separated),
// BENCH_DIR (parent of the temp dir),
// BENCH_KEEP=1 (keep it), BENCH_CPU_PROF=DIR (CPU-profile the daemons), BENCH_PROFILE=1 (profile
// the latency scenario's daemons: below), BENCH_GATEWAY_CONFIG
// (config JSON for every gateway, e.g. '{"store":{"synchronous":"NORMAL"}}'; the floors copy it
// too), BENCH_TIMEOUT_MS (whole run; default 180 s, plus 420 s with the replay scenario, plus each
// fleet scenario's share, plus 300 s with the submission scenario, plus 300 s with the console one).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { loadConfig } from '#bridge/config/loadConfig';
import { setupSharedTopology } from '#bridge/federation/sharedTopology';
import { writeFleetResults } from './lib/fleetReport.mjs';
import { measure } from './lib/measure.mjs';
import { killRunningChildren, runPendingTeardowns } from './lib/processes.mjs';
import { createProgress } from './lib/progress.mjs';
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
import { intSetting } from './lib/settings.mjs';
import {
  consoleRatioNote,
  consoleScenario,
  consoleSettings,
  consoleSteps,
  renderConsole,
  runConsoleBench,
  writeConsoleResults,
} from './scenarios/console.mjs';
import { crosshostScenarios } from './scenarios/crosshost.mjs';
import { fleetNames, fleetSteps, fleetTimeoutMs, renderFleetResults, runFleet } from './scenarios/fleet.mjs';
import { mcpScenario } from './scenarios/mcp.mjs';
import { nativePathLines } from './scenarios/nativePath.mjs';
import { renderReplay, replayRatioNote, runReplayBench, writeReplayResults } from './scenarios/replay.mjs';
import { routerScenarios } from './scenarios/router.mjs';
import { sealingScenarios, signingPrimitives, signingScenarios } from './scenarios/signing.mjs';
import {
  renderSubmission,
  runSubmissionBench,
  submissionRatioNote,
  submissionScenario,
  submissionSettings,
  submissionSteps,
  writeSubmissionResults,
} from './scenarios/submission.mjs';

const benchDir = new URL('.', import.meta.url).pathname;

const settings = {
  routerMessages: intSetting('BENCH_ROUTER_MESSAGES', 5000),
  routerConcurrency: intSetting('BENCH_ROUTER_CONCURRENCY', 16),
  mcpCalls: intSetting('BENCH_MCP_CALLS', 2000),
  mcpClients: intSetting('BENCH_MCP_CLIENTS', 4),
  crosshostMessages: intSetting('BENCH_CROSSHOST_MESSAGES', 3000),
  crosshostConcurrency: intSetting('BENCH_CROSSHOST_CONCURRENCY', 8),
  crosshostDrainWaitMs: intSetting('BENCH_CROSSHOST_DRAIN_WAIT_MS', 1000, 1),
  warmup: intSetting('BENCH_WARMUP', 200),
  textBytes: intSetting('BENCH_TEXT_BYTES', 256),
  signingOps: intSetting('BENCH_SIGNING_OPS', 5000),
  replayEvents: intSetting('BENCH_REPLAY_EVENTS', 1_000_000),
  replayRuns: Math.max(1, intSetting('BENCH_REPLAY_RUNS', 1)),
  only:
    process.env.BENCH_ONLY ||
    [
      'router,mcp,crosshost,signing,sealing,replay',
      ...fleetNames,
      submissionScenario.name,
      consoleScenario.name,
    ].join(','),
};
const allScenarios = [
  'router',
  'mcp',
  'crosshost',
  'signing',
  'sealing',
  'replay',
  ...fleetNames,
  submissionScenario.name,
  consoleScenario.name,
];
const onlyParts = settings.only.split(',').map((part) => part.trim());
const replayWanted = onlyParts.includes('replay');
const submissionWanted = onlyParts.includes(submissionScenario.name);
const submission = submissionWanted ? submissionSettings() : undefined;
const consoleWanted = onlyParts.includes(consoleScenario.name);
const consoleRun = consoleWanted ? consoleSettings() : undefined;
// guest/guest only logs in over loopback (SPEC §12).
const brokerUri = process.env.BENCH_BROKER_URI || 'amqp://guest:guest@127.0.0.1:5672';
const deliveryTimeoutMs = intSetting('BENCH_DELIVERY_TIMEOUT_MS', 30_000);
const timeoutMs = intSetting(
  'BENCH_TIMEOUT_MS',
  180_000 +
    (replayWanted ? 420_000 : 0) +
    fleetTimeoutMs(settings.only) +
    (submissionWanted ? submissionScenario.timeoutMs : 0) +
    (consoleWanted ? consoleScenario.timeoutMs : 0),
);
const keep = process.env.BENCH_KEEP === '1';
// BENCH_PROFILE=1: the latency scenario's daemons run with metrics.runtime and under --cpu-prof
// (into BENCH_CPU_PROF, or bench/.profiles/<time>), and each pass reports their event-loop delay,
// GC pauses, event-log commits and CPU per message by layer over its measured span.
const profiling = process.env.BENCH_PROFILE === '1';
const cpuProfDir = process.env.BENCH_CPU_PROF
  ? resolve(process.env.BENCH_CPU_PROF)
  : profiling
    ? resolve(benchDir, '.profiles', new Date().toISOString().replace(/[:.]/g, '-'))
    : undefined;

const dir = mkdtempSync(join(process.env.BENCH_DIR || tmpdir(), 'bridge-bench-'));
const progress = createProgress();

// Whatever happens, no child process and (unless asked) no temp dir outlives the run.
process.on('exit', () => {
  progress.done();
  killRunningChildren();
  if (keep) console.error(`kept ${dir}`);
  else rmSync(dir, { recursive: true, force: true });
});
// Clean-ups that need the broker (deleting queues) cannot run in 'exit': run them first. The
// scale scenario's 20,000 queues take some 15 s to delete, a cluster some seconds to stop.
const exitAfterTeardowns = (code) => runPendingTeardowns(60_000).finally(() => process.exit(code));
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

/** What every bench gateway sets over the production defaults. */
const benchDefaults = { limits: { senderInboxShare: 1 } };

/**
 * The gateways' config: the bench defaults, BENCH_GATEWAY_CONFIG and `overrides` merged in that
 * order, written to a file in the temp dir (`gatewayConfigFile`), and loaded as a gateway would
 * load it (`gatewayConfig`).
 */
function gatewayConfigFor(name, overrides) {
  const fromEnv = process.env.BENCH_GATEWAY_CONFIG ? JSON.parse(process.env.BENCH_GATEWAY_CONFIG) : {};
  // One sender sends every message to one recipient, which holds thousands: its share of the
  // inbox (limits.senderInboxShare) would refuse most of them, so here it may fill the inbox.
  const wanted = mergeConfig(mergeConfig(benchDefaults, fromEnv), overrides ?? {});
  const gatewayConfigFile = join(dir, `${name}.json`);
  writeFileSync(gatewayConfigFile, JSON.stringify(wanted));
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
      // Counts operations as they start (no extra await in what is measured).
      op: (i, lane) => {
        progress.tick();
        return opened.op(i, lane);
      },
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
  const { gatewayConfigFile, gatewayConfig } = gatewayConfigFor(
    'gateway-config',
    profiling ? { metrics: { runtime: true } } : undefined,
  );
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
          drainWaitMs: settings.crosshostDrainWaitMs,
        })
      : []),
    ...(wanted.includes('signing')
      ? signingScenarios({
          count: settings.crosshostMessages,
          concurrency: settings.crosshostConcurrency,
          drainWaitMs: settings.crosshostDrainWaitMs,
        })
      : []),
    ...(wanted.includes('sealing')
      ? sealingScenarios({
          count: settings.crosshostMessages,
          concurrency: settings.crosshostConcurrency,
          drainWaitMs: settings.crosshostDrainWaitMs,
        })
      : []),
  ];

  progress.plan(
    scenarios.reduce((sum, scenario) => sum + scenario.baselines.length + 1, 0) +
      (wanted.includes('signing') ? 1 : 0) +
      (wanted.includes('replay') ? 1 : 0) +
      fleetSteps(wanted) +
      (submission ? submissionSteps(submission) : 0) +
      (consoleRun ? consoleSteps(consoleRun) : 0),
  );
  const rows = [];
  // What the broker's operator does once (`agentbridge broker setup`); gateways only check it.
  // Single-host scenarios need no broker, so one that is down is for them to report.
  await setupSharedTopology({ uri: brokerUri }).catch((err) =>
    process.stderr.write(`bench: shared broker topology not set up (${err.message})\n`),
  );
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
    /** @type {Array<[(typeof scenario.baselines)[number], Awaited<ReturnType<typeof runTarget>>]>} */
    const floors = [];
    for (const floor of scenario.baselines) {
      progress.step(`${scenario.label} · ${floor.label}`, settings.warmup + scenario.count);
      floors.push([floor, await runTarget(floor, { ...ctx, name: `${scenario.name}-${floor.id}` })]);
    }
    progress.step(scenario.label, settings.warmup + scenario.count);
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

  if (wanted.includes('signing')) progress.step('signing primitives');
  const primitives = wanted.includes('signing')
    ? await signingPrimitives({ count: settings.signingOps, warmup: settings.warmup })
    : [];
  for (const row of primitives) {
    console.error(`${row.label} (${row.bytes} bytes): ${row.result.msgsPerSec} ops/s, ${row.usPerOp} µs/op`);
  }

  if (wanted.includes('replay')) progress.step('replay');
  const replay = wanted.includes('replay')
    ? await runReplayBench({ events: settings.replayEvents, runs: settings.replayRuns })
    : undefined;

  const fleet = await runFleet(wanted, {
    dir,
    brokerUri,
    gatewayConfig,
    gatewayConfigFile,
    deliveryTimeoutMs,
    textBytes: settings.textBytes,
    cpuProfDir,
    profiling,
    progress,
  });
  const fleetRan = Object.keys(fleet).length > 0;

  const submitted = submission
    ? await runSubmissionBench({ dir, settings: submission, progress, configFile: gatewayConfigFile })
    : undefined;
  const consoleResults = consoleRun
    ? await runConsoleBench({ dir, settings: consoleRun, progress, configFile: gatewayConfigFile })
    : undefined;
  progress.done();

  const results = {
    date: new Date().toISOString(),
    command: commandLine(),
    durationSeconds: Math.round((performance.now() - started) / 100) / 10,
    machine: machineInfo(dir, loadAtStart),
    settings: {
      ...settings,
      synchronous,
      journal: 'WAL',
      ...(wanted.includes('crosshost') || wanted.includes('signing') || wanted.includes('sealing')
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
  if (rows.length > 0) console.log(`\n${renderTable(rows)}\n\n${ratioNote}`);
  if (primitives.length > 0) console.log(`\n${renderPrimitives(primitives)}`);
  if (replay) console.log(`\n${renderReplay(replay)}\n\n${replayRatioNote}`);
  if (fleetRan) console.log(`\n${renderFleetResults(fleet)}`);
  if (submitted) {
    console.log(`\n${renderSubmission(submitted)}\n\n${submissionRatioNote}`);
    if (submitted.native) console.log(nativePathLines(submitted.native).join('\n'));
  }
  if (consoleResults) console.log(`\n${renderConsole(consoleResults)}\n\n${consoleRatioNote}`);
  console.log(
    `${results.machine.cpu}, ${results.machine.cores} cores, node ${results.machine.node}, ` +
      `temp dir on ${results.machine.tempDirFilesystem}; load average ${loadAtStart} → ${loadAverage()}; ` +
      `${results.durationSeconds} s`,
  );
  const files = { jsonFile: join(benchDir, 'results.json'), mdFile: join(benchDir, 'results.md') };
  if (allScenarios.every((part) => wanted.includes(part))) {
    writeResults({ ...files, results });
    writeReplayResults({ ...files, results: replay });
    writeFleetResults({ ...files, results: fleet });
    writeSubmissionResults({ ...files, results: submitted });
    writeConsoleResults({ ...files, results: consoleResults });
    console.log('wrote bench/results.json and bench/results.md');
  } else if (replay || fleetRan || submitted || consoleResults) {
    // The replay, fleet, submission and console sections stand on their own: written alone, the other rows left as they were.
    if (replay) writeReplayResults({ ...files, results: replay });
    if (fleetRan) writeFleetResults({ ...files, results: fleet });
    if (submitted) writeSubmissionResults({ ...files, results: submitted });
    if (consoleResults) writeConsoleResults({ ...files, results: consoleResults });
    const sections = [
      replay ? 'replay' : '',
      fleetRan ? `fleet (${Object.keys(fleet).join(', ')})` : '',
      submitted ? 'submission' : '',
      consoleResults ? 'console' : '',
    ].filter(Boolean);
    console.log(
      `partial run (BENCH_ONLY): wrote the ${sections.join(' and ')} section${sections.length > 1 ? 's' : ''} of bench/results.md and results.json`,
    );
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
