import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { controlSpec, inboxName } from '../../dist/broker/topology.js';
import { deleteQueues } from '../lib/broker.mjs';
import { clusterHosts, trustAll } from '../lib/cluster.mjs';
import { finishRow } from '../lib/fleetReport.mjs';
import { sqliteFloor } from '../lib/floors.mjs';
import { measure } from '../lib/measure.mjs';
import { createTeardown, spawnNode } from '../lib/processes.mjs';

/**
 * Scale (`BENCH_ONLY=scale`): 10,000 entities on one gateway. A gateway (`new Gateway` from
 * dist/ with the default config, every other entity a worker with a no-op tmux pane, the rest
 * mains) registers them through gateway.register() (16 at a time), then stops; a fresh process
 * starts it again on the same home, and we take the time from that process's start until the
 * gateway is ready (the entities and their state rehydrated from the event log; federated: every
 * inbox declared and consumed too), then its RSS. Each phase runs in a process of its own
 * (bench/lib/scaleRun.mjs), so the memory is the gateway's.
 *
 * Targets (and so the baseline column): ready < 60 s, RSS < 500 MB. Registration throughput
 * has no target; its baseline is the SQLite floor (the router rows' floor: one INSERT per
 * operation, one transaction per tick, resolved after commit) at the same concurrency.
 *
 * Then the same federated (each entity an inbox + an exclusive consumer on the shared broker,
 * signing on), with BENCH_SCALE_FEDERATED_ENTITIES entities (default 1,000, 0 to skip): the
 * gateway opens one AMQP channel per inbox consumer and RabbitMQ allows 2,047 channels per
 * connection (channel_max), so one federated gateway cannot hold 10,000 consumers as it stands.
 *
 * Settings (env): BENCH_SCALE_ENTITIES (10000), BENCH_SCALE_FEDERATED_ENTITIES (1000),
 * BENCH_SCALE_CONCURRENCY (registrations in flight, 16).
 */

const targets = { readySeconds: 60, rssMB: 500 };
const runScript = new URL('../lib/scaleRun.mjs', import.meta.url).pathname;

