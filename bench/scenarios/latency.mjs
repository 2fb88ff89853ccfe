import { join } from 'node:path';
import { inboxName } from '#bridge/federation/topology';
import { adminRoutes } from '#bridge/interfaces/adminProtocol';
import { deleteQueues, localBrokerCpuMs, queueDepths } from '../lib/broker.mjs';
import { clusterHosts, profileName, startDaemons } from '../lib/cluster.mjs';
import { cpuPerMessage, describeCpu, monotonicUs } from '../lib/cpuProfile.mjs';
import { adminClient } from '../lib/daemon.mjs';
import { describeMetrics, metricsBetween, scrapeMetrics } from '../lib/daemonMetrics.mjs';
import { finishRow } from '../lib/fleetReport.mjs';
import { amqpFloor } from '../lib/floors.mjs';
import { messageText, processCpuMs } from '../lib/measure.mjs';
import { measurePaced } from '../lib/paced.mjs';
import { createTeardown, waitFor } from '../lib/processes.mjs';
import { startDrainLoop } from './crosshost.mjs';

/**
 * Latency at a fixed rate (`BENCH_ONLY=latency`): cross-host, two `agentbridge start` daemons (as the
 * crosshost scenario runs them: separate processes, unique host ids, signing on, one broker),
 * main `src` on A sending to main `dst` on B through A's admin socket (POST /v1/send: the
 * gateway.send() call bridge_send makes, with less transport), a drain loop on dst over B's admin
 * socket (POST /v1/drain, a long poll: it returns as soon as a message is held). Messages are
 * *paced*, an open loop (bench/lib/paced.mjs): message i is due at t0 + i / rate and sent then,
 * whether or not the earlier ones are through, for `seconds`.
 * Latency per message: from when it was due until B's drain has returned it; p50/p95/p99.
 * Target: p99 < 20 ms at 1,000 msg/s. The sender's HTTP connections are a bounded keep-alive
 * pool (32 sockets, idle ones closed before the server's keep-alive timeout), as a real client's.
 *
 * Baseline: raw amqplib at the same rate on the same broker (the crosshost amqplib floor: confirm
 * channel, persistent + mandatory publish of a wire-sized body to a durable inbox-like queue,
 * consumed with manual ack on a second connection), from when it was due until consumed and acked.
 *
 * If the gateway does not sustain the rate (it delivers < 95% of it, or needed more than the
 * in-flight cap), the result says so and a second pass runs at a lower rate (half of what it
 * delivered, rounded down to 50 msg/s), beside the floor at that rate too.
 *
 * Settings (env): BENCH_LATENCY_RATE (msg/s, default 1000), BENCH_LATENCY_SECONDS (10),
 * BENCH_LATENCY_WARMUP_SECONDS (at the rate before measuring, not measured, 2: the daemons' first
 * seconds are several times slower while V8 warms up), BENCH_LATENCY_STEP_DOWN=0 (no second
 * pass), BENCH_LATENCY_MAX_IN_FLIGHT (most messages outstanding, sent but not yet delivered,
 * default 256; past it the pacer waits, and that wait counts in the latency since it runs from
 * when a message was due).
 */

const p99Target = 20;

function settingsFromEnv(env) {
  const number = (name, fallback) => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw);
    if (!Number.isFinite(value) || value <= 0) throw new Error(`${name}=${raw}: expected a positive number`);
    return value;
  };
  return {
    rate: number('BENCH_LATENCY_RATE', 1000),
    seconds: number('BENCH_LATENCY_SECONDS', 10),
    warmupSeconds: number('BENCH_LATENCY_WARMUP_SECONDS', 2),
    stepDown: env.BENCH_LATENCY_STEP_DOWN !== '0',
    maxInFlight: Math.round(number('BENCH_LATENCY_MAX_IN_FLIGHT', 256)),
  };
}

