import { readdirSync, readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { deleteQueues } from '../lib/broker.mjs';
import { clusterHosts, inParallel, startDaemons } from '../lib/cluster.mjs';
import { finishRow } from '../lib/fleetReport.mjs';
import { createTeardown, spawnNode } from '../lib/processes.mjs';
import { intSetting } from '../lib/settings.mjs';

/**
 * Idle cost (`BENCH_ONLY=idle`): one federated `agentbridge start` daemon (its own process, the
 * shared broker, signing on) with 0, 10 and 1,000 registered mains and nothing sent, left alone
 * for BENCH_IDLE_SECONDS (30) after BENCH_IDLE_SETTLE_SECONDS (30) of settling: its CPU (% of one
 * core) and its wakeups per minute (context switches of all its threads, from
 * /proc/<pid>/task/<tid>/status: each is a thread that slept being woken, or preempted).
 *
 * Why 30 s of settling: V8's memory reducer runs a few full GCs some 8 and 16 s after a
 * process's activity ends (`node --trace-gc`: Mark-Compact (reduce)), which wakes every GC helper
 * thread. Measured in 10 s windows from a daemon's start: 558 and 1,194 wakeups/min and 0.4 and
 * 1.8 % of a core in the first two, then 72–114/min and ~0.1 % from 20 s on. A 5 s settle measured
 * that one-off tail of the start, not an idle gateway.
 *
 * Baseline: a node process holding one idle amqplib connection with the gateway's heartbeat
 * (5 s): what any broker client pays to stay connected. Target: an idle gateway < 0.5 % of a core.
 */
const cpuTarget = 0.5;
const heartbeatSeconds = 5;

/** Context switches of every thread of `pid` so far. */
function wakeups(pid) {
  let total = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    let status;
    try {
      status = readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8');
    } catch {
      continue; // the thread ended between the listing and the read
    }
    for (const match of status.matchAll(/^(?:non)?voluntary_ctxt_switches:\s+(\d+)$/gm))
      total += Number(match[1]);
  }
  return total;
}

/** CPU % of a core and wakeups per minute of a process over `seconds` of doing nothing. */
async function idleCost(proc, seconds) {
  const cpuBefore = proc.cpuMs();
  const wakeupsBefore = wakeups(proc.child.pid);
  const started = performance.now();
  await sleep(seconds * 1000);
  const ms = performance.now() - started;
  return {
    cpuPercent: Math.round(((proc.cpuMs() - cpuBefore) / ms) * 100 * 1000) / 1000,
    wakeupsPerMin: Math.round(((wakeups(proc.child.pid) - wakeupsBefore) / ms) * 60_000),
  };
}

export const idleScenario = {
  name: 'idle',
  title: 'idle cost of a federated gateway (0, 10 and 1,000 entities)',
  steps: 4,
  timeoutMs: 420_000,
  async run({ dir, brokerUri, gatewayConfigFile, progress }) {
    const settings = {
      seconds: intSetting('BENCH_IDLE_SECONDS', 30, 1),
      settleSeconds: intSetting('BENCH_IDLE_SETTLE_SECONDS', 30, 0),
      entities: [0, 10, 1000],
    };

    progress.step('idle: amqplib connection floor');
    const floor = await idleFloor(brokerUri, settings);
    console.error(`idle: floor ${floor.cpuPercent} % of a core, ${floor.wakeupsPerMin} wakeups/min`);

    const measured = [];
    for (const count of settings.entities) {
      progress.step(`idle: gateway with ${count} entities`);
      const teardown = createTeardown();
      const queues = new Set();
      teardown.add(() => deleteQueues(brokerUri, [...queues]));
      try {
        const [member] = await startDaemons({
          dir,
          name: `idle-${count}`,
          hosts: clusterHosts('idle', 1),
          brokerUri,
          configFile: gatewayConfigFile,
          teardown,
          queues,
        });
        await inParallel(count, 8, (i) => member.register(`idle-${i}`));
        await sleep(settings.settleSeconds * 1000);
        const cost = await idleCost(member.daemon.process, settings.seconds);
        console.error(
          `idle: ${count} entities: ${cost.cpuPercent} % of a core, ${cost.wakeupsPerMin} wakeups/min`,
        );
        measured.push({ count, ...cost });
      } finally {
        await teardown.run();
      }
    }

    const label = 'idle: 1 federated daemon, nothing sent';
    const baselineLabel = `idle amqplib connection (heartbeat ${heartbeatSeconds} s)`;
    const rows = measured.flatMap(({ count, cpuPercent, wakeupsPerMin }) => [
      finishRow({
        label,
        baselineLabel,
        metric: `CPU, ${count} entities`,
        unit: '% of a core',
        gateway: cpuPercent,
        baseline: floor.cpuPercent,
        better: 'lower',
        target: { op: '<', value: cpuTarget },
      }),
      finishRow({
        label,
        baselineLabel,
        metric: `wakeups, ${count} entities`,
        unit: '/min',
        gateway: wakeupsPerMin,
        baseline: floor.wakeupsPerMin,
        better: 'lower',
      }),
    ]);
    return {
      settings,
      rows,
      measures: [
        `Gateway: one \`agentbridge start\` daemon (own process, federated through the shared broker, signing on) with 0, 10 and 1,000 mains registered over its admin socket and nothing sent; after ${settings.settleSeconds} s of settling, ${settings.seconds} s alone: its CPU time (/proc/<pid>/stat) as % of one core, and its threads' context switches (/proc/<pid>/task/*/status, voluntary + involuntary) per minute, the wakeups.`,
        `Baseline: a node process holding one amqplib connection to the same broker with the gateway's heartbeat (${heartbeatSeconds} s), measured the same way.`,
      ],
      raw: { floor, measured },
    };
  },
};

/** A node process with one idle amqplib connection, measured as the gateway is. */
async function idleFloor(brokerUri, settings) {
  const uri = `${brokerUri}${brokerUri.includes('?') ? '&' : '?'}heartbeat=${heartbeatSeconds}`;
  const script = `require('amqplib').connect(${JSON.stringify(uri)}).then(() => { console.log('connected'); setInterval(() => {}, 2 ** 30); });`;
  const proc = spawnNode(['-e', script], { cwd: new URL('../..', import.meta.url).pathname });
  try {
    const deadline = Date.now() + 15_000;
    while (!proc.output().includes('connected')) {
      if (Date.now() > deadline) throw new Error(`the idle amqplib floor did not connect:\n${proc.output()}`);
      await sleep(50);
    }
    await sleep(settings.settleSeconds * 1000);
    return await idleCost(proc, settings.seconds);
  } finally {
    await proc.stop();
  }
}