function intSetting(name, fallback) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name}=${raw}: expected a whole number`);
  return value;
}

/** Runs one phase in its own process; `onProgress(done, total)`, `onReady()` as it goes. */
async function phase(options, { onProgress = () => {}, onReady = () => {}, timeoutMs = 300_000 } = {}) {
  const spawnedAt = performance.now();
  let readyAt;
  const child = spawnNode(['--expose-gc', runScript, JSON.stringify(options)]);
  let carry = '';
  child.child.stderr.on('data', (chunk) => {
    const lines = (carry + chunk.toString()).split('\n');
    carry = lines.pop();
    for (const line of lines) {
      const match = /^progress (\d+) (\d+)$/.exec(line);
      if (match) onProgress(Number(match[1]), Number(match[2]));
    }
  });
  child.child.stdout.on('data', (chunk) => {
    if (readyAt === undefined && chunk.toString().includes('READY')) {
      readyAt = performance.now();
      onReady();
    }
  });
  const timer = setTimeout(() => child.stop(1_000), timeoutMs);
  const code = await child.exited;
  clearTimeout(timer);
  if (code !== 0 || !existsSync(options.resultFile)) {
    throw new Error(`scale ${options.mode} phase exited with ${code}:\n${child.output().slice(-4000)}`);
  }
  const result = JSON.parse(readFileSync(options.resultFile, 'utf8'));
  return {
    ...result,
    ...(readyAt === undefined ? {} : { spawnToReadyMs: Math.round(readyAt - spawnedAt) }),
  };
}

/** Registers `entities` on a gateway in `home`, restarts it; returns both phases' results. */
async function registerAndRestart({ ctx, home, env, entities, concurrency, gidsFile, label }) {
  const { progress, gatewayConfigFile } = ctx;
  mkdirSync(home, { recursive: true });
  const base = { home, configFile: gatewayConfigFile, env, entities, concurrency, gidsFile };
  progress.step(`scale: register ${entities} entities (${label})`, entities);
  const registered = await phase(
    { ...base, mode: 'register', resultFile: join(home, 'register.json') },
    { onProgress: (done) => progress.update(done) },
  );
  console.error(
    `scale (${label}): registered ${entities} entities at ${registered.registration.msgsPerSec}/s ` +
      `(p50 ${registered.registration.p50Ms} ms, p99 ${registered.registration.p99Ms} ms); ` +
      `RSS ${registered.memoryAfterRegistration.rssMB} MB`,
  );
  progress.step(`scale: restart with ${entities} entities (${label})`);
  const restarted = await phase({ ...base, mode: 'restart', resultFile: join(home, 'restart.json') });
  if (restarted.entities !== entities) {
    throw new Error(
      `scale (${label}): the restarted gateway has ${restarted.entities} entities, not ${entities}`,
    );
  }
  console.error(
    `scale (${label}): restart → ready ${restarted.spawnToReadyMs} ms (gateway.start ${restarted.startMs} ms), ` +
      `RSS ${restarted.memoryAtReady.rssMB} MB at ready, ${restarted.memorySettled.rssMB} MB 2 s later`,
  );
  return { registered, restarted };
}

function rowsFor(label, { registered, restarted }, floor) {
  const readySeconds = Math.round(restarted.spawnToReadyMs / 10) / 100;
  const rss = Math.max(restarted.memoryAtReady.rssMB, restarted.memorySettled.rssMB);
  return [
    {
      metric: 'registration rate (16 in flight)',
      unit: 'entities/s',
      gateway: registered.registration.msgsPerSec,
      baseline: floor.msgsPerSec,
      baselineUnit: 'rows/s',
      baselineLabel: 'sqlite floor, 16 in flight',
      better: 'higher',
    },
    {
      metric: 'restart → ready (rehydrate all)',
      unit: 's',
      gateway: readySeconds,
      baseline: targets.readySeconds,
      baselineLabel: 'target',
      better: 'lower',
      target: { op: '<', value: targets.readySeconds },
    },
    {
      metric: 'RSS after ready',
      unit: 'MB',
      gateway: rss,
      baseline: targets.rssMB,
      baselineLabel: 'target',
      better: 'lower',
      target: { op: '<', value: targets.rssMB },
    },
  ].map((row) => finishRow({ label, ...row }));
}

export const scaleScenario = {
  name: 'scale',
  title: '10,000 entities on one gateway: registration, restart to ready, memory',
  steps: 5,
  timeoutMs: 240_000,
  async run(ctx) {
    const settings = {
      entities: intSetting('BENCH_SCALE_ENTITIES', 10_000),
      federatedEntities: intSetting('BENCH_SCALE_FEDERATED_ENTITIES', 1_000),
      concurrency: Math.max(1, intSetting('BENCH_SCALE_CONCURRENCY', 16)),
    };
    const { dir, progress, brokerUri } = ctx;
    const rows = [];
    const raw = {};

    progress.step(`scale: sqlite floor, ${settings.entities} rows`, settings.entities);
    const floorTarget = await sqliteFloor.open({ ...ctx, name: 'scale' });
    let floor;
    try {
      floor = await measure({
        count: settings.entities,
        concurrency: settings.concurrency,
        op: floorTarget.op,
      });
    } finally {
      await floorTarget.close();
    }

    const singleHome = join(dir, 'scale', 'single');
    raw.single = await registerAndRestart({
      ctx,
      home: singleHome,
      env: { BRIDGE_HOST_ID: 'bench-scale' },
      entities: settings.entities,
      concurrency: settings.concurrency,
      label: 'single host',
    });
    rows.push(
      ...rowsFor(
        `scale: ${settings.entities} entities, single host (in process, no-op panes)`,
        raw.single,
        floor,
      ),
    );
    rmSync(singleHome, { recursive: true, force: true });

    if (settings.federatedEntities > 0) {
      const [host] = clusterHosts('scale', 1);
      const home = join(dir, 'scale', host);
      mkdirSync(home, { recursive: true });
      trustAll([{ host, home }]);
      const gidsFile = join(home, 'gids.txt');
      const teardown = createTeardown();
      teardown.add(() => {
        const gids = existsSync(gidsFile) ? readFileSync(gidsFile, 'utf8').split('\n').filter(Boolean) : [];
        return deleteQueues(brokerUri, [controlSpec(host).name, ...gids.map((gid) => inboxName(gid))]);
      });
      try {
        raw.federated = await registerAndRestart({
          ctx,
          home,
          env: { BRIDGE_HOST_ID: host, BRIDGE_BROKER_URI: brokerUri },
          entities: settings.federatedEntities,
          concurrency: settings.concurrency,
          gidsFile,
          label: 'federated',
        });
      } finally {
        await teardown.run();
      }
      rows.push(
        ...rowsFor(
          `scale: ${settings.federatedEntities} entities, federated (inbox + consumer each)`,
          raw.federated,
          floor,
        ),
      );
    }

    const describe = (name, { registered, restarted }) =>
      `${name}: registration p50 ${registered.registration.p50Ms} ms, p99 ${registered.registration.p99Ms} ms ` +
      `(RSS ${registered.memoryAfterRegistration.rssMB} MB after registering); restart: process start → ready ` +
      `${restarted.spawnToReadyMs} ms as seen by the parent, of which module loading ${restarted.importMs} ms and ` +
      `gateway.start() ${restarted.startMs} ms; RSS ${restarted.memoryAtReady.rssMB} MB at ready ` +
      `(heap ${restarted.memoryAtReady.heapUsedMB} MB), ${restarted.memorySettled.rssMB} MB 2 s later, ` +
      (restarted.memoryAfterGc
        ? `${restarted.memoryAfterGc.rssMB} MB after a full GC then (heap ${restarted.memoryAfterGc.heapUsedMB} MB live), `
        : '') +
      `maxRSS ${restarted.maxRssMB} MB; ${restarted.workers} workers rehydrated with their (no-op) panes.`;
    return {
      settings: { ...settings, targetReadySeconds: targets.readySeconds, targetRssMB: targets.rssMB },
      rows,
      measures: [
        'Gateway: `new Gateway` from dist/ with the default config (WAL, synchronous FULL) in a process of its own (bench/lib/scaleRun.mjs); entities registered through gateway.register(), every other one a worker with a no-op tmux pane, the rest mains; then stopped, and started again in a fresh process on the same home.',
        'restart → ready: from spawning that process until gateway.start() has resolved (every entity rehydrated from the event log; federated: every inbox declared, bound and consumed, presence announced), module loading included. RSS: the larger of the resident set at ready and 2 s later.',
        'Registration rate baseline: the SQLite floor of the router rows (better-sqlite3, same pragmas, one INSERT per operation, one transaction per tick, each resolved after its commit) at the same concurrency: the durable write every registration needs, and nothing else.',
        'Federated: one gateway on the shared broker (signing on), each entity an inbox (`agent.<gid>.inbox`) with an exclusive consumer on a channel of its own; every queue is deleted afterwards.',
      ],
      check: `the restarted gateways had every entity back (${settings.entities}${settings.federatedEntities > 0 ? ` and ${settings.federatedEntities}` : ''})`,
      notes: [
        describe('single host', raw.single),
        ...(raw.federated ? [describe('federated', raw.federated)] : []),
        'Federated 10,000 on one gateway is not measured: the gateway opens one AMQP channel per inbox consumer and RabbitMQ caps a connection at 2,047 channels (channel_max), so registering more than about 2,045 entities on one federated gateway fails (amqplib: “No channels left to allocate”; seen with BENCH_SCALE_FEDERATED_ENTITIES=2100). Every registration also announces a presence snapshot of all local entities, so registering n entities sends O(n²) presence bytes.',
      ],
      raw,
    };
  },
};