export const latencyScenario = {
  name: 'latency',
  title: 'end-to-end latency at a fixed rate, cross-host (2 daemons)',
  steps: 2,
  timeoutMs: 150_000,
  async run(ctx) {
    const settings = settingsFromEnv(process.env);
    const { progress } = ctx;

    const pass = async (target, label, rate) => {
      const count = Math.max(1, Math.round(rate * settings.seconds));
      const warmup = Math.round(rate * settings.warmupSeconds);
      progress.step(`latency: ${label} @ ${rate} msg/s`, count);
      const opened = await target.open({
        ...ctx,
        name: `latency-${target.id}-${rate}`,
        total: warmup + count,
      });
      let result;
      let check;
      try {
        result = await measurePaced({
          rate,
          seconds: settings.seconds,
          warmup,
          op: (i) => opened.op(i),
          ...(opened.cpuMs ? { cpuMs: opened.cpuMs } : {}),
          ...(opened.sideCpuMs ? { sideCpuMs: opened.sideCpuMs } : {}),
          maxInFlight: settings.maxInFlight,
          onProgress: (done) => progress.update(done),
          ...(opened.window ? { window: opened.window } : {}),
        });
        check = opened.verify ? await opened.verify() : undefined;
      } finally {
        await opened.close();
      }
      console.error(
        `latency: ${label} @ ${rate} msg/s: delivered ${result.deliveredPerSec} msg/s` +
          `${result.sustained ? '' : ' (NOT sustained)'}, p50 ${result.p50Ms} ms, p95 ${result.p95Ms} ms, ` +
          `p99 ${result.p99Ms} ms, max ${result.maxMs} ms; pacer late p99 ${result.lateP99Ms} ms`,
      );
      // Read once the daemons have stopped: they write their CPU profiles as they exit.
      const profile = opened.profile?.(count);
      if (profile) console.error(`latency: ${label} @ ${rate} msg/s, profile:\n${describeProfile(profile)}`);
      return { ...result, ...(check ? { check } : {}), ...(profile ? { profile } : {}) };
    };

    const passes = [];
    const runAt = async (rate) => {
      const floor = await pass(amqpFloor, 'amqplib floor', rate);
      const gateway = await pass(daemonPair, '2 daemons', rate);
      passes.push({ rate, floor, gateway });
      return gateway;
    };
    const first = await runAt(settings.rate);
    if (!first.sustained && settings.stepDown) {
      const achievable = Math.floor((first.deliveredPerSec * 0.5) / 50) * 50;
      if (achievable >= 50) await runAt(achievable);
    }

    const label = 'latency: 2 daemons via admin socket, A → B drained, paced';
    const rows = passes.flatMap(({ rate, floor, gateway }) => {
      const at = `@ ${rate} msg/s offered`;
      const base = { label, baselineLabel: 'amqplib floor, same rate' };
      return (
        [
          { metric: `p50 ${at}`, unit: 'ms', gateway: gateway.p50Ms, baseline: floor.p50Ms, better: 'lower' },
          { metric: `p95 ${at}`, unit: 'ms', gateway: gateway.p95Ms, baseline: floor.p95Ms, better: 'lower' },
          {
            metric: `p99 ${at}`,
            unit: 'ms',
            gateway: gateway.p99Ms,
            baseline: floor.p99Ms,
            better: 'lower',
            target: { op: '<', value: p99Target },
          },
          {
            metric: `delivered ${at}${gateway.sustained ? ', sustained' : ', NOT sustained'}`,
            unit: 'msg/s',
            gateway: gateway.deliveredPerSec,
            baseline: floor.deliveredPerSec,
            better: 'higher',
            target: { op: '≥', value: Math.round(rate * 0.95) },
          },
        ]
          .map((row) => finishRow({ ...base, ...row }))
          // Delivered in the end is not enough: sustained also means the in-flight cap was never hit.
          .map((row) => (row.unit === 'msg/s' ? { ...row, met: row.met && gateway.sustained } : row))
      );
    });

    const cpu = (result) =>
      Object.entries(result.cpuUsPerMsgOf ?? {})
        .map(([name, us]) => `${name} ${us}`)
        .join(', ');
    const firstPass = passes[0];
    return {
      settings: { ...settings, senderSockets, textBytes: ctx.textBytes },
      rows,
      measures: [
        `Gateway: two \`agentbridge start\` daemons (separate processes, one broker, signing on), main src on A → main dst on B, driven through their admin sockets (POST /v1/send on A over a keep-alive pool of ${senderSockets} connections, POST /v1/drain on B: the gateway calls bridge_send / bridge_drain make); a drain loop on dst whose drains are long polls (wait ${drainWaitMs} ms): each returns as soon as a message is held on B, and the next starts at once.`,
        `Open loop: message i is due at t0 + i/rate and sent then whatever the backlog (at most ${settings.maxInFlight} outstanding, then the pacer waits); latency = from when it was due until the drain on B returned it (the pacer’s own lateness counts: p99 ${firstPass.gateway.lateP99Ms} ms, max ${firstPass.gateway.lateMaxMs} ms at ${firstPass.rate} msg/s). ${settings.warmupSeconds} s at the rate first, not measured (each pass on fresh daemons).`,
        'Baseline: raw amqplib at the same rate on the same broker: confirm channel, persistent + mandatory publish with the gateway’s properties and wire size through bridge.msg to a durable queue with an inbox’s arguments, consumed on a second connection (exclusive, manual ack, the gateway’s prefetch); from when it was due until the consumer acked it.',
        `Sustained = delivered ≥ 95% of the rate (messages ÷ time until the last was delivered: a backlog that grows pushes the last delivery out) without ever reaching the cap of ${settings.maxInFlight} messages in flight (reaching it means the sender had to hold messages back).` +
          (passes.length > 1
            ? ` At ${firstPass.rate} msg/s the gateway was not sustained (delivered ${firstPass.gateway.deliveredPerSec} msg/s), so a second pass ran at ${passes[1].rate} msg/s (half of that, rounded down to 50).`
            : ''),
      ],
      check: passes.map(({ rate, gateway }) => `@ ${rate} msg/s: ${gateway.check}`).join(' '),
      notes: passes.map(
        ({ rate, floor, gateway }) =>
          `@ ${rate} msg/s: gateway max ${gateway.maxMs} ms, mean ${gateway.meanMs} ms, offered ${gateway.offeredPerSec} msg/s, ` +
          `at most ${gateway.peakInFlight} in flight (cap ${gateway.inFlightCap}); CPU µs/msg ${cpu(gateway)} (floor: ${cpu(floor)}); ` +
          `floor max ${floor.maxMs} ms.`,
      ),
      raw: passes,
    };
  },
};

