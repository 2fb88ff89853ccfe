// One phase of the scale scenario (bench/scenarios/scale.mjs) in a process of its own, so its
// memory figures are the gateway's: `register` starts a gateway (new Gateway from dist/, no-op
// panes) and registers `entities` entities, then stops it; `restart` starts it again on the same
// home (rehydrating them), prints READY once it is ready, samples its memory, and stops it.
// Usage: node bench/lib/scaleRun.mjs '<options JSON>'; the result is written to options.resultFile.
// Progress lines ("progress <done> <total>") go to stderr.
import { appendFileSync, writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { startGateway } from '../scenarios/router.mjs';
import { measure } from './measure.mjs';

const importedMs = performance.now();
const options = JSON.parse(process.argv[2]);
const { mode, home, configFile, env, entities, concurrency, resultFile, gidsFile } = options;

const mb = (bytes) => Math.round((bytes / 2 ** 20) * 10) / 10;
const memory = () => {
  const usage = process.memoryUsage();
  return { rssMB: mb(usage.rss), heapUsedMB: mb(usage.heapUsed), externalMB: mb(usage.external) };
};

/**
 * Federated: the AMQP connections, channels and inbox consumers the gateway's broker actor holds
 * (what `agentbridge status` shows as broker.usage), read through the accessor the tests use;
 * gateway.status() would also ask the broker for every inbox's depth. Null single-host.
 */
const brokerUsage = (gateway) => gateway.federation?.broker.usage() ?? null;

/**
 * Every other entity a worker with a (no-op) tmux pane, the rest mains.
 * @param {number} i
 * @returns {import('#bridge/gateway/Registrations').RegisterRequest}
 */
function request(i) {
  return i % 2 === 1
    ? { kind: 'worker', name: `w${i}`, pane: { type: 'tmux', target: `%${i}` } }
    : { kind: 'main', name: `m${i}` };
}

async function register() {
  const startedAt = performance.now();
  const started = await startGateway({ home, configFile, env });
  const startMs = performance.now() - startedAt;
  let done = 0;
  const result = await measure({
    count: entities,
    concurrency,
    op: async (i) => {
      const registration = await started.gateway.services.registrations.register(request(i));
      if (gidsFile) appendFileSync(gidsFile, `${registration.gid}\n`);
      done++;
      if (done % 100 === 0 || done === entities) process.stderr.write(`progress ${done} ${entities}\n`);
    },
  });
  const afterRegistration = memory();
  const usage = brokerUsage(started.gateway);
  const stopAt = performance.now();
  await started.stop();
  return {
    mode,
    startMs: Math.round(startMs),
    registration: result,
    memoryAfterRegistration: afterRegistration,
    usageAfterRegistration: usage,
    stopMs: Math.round(performance.now() - stopAt),
  };
}

async function restart() {
  const startAt = performance.now();
  const started = await startGateway({ home, configFile, env });
  const readyAt = performance.now();
  process.stdout.write('READY\n');
  const atReady = memory();
  const usageAtReady = brokerUsage(started.gateway);
  const local = started.gateway.services.status
    .roster()
    .filter((entry) => entry.host === started.gateway.host);
  const workers = local.filter((entry) => entry.kind === 'worker').length;
  // A moment later (timers, the first heartbeat): what it settles at while idle.
  await sleep(2_000);
  const settled = memory();
  const usageSettled = brokerUsage(started.gateway);
  // For the record, not the target: what is live (run with --expose-gc).
  globalThis.gc?.();
  const afterGc = memory();
  const stopAt = performance.now();
  await started.stop();
  return {
    mode,
    importMs: Math.round(importedMs),
    startMs: Math.round(readyAt - startAt),
    processToReadyMs: Math.round(readyAt),
    entities: local.length,
    workers,
    memoryAtReady: atReady,
    memorySettled: settled,
    memoryAfterGc: globalThis.gc ? afterGc : null,
    usageAtReady,
    usageSettled,
    maxRssMB: mb(process.resourceUsage().maxRSS * 1024),
    stopMs: Math.round(performance.now() - stopAt),
  };
}

const run = { register, restart }[mode];
if (!run) throw new Error(`unknown mode ${mode}: expected register or restart`);
const result = await run();
writeFileSync(resultFile, JSON.stringify(result));
process.exit(0);
