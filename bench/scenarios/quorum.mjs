import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setupSharedTopology } from '#bridge/federation/sharedTopology';
import { inboxName } from '#bridge/federation/topology';
import { findFreePortBase, startCluster, stopCluster } from '../../tools/cluster.mjs';
import { queueDepths } from '../lib/broker.mjs';
import { clusterHosts, trustAll } from '../lib/cluster.mjs';
import { finishRow } from '../lib/fleetReport.mjs';
import { measure, messageText, round } from '../lib/measure.mjs';
import { createTeardown, waitFor } from '../lib/processes.mjs';
import { intSetting } from '../lib/settings.mjs';
import { startDrainLoop } from './crosshost.mjs';
import { startGateway } from './router.mjs';

/**
 * Quorum vs classic inboxes (`BENCH_ONLY=quorum`): what quorum mode costs on the same cluster.
 * A 3-node RabbitMQ cluster of the bench's own (tools/cluster.mjs: its own dir, node names and
 * free ports, none of the shared broker's), its shared topology set up as `agentbridge broker setup`
 * does; then two Gateways in this process, A and B (fresh host ids, signing on), with
 * broker.uris = the three nodes and broker.queueMode classic, main `src` on A and `dst` on B,
 * each message src → dst@B counted once a drain loop on B has returned it, as the crosshost
 * in-process row measures it; then the same with queueMode quorum on new hosts, so their inboxes
 * are new quorum queues (replicated on the three nodes, single active consumer, a lock queue
 * each). Rows: quorum's throughput, p50 and p99 beside classic's; ratio quorum ÷ classic in the
 * notes. Nothing here depends on which other queues (dead letters, control) quorum mode makes
 * quorum too. The cluster is stopped and its dir removed at the end, also when the run fails,
 * which takes every queue the gateways declared with it.
 *
 * Settings (env): BENCH_QUORUM_MESSAGES (2000), BENCH_QUORUM_CONCURRENCY (8), BENCH_QUORUM_WARMUP
 * (100), BENCH_QUORUM_DRAIN_WAIT_MS (1000; as BENCH_CROSSHOST_DRAIN_WAIT_MS).
 */

/** @type {Array<'classic' | 'quorum'>} */
const modes = ['classic', 'quorum'];

/**
 * A config file for one mode: BENCH_GATEWAY_CONFIG's (the run's gateway config file, if any)
 * with broker.uris the cluster's nodes and broker.queueMode `mode`.
 */
function configFor({ dir, gatewayConfigFile }, uris, mode) {
  const base = gatewayConfigFile ? JSON.parse(readFileSync(gatewayConfigFile, 'utf8')) : {};
  const { uri: _uri, ...broker } = base.broker ?? {};
  const file = join(dir, 'quorum', `gateway-config-${mode}.json`);
  writeFileSync(file, JSON.stringify({ ...base, broker: { ...broker, uris, queueMode: mode } }));
  return file;
}

/** Gateways A and B on the cluster in `mode`; A → B drained, measured; returns the measure. */
async function runMode(ctx, settings, uris, mode) {
  const { dir, progress, deliveryTimeoutMs, textBytes } = ctx;
  const configFile = configFor(ctx, uris, mode);
  const [hostA, hostB] = clusterHosts(`q${mode}`, 2);
  const members = [hostA, hostB].map((host) => ({ host, home: join(dir, 'quorum', mode, host) }));
  for (const { home } of members) mkdirSync(home, { recursive: true });
  trustAll(members);
  const teardown = createTeardown();
  try {
    const gateways = [];
    for (const { host, home } of members) {
      const started = await startGateway({ home, configFile, env: { BRIDGE_HOST_ID: host } });
      teardown.add(() => started.stop());
      gateways.push(started);
    }
    const [gatewayA, gatewayB] = gateways;
    const src = await gatewayA.entity('main', 'src');
    const dst = await gatewayB.entity('main', 'dst');
    const inRoster = (gateway, entityName, host) => async () =>
      gateway.services.status.roster().some((e) => e.name === entityName && e.host === host);
    await waitFor(inRoster(gatewayA.gateway, 'dst', hostB), {
      what: `dst@${hostB} in the roster of ${hostA}`,
    });
    await waitFor(inRoster(gatewayB.gateway, 'src', hostA), {
      what: `src@${hostA} in the roster of ${hostB}`,
    });
    const total = settings.warmup + settings.messages;
    const drain = startDrainLoop(
      { deliveryTimeoutMs, drainWaitMs: settings.drainWaitMs, total },
      teardown,
      async (waitMs) => {
        const handover = await gatewayB.gateway.services.drains.drain(dst, undefined, waitMs);
        handover.confirm(); // in process, the caller has them once the call returns
        return handover.envelopes;
      },
    );
    const to = `dst@${hostB}`;
    progress.step(`quorum: ${mode} inboxes, A → B drained`, total);
    const result = await measure({
      count: settings.messages,
      concurrency: settings.concurrency,
      warmup: settings.warmup,
      op: (i) => {
        progress.tick();
        return drain.deliveredAfter(i, () =>
          gatewayA.gateway.services.sends.send(src, { kind: 'SEND', to, text: messageText(i, textBytes) }),
        );
      },
    });
    const check = drain.verify(dst.depth, await queueDepths(uris[0], [inboxName(dst.gid)]));
    const status = /** @type {{ broker?: { queueMode?: string } }} */ (
      await gatewayB.gateway.services.status.status()
    );
    if (status.broker?.queueMode !== mode) {
      throw new Error(`quorum (${mode}): gateway B runs with queueMode ${status.broker?.queueMode}`);
    }
    console.error(
      `quorum (${mode}): ${result.msgsPerSec} msg/s, p50 ${result.p50Ms} ms, p99 ${result.p99Ms} ms; ${check}`,
    );
    return { ...result, check, hosts: [hostA, hostB] };
  } finally {
    await teardown.run();
  }
}

