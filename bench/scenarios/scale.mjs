import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import BetterSqlite3 from 'better-sqlite3';
import { controlSpec, inboxLockName, inboxName } from '#bridge/federation/topology';
import { deleteQueues } from '../lib/broker.mjs';
import { clusterHosts, trustAll } from '../lib/cluster.mjs';
import { finishRow } from '../lib/fleetReport.mjs';
import { sqliteFloor } from '../lib/floors.mjs';
import { measure } from '../lib/measure.mjs';
import { createTeardown, spawnNode } from '../lib/processes.mjs';
import { intSetting } from '../lib/settings.mjs';

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
 * Then the same federated, on the shared broker (each entity an inbox with a consumer, signing
 * on), with BENCH_SCALE_FEDERATED_ENTITIES entities (default 10,000 too, 0 to skip). Inbox
 * consumers share channels and channels a small pool of connections (src/federation/BrokerConsumers.ts,
 * ConnectionPool.ts), so RabbitMQ's channel_max (2,047 a connection) no longer caps the entities of
 * one gateway; the federated rows add the connections and channels the gateway's broker actor
 * holds at ready (its `usage()`, as `agentbridge status` shows it), beside what one channel per
 * consumer would take. Every queue it declares (inboxes, lock queues, its control queue) is
 * deleted afterwards, also when the run fails: the gids come from the phases' reports and from
 * the gateway's own entities table, so one registered but not reported is deleted too.
 *
 * Settings (env): BENCH_SCALE_ENTITIES (10000), BENCH_SCALE_FEDERATED_ENTITIES (10000),
 * BENCH_SCALE_CONCURRENCY (registrations in flight, 16).
 */

const targets = { readySeconds: 60, rssMB: 500 };
/** RabbitMQ's default channel_max: channels a connection may open. */
const channelMax = 2_047;
const runScript = new URL('../lib/scaleRun.mjs', import.meta.url).pathname;

/**
 * Runs one phase in its own process; `onProgress(done, total)`, `onReady()` as it goes. With a
 * `teardown`, the process is stopped first when that runs (a timeout, a signal), so it is not
 * still declaring queues while the teardown deletes them.
 * @param {{ mode: string, resultFile: string, [key: string]: unknown }} options
 * @param {{ onProgress?: (done: number, total: number) => void, onReady?: () => void, timeoutMs?: number, teardown?: import('../lib/processes.mjs').Teardown }} [callbacks]
 */