const senderSockets = 32;

/**
 * A bounded keep-alive pool: at most `maxSockets` connections (more requests wait for one), idle
 * ones closed after 4 s, before the server's 5 s keep-alive timeout could close one under a request.
 */
const pooled = (maxSockets) => ({ maxSockets, timeout: 4_000 });

/** Each drain of the drain loop waits up to this long for a message when none is held. */
const drainWaitMs = 1_000;

/**
 * The gateway target: two daemons (A with main src, B with main dst), once each sees the other's
 * entity; `op(i)` sends message i from src to dst@B and resolves once B's drain returned it.
 */
const daemonPair = {
  id: 'daemons',
  async open(ctx) {
    const teardown = createTeardown();
    try {
      return await openDaemonPair(ctx, teardown);
    } catch (err) {
      await teardown.run().catch(() => {});
      throw err;
    }
  },
};

async function openDaemonPair(
  { dir, name, brokerUri, gatewayConfigFile, textBytes, deliveryTimeoutMs, total, profiling, cpuProfDir },
  teardown,
) {
  const queues = new Set();
  // Deleted last, after the daemons have stopped.
  teardown.add(() => deleteQueues(brokerUri, [...queues]));
  const hosts = clusterHosts('lat', 2);
  const [a, b] = await startDaemons({
    dir,
    name,
    hosts,
    brokerUri,
    configFile: gatewayConfigFile,
    teardown,
    queues,
    ...(profiling ? { cpuProfDir } : {}),
  });
  const src = await a.register('src');
  const dst = await b.register('dst');
  await waitFor(async () => (await a.roster()).some((e) => e.name === 'dst' && e.host === b.host), {
    what: `dst@${b.host} in the roster of ${a.host}`,
    timeoutMs: 30_000,
  });
  await waitFor(async () => (await b.roster()).some((e) => e.name === 'src' && e.host === a.host), {
    what: `src@${a.host} in the roster of ${b.host}`,
    timeoutMs: 30_000,
  });
  const sender = adminClient(a.daemon.adminSocket, pooled(senderSockets));
  teardown.add(() => sender.close());
  const drainer = adminClient(b.daemon.adminSocket, pooled(1));
  teardown.add(() => drainer.close());

  // The drain loop on dst: every message from src counts as delivered by its key.
  const drain = startDrainLoop({ deliveryTimeoutMs, drainWaitMs, total }, teardown, (waitMs) =>
    drainer.call(adminRoutes.drain, { token: dst.token, waitMs }),
  );

  const to = `dst@${b.host}`;
  const brokerCpuMs = localBrokerCpuMs(brokerUri);
  const daemons = { 'daemon A': a, 'daemon B': b };
  const span = {};
  const scrapeAll = () =>
    Promise.all(Object.values(daemons).map((member) => scrapeMetrics(member.daemon.metricsUrl)));
  return {
    // BENCH_PROFILE=1: the daemons' metrics read around the measured span (the first read resets
    // the event-loop histogram) and their CPU profiles cut to it.
    ...(profiling
      ? {
          window: {
            async start() {
              span.before = await scrapeAll();
              span.fromUs = monotonicUs();
            },
            async end() {
              span.toUs = monotonicUs();
              span.after = await scrapeAll();
            },
          },
          profile: (messages) =>
            Object.fromEntries(
              Object.entries(daemons).map(([role, member], i) => [
                role,
                {
                  metrics: metricsBetween(span.before[i], span.after[i], messages),
                  cpu: cpuPerMessage(
                    join(cpuProfDir, profileName(name, member.host)),
                    { fromUs: span.fromUs, toUs: span.toUs },
                    messages,
                  ),
                },
              ]),
            ),
        }
      : {}),
    cpuMs: () => a.daemon.cpuMs() + b.daemon.cpuMs(),
    sideCpuMs: {
      'daemon A': a.daemon.cpuMs,
      'daemon B': b.daemon.cpuMs,
      ...(brokerCpuMs ? { broker: brokerCpuMs } : {}),
      'clients (this process)': processCpuMs,
    },
    op: (i) =>
      drain.deliveredAfter(i, () =>
        sender.call(adminRoutes.send, { token: src.token, to, text: messageText(i, textBytes) }),
      ),
    async verify() {
      const depth = (await b.roster()).find((e) => e.name === 'dst' && e.host === b.host)?.depth;
      return drain.verify(depth, await queueDepths(brokerUri, [inboxName(dst.gid)]));
    },
    close: () => teardown.run(),
  };
}

/** The profile of a pass, daemon by daemon, as lines for the log and the notes. */
function describeProfile(profile) {
  return Object.entries(profile)
    .map(
      ([role, { metrics, cpu }]) => `  ${role}: ${describeMetrics(metrics)}\n  ${role}: ${describeCpu(cpu)}`,
    )
    .join('\n');
}