function rowsFor(label, { classic, quorum }) {
  const baseline = { baselineLabel: 'classic inboxes, same cluster' };
  return [
    {
      metric: `A → B drained throughput (${quorum.concurrency} in flight)`,
      unit: 'msg/s',
      gateway: quorum.msgsPerSec,
      baseline: classic.msgsPerSec,
      better: 'higher',
    },
    {
      metric: 'A → B drained p50',
      unit: 'ms',
      gateway: quorum.p50Ms,
      baseline: classic.p50Ms,
      better: 'lower',
    },
    {
      metric: 'A → B drained p99',
      unit: 'ms',
      gateway: quorum.p99Ms,
      baseline: classic.p99Ms,
      better: 'lower',
    },
  ].map((row) => finishRow({ label, ...baseline, ...row }));
}

export const quorumScenario = {
  name: 'quorum',
  title: 'quorum vs classic inboxes on a 3-node cluster: A → B drained',
  steps: 3,
  timeoutMs: 420_000,
  async run(ctx) {
    const settings = {
      messages: intSetting('BENCH_QUORUM_MESSAGES', 2_000),
      concurrency: Math.max(1, intSetting('BENCH_QUORUM_CONCURRENCY', 8)),
      warmup: intSetting('BENCH_QUORUM_WARMUP', 100),
      drainWaitMs: intSetting('BENCH_QUORUM_DRAIN_WAIT_MS', 1000, 1),
    };
    const { progress } = ctx;
    const suffix = randomBytes(3).toString('hex');
    // Outside the run's temp dir: the nodes run as the rabbitmq user, which cannot enter it.
    const clusterDir = join(tmpdir(), `bridge-bench-quorum-${suffix}`);
    mkdirSync(join(ctx.dir, 'quorum'), { recursive: true });
    const teardown = createTeardown();
    teardown.add(() => stopCluster({ dir: clusterDir }));
    // Filled below, one result per mode.
    const results = /** @type {Record<'classic' | 'quorum', Awaited<ReturnType<typeof runMode>>>} */ ({});
    let cluster;
    try {
      progress.step('quorum: start a 3-node RabbitMQ cluster');
      const port = await findFreePortBase(3, 5900);
      cluster = await startCluster({ dir: clusterDir, nodes: 3, port, name: `bench-quorum-${suffix}` });
      const uris = cluster.nodes.map((node) => node.uri);
      console.error(`quorum: cluster of 3 on ${uris.join(', ')} in ${round(cluster.ms / 1000, 1)} s`);
      // What the operator does once (`agentbridge broker setup`); gateways only check it.
      await setupSharedTopology({ uri: uris[0] });
      for (const mode of modes) results[mode] = await runMode(ctx, settings, uris, mode);
    } finally {
      await teardown.run();
    }
    const { classic, quorum } = results;
    const ratio = (key) => round(quorum[key] / classic[key], 2);
    return {
      settings: { ...settings, nodes: 3 },
      rows: rowsFor(
        `quorum: 3-node cluster, 2 Gateways in process, A → B drained, quorum vs classic inboxes`,
        results,
      ),
      measures: [
        'A 3-node RabbitMQ cluster started for the run (tools/cluster.mjs startCluster: its own dir, node names and free ports; stopped and removed afterwards), its shared topology set up as `agentbridge broker setup` does.',
        'Two Gateway instances in this process (signing on) with broker.uris = the three nodes, first with broker.queueMode classic, then with quorum on new host ids (so the inboxes are new quorum queues, replicated on the three nodes); main src on A, dst on B.',
        `From gateway.send() on A (to dst@B) until gateway.drain() on B has returned the message, as the crosshost in-process row; ${settings.concurrency} in flight, ${settings.warmup} warm-up messages first, a drain loop on dst whose drains are long polls (wait ${settings.drainWaitMs} ms: each returns as soon as a message is held).`,
      ],
      check: `classic: ${classic.check}. quorum: ${quorum.check}`,
      notes: [
        `quorum ÷ classic: throughput ${ratio('msgsPerSec')}, p50 ${ratio('p50Ms')}, p99 ${ratio('p99Ms')} ` +
          `(classic ${classic.msgsPerSec} msg/s, p50 ${classic.p50Ms} ms, p99 ${classic.p99Ms} ms; ` +
          `quorum ${quorum.msgsPerSec} msg/s, p50 ${quorum.p50Ms} ms, p99 ${quorum.p99Ms} ms). ` +
          'The table’s ratio keeps the fleet convention (≥ 1.00: quorum as good as classic or better).',
        'All three nodes, both gateways and the drain loop share this machine’s cores: a quorum write is confirmed once a majority of the three nodes has it on disk, which here costs CPU on the same cores rather than network round trips.',
      ],
      raw: results,
    };
  },
};