async function phase(
  options,
  { onProgress = () => {}, onReady = () => {}, timeoutMs = 600_000, teardown } = {},
) {
  const spawnedAt = performance.now();
  let readyAt;
  const child = spawnNode(['--expose-gc', runScript, JSON.stringify(options)]);
  teardown?.add(() => child.stop(5_000));
  let carry = '';
  child.child.stderr.on('data', (chunk) => {
    const lines = (carry + chunk.toString()).split('\n');
    carry = /** @type {string} */ (lines.pop()); // split returns at least one element
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

/**
 * Registers `entities` on a gateway in `home`, restarts it; returns both phases' results.
 * @param {{ ctx: { progress: import('../lib/progress.mjs').Progress, gatewayConfigFile: string }, home: string, env: Record<string, string>, entities: number, concurrency: number, gidsFile?: string, label: string, teardown?: import('../lib/processes.mjs').Teardown }} options
 */
async function registerAndRestart({ ctx, home, env, entities, concurrency, gidsFile, label, teardown }) {
  const { progress, gatewayConfigFile } = ctx;
  mkdirSync(home, { recursive: true });
  const base = { home, configFile: gatewayConfigFile, env, entities, concurrency, gidsFile };
  progress.step(`scale: register ${entities} entities (${label})`, entities);
  const registered = await phase(
    { ...base, mode: 'register', resultFile: join(home, 'register.json') },
    { onProgress: (done) => progress.update(done), teardown },
  );
  console.error(
    `scale (${label}): registered ${entities} entities at ${registered.registration.msgsPerSec}/s ` +
      `(p50 ${registered.registration.p50Ms} ms, p99 ${registered.registration.p99Ms} ms); ` +
      `RSS ${registered.memoryAfterRegistration.rssMB} MB` +
      (registered.usageAfterRegistration ? `; broker ${usageText(registered.usageAfterRegistration)}` : ''),
  );
  progress.step(`scale: restart with ${entities} entities (${label})`);
  const restarted = await phase(
    { ...base, mode: 'restart', resultFile: join(home, 'restart.json') },
    { teardown },
  );
  if (restarted.entities !== entities) {
    throw new Error(
      `scale (${label}): the restarted gateway has ${restarted.entities} entities, not ${entities}`,
    );
  }
  console.error(
    `scale (${label}): restart → ready ${restarted.spawnToReadyMs} ms (gateway.start ${restarted.startMs} ms), ` +
      `RSS ${restarted.memoryAtReady.rssMB} MB at ready, ${restarted.memorySettled.rssMB} MB 2 s later` +
      (restarted.usageAtReady ? `; broker ${usageText(restarted.usageAtReady)} at ready` : ''),
  );
  // Ready means every inbox consumed (Gateway.start): the broker actor should say so.
  if (restarted.usageAtReady && restarted.usageAtReady.consumers < entities) {
    throw new Error(
      `scale (${label}): the restarted gateway was ready with ${restarted.usageAtReady.consumers} ` +
        `broker consumers for ${entities} inboxes`,
    );
  }
  return { registered, restarted };
}

const usageText = ({ consumers, channels, connections }) =>
  `${consumers} consumers on ${channels} channels, ${connections} connection${connections === 1 ? '' : 's'}`;

/**
 * The gids a federated gateway in `home` registered, as the phases reported them and as its
 * entities table has them (a registration cut short may be in one and not the other).
 */
function registeredGids(home, gidsFile) {
  const gids = new Set(
    existsSync(gidsFile) ? readFileSync(gidsFile, 'utf8').split('\n').filter(Boolean) : [],
  );
  const storeFile = join(home, 'events.db');
  if (existsSync(storeFile)) {
    const db = new BetterSqlite3(storeFile, { readonly: true, fileMustExist: true });
    try {
      const rows = /** @type {Array<{ gid: string }>} */ (db.prepare('SELECT gid FROM entities').all());
      for (const { gid } of rows) gids.add(gid);
    } catch (err) {
      console.error(
        `scale: could not read the gids in ${storeFile} (${err.message}); deleting the reported ones`,
      );
    } finally {
      db.close();
    }
  }
  return [...gids];
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
    ...(restarted.usageAtReady ? usageRows(restarted.usageAtReady) : []),
  ].map((row) => finishRow({ label, ...row }));
}

/**
 * What the federated gateway holds on the broker at ready, beside what one channel per inbox
 * consumer (the gateway before consumers shared channels) would need for the same consumers.
 */
function usageRows({ connections, channels, consumers }) {
  return [
    {
      metric: `AMQP connections used (${consumers} consumers)`,
      unit: '',
      gateway: connections,
      baseline: Math.ceil(consumers / channelMax),
      baselineLabel: `one channel per consumer: ⌈consumers ÷ ${channelMax.toLocaleString('en')} (channel_max)⌉`,
      better: 'lower',
    },
    {
      metric: `AMQP channels used (${consumers} consumers)`,
      unit: '',
      gateway: channels,
      baseline: consumers,
      baselineLabel: 'one channel per consumer',
      better: 'lower',
    },
  ];
}

export const scaleScenario = {
  name: 'scale',
  title: '10,000 entities on one gateway: registration, restart to ready, memory',
  steps: 5,
  timeoutMs: 600_000,
  async run(ctx) {
    const settings = {
      entities: intSetting('BENCH_SCALE_ENTITIES', 10_000),
      federatedEntities: intSetting('BENCH_SCALE_FEDERATED_ENTITIES', 10_000),
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
      teardown.add(async () => {
        const gids = registeredGids(home, gidsFile);
        const started = performance.now();
        // Lock queues are quorum mode's; deleting one that was never declared is a no-op.
        await deleteQueues(brokerUri, [
          controlSpec(host).name,
          ...gids.flatMap((gid) => [inboxName(gid), inboxLockName(gid)]),
        ]);
        console.error(
          `scale (federated): deleted ${2 * gids.length + 1} broker queues in ${Math.round(performance.now() - started)} ms`,
        );
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
          teardown,
        });
      } finally {
        await teardown.run();
      }
      rows.push(
        ...rowsFor(
          `scale: ${settings.federatedEntities} entities, federated (inbox + consumer each, shared channels)`,
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
      `maxRSS ${restarted.maxRssMB} MB; ${restarted.workers} workers rehydrated with their (no-op) panes` +
      (restarted.usageAtReady
        ? `; broker: ${usageText(registered.usageAfterRegistration)} after registering, ` +
          `${usageText(restarted.usageAtReady)} at ready, ${usageText(restarted.usageSettled)} 2 s later.`
        : '.');
    return {
      settings: { ...settings, targetReadySeconds: targets.readySeconds, targetRssMB: targets.rssMB },
      rows,
      measures: [
        'Gateway: `new Gateway` from dist/ with the default config (WAL, synchronous FULL) in a process of its own (bench/lib/scaleRun.mjs); entities registered through gateway.register(), every other one a worker with a no-op tmux pane, the rest mains; then stopped, and started again in a fresh process on the same home.',
        'restart → ready: from spawning that process until gateway.start() has resolved (every entity rehydrated from the event log; federated: every inbox declared, bound and consumed, presence announced), module loading included. RSS: the larger of the resident set at ready and 2 s later.',
        'Registration rate baseline: the SQLite floor of the router rows (better-sqlite3, same pragmas, one INSERT per operation, one transaction per tick, each resolved after its commit) at the same concurrency: the durable write every registration needs, and nothing else.',
        "Federated: one gateway on the shared broker (signing on), each entity an inbox (`agent.<gid>.inbox`) with a consumer; inbox consumers share channels (up to 100 a channel) and channels a few connections (up to 100 a connection), the control and roster consumers keep a channel each. Connections and channels: the gateway broker actor's `usage()` at ready (what `agentbridge status` shows), beside what one channel per consumer would take (RabbitMQ allows 2,047 channels a connection). Every queue is deleted afterwards (in parallel, 16 channels).",
      ],
      check: `the restarted gateways had every entity back (${settings.entities}${settings.federatedEntities > 0 ? ` and ${settings.federatedEntities}` : ''})`,
      notes: [
        describe('single host', raw.single),
        ...(raw.federated ? [describe('federated', raw.federated)] : []),
        'Registrations on a federated gateway announce the presence snapshot of all local entities coalesced (one snapshot per 50 ms, src/federation/PresenceExchange.ts), not one each.',
      ],
      raw,
    };
  },
};
