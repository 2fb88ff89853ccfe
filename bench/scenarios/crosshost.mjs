import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { controlSpec, inboxName } from '#bridge/federation/topology';
import { adminRoutes } from '#bridge/interfaces/adminProtocol';
import { initKeys } from '#bridge/security/keys';
import { addTrust } from '#bridge/security/TrustStore';
import { deleteQueues, localBrokerCpuMs, queueDepths } from '../lib/broker.mjs';
import { adminClient, callTool, connectMcp, startDaemon } from '../lib/daemon.mjs';
import { amqpFloor } from '../lib/floors.mjs';
import {
  createDeliveryTracker,
  keyOfText,
  messageText,
  percentile,
  processCpuMs,
  round,
} from '../lib/measure.mjs';
import { createTeardown, waitFor } from '../lib/processes.mjs';
import { startGateway } from './router.mjs';

/**
 * (c) Cross-host messages through the broker: a gateway for host A and one for host B (unique
 * host ids, their own data dirs, the default config federated to the shared RabbitMQ), main
 * `src` on A and main `dst` on B; each message goes src → dst@B and counts once B hands it to a
 * drain loop on dst. Beside each, the amqplib floor: RabbitMQ alone with the same semantics.
 *
 * - `crosshost-mcp`, the required figure: two `agentbridge start` daemons as separate OS processes,
 *   one MCP SDK client per lane sending with bridge_send on A, one draining with bridge_drain on B.
 * - `crosshost-admin`: the same two daemons driven through their admin sockets instead, which
 *   reach the same gateway calls with less transport (see `interfaces`).
 * - `crosshost-inproc`: two `Gateway` instances in this process, `gateway.send()` and
 *   `gateway.drain()`: the gateway's own cost without an interface or process hops (but with both
 *   gateways on one thread).
 *
 * Broker queues the gateways declare (the inboxes, control.<host>) are deleted afterwards, also
 * when the run fails.
 */
export function crosshostScenarios({ count, concurrency, drainWaitMs }) {
  const common = { count, concurrency, baselines: [amqpFloor] };
  const drain = `a drain loop on dst: each drain a long poll (wait ${drainWaitMs} ms), which returns as soon as a message is held, and the next one at once`;
  const daemons = (via) => ({
    ...common,
    name: `crosshost-${via}`,
    label: `crosshost: 2 daemons via ${interfaces[via].label}, A → B drained`,
    measures:
      'two agentbridge start daemons (separate processes, one broker), driven by ' +
      `${interfaces[via].how}; from the send to dst@B on daemon A until the drain on daemon B has returned ` +
      `the message; ${drain}`,
    open: (ctx) => withTeardown((teardown) => openDaemons({ ...ctx, drainWaitMs }, teardown, via)),
  });
  return [
    daemons('mcp'),
    daemons('admin'),
    {
      ...common,
      name: 'crosshost-inproc',
      label: 'crosshost: 2 Gateways in process, A → B drained',
      measures:
        'two Gateway instances in this process (one broker); from gateway.send() on A (to dst@B) until ' +
        `gateway.drain() on B has returned the message; ${drain}`,
      open: (ctx) => withTeardown((teardown) => openInProcess({ ...ctx, drainWaitMs }, teardown)),
    },
  ];
}

/** Opens a target with a teardown that `close()` runs, and that runs at once if opening fails. */
async function withTeardown(open) {
  const teardown = createTeardown();
  try {
    const target = await open(teardown);
    return { ...target, close: () => teardown.run() };
  } catch (err) {
    await teardown.run().catch(() => {});
    throw err;
  }
}

function hostIds() {
  const suffix = randomBytes(3).toString('hex');
  return { a: `bench-a-${suffix}`, b: `bench-b-${suffix}` };
}

/** The queues two gateways leave on the broker; deleted last, once the gateways are stopped. */
function brokerLeftovers(brokerUri, hosts, teardown) {
  const queues = [controlSpec(hosts.a).name, controlSpec(hosts.b).name];
  teardown.add(() => deleteQueues(brokerUri, queues));
  return queues;
}

/**
 * The two ways into a daemon a benchmark can drive at rate. Both end in the same calls,
 * gateway.send(entity, { kind: 'SEND', to, text }) and gateway.drain(entity), for the entity
 * whose token the request carries (src/interfaces/messageTools.ts, src/interfaces/adminServer.ts);
 * they differ only in transport and parsing. `open` returns `send(lane, to, text)` and `drain()`.
 */
const interfaces = {
  mcp: {
    label: 'MCP',
    how: 'bridge_send / bridge_drain tool calls, one MCP SDK client (Streamable HTTP) per lane',
    async open({ daemon, token, lanes, teardown }) {
      const clients = [];
      teardown.add(() => Promise.all(clients.map((client) => client.close())));
      for (let lane = 0; lane < lanes; lane++) clients.push(await connectMcp(daemon.mcpUrl, token));
      return {
        send: (lane, to, text) => callTool(clients[lane], 'bridge_send', { to, text }),
        drain: async (waitMs) => (await callTool(clients[0], 'bridge_drain', { wait_ms: waitMs })).messages,
      };
    },
  },
  admin: {
    label: 'admin socket',
    how: `POST ${adminRoutes.send} / ${adminRoutes.drain} on the admin socket (what agentbridge send / drain use), keep-alive`,
    async open({ daemon, token, teardown }) {
      const admin = adminClient(daemon.adminSocket);
      teardown.add(() => admin.close());
      return {
        send: (_lane, to, text) => admin.call(adminRoutes.send, { token, to, text }),
        drain: (waitMs) => admin.call(adminRoutes.drain, { token, waitMs }),
      };
    },
  },
};

/**
 * Gives both gateways a signing key and each the other's public key, as `agentbridge keys init` and
 * `agentbridge trust add` would: messages are signed and verified as in production.
 */
function trustEachOther(dir, name, hosts) {
  const keys = { a: initKeys(join(dir, name, 'a')), b: initKeys(join(dir, name, 'b')) };
  addTrust(join(dir, name, 'a'), hosts.b, keys.b.publicKeyString);
  addTrust(join(dir, name, 'b'), hosts.a, keys.a.publicKeyString);
}

async function openDaemons(ctx, teardown, via) {
  const { dir, name, brokerUri, cpuProfDir, concurrency, gatewayConfigFile } = ctx;
  const hosts = hostIds();
  const queues = brokerLeftovers(brokerUri, hosts, teardown);
  trustEachOther(dir, name, hosts);
  const start = async (role) => {
    const daemon = await startDaemon({
      home: join(dir, name, role),
      configFile: gatewayConfigFile,
      env: { BRIDGE_HOST_ID: hosts[role], BRIDGE_BROKER_URI: brokerUri },
      ...(cpuProfDir ? { cpuProf: { dir: cpuProfDir, name: `${name}-${role}.cpuprofile` } } : {}),
    });
    teardown.add(() => daemon.stop());
    return daemon;
  };
  const a = await start('a');
  const b = await start('b');
  const src = await a.register('src');
  queues.push(inboxName(src.gid));
  const dst = await b.register('dst');
  queues.push(inboxName(dst.gid));
  await waitFor(async () => (await a.roster()).some((e) => e.name === 'dst' && e.host === hosts.b), {
    what: `dst@${hosts.b} in the roster of ${hosts.a}`,
    process: a.process,
  });
  await waitFor(async () => (await b.roster()).some((e) => e.name === 'src' && e.host === hosts.a), {
    what: `src@${hosts.a} in the roster of ${hosts.b}`,
    process: b.process,
  });

  const { open } = interfaces[via];
  const sender = await open({ daemon: a, token: src.token, lanes: concurrency, teardown });
  const drainer = await open({ daemon: b, token: dst.token, lanes: 1, teardown });
  const drain = startDrainLoop(ctx, teardown, drainer.drain);

  const brokerCpuMs = localBrokerCpuMs(brokerUri);
  const to = `dst@${hosts.b}`;
  return {
    cpuMs: () => a.cpuMs() + b.cpuMs(),
    sideCpuMs: {
      'daemon A': a.cpuMs,
      'daemon B': b.cpuMs,
      ...(brokerCpuMs ? { broker: brokerCpuMs } : {}),
      'clients (this process)': processCpuMs,
    },
    op: (i, lane) => drain.deliveredAfter(i, () => sender.send(lane, to, messageText(i, ctx.textBytes))),
    // Through the admin socket (`agentbridge roster --json`), whichever interface drove the run.
    verify: async () =>
      drain.verify(
        (await b.roster()).find((e) => e.name === 'dst' && e.host === hosts.b)?.depth,
        await queueDepths(brokerUri, [inboxName(dst.gid)]),
      ),
  };
}

async function openInProcess(ctx, teardown) {
  const { dir, name, brokerUri, textBytes, gatewayConfigFile } = ctx;
  const hosts = hostIds();
  const queues = brokerLeftovers(brokerUri, hosts, teardown);
  trustEachOther(dir, name, hosts);
  const start = async (role) => {
    const started = await startGateway({
      home: join(dir, name, role),
      configFile: gatewayConfigFile,
      env: { BRIDGE_HOST_ID: hosts[role], BRIDGE_BROKER_URI: brokerUri },
    });
    teardown.add(() => started.stop());
    return started;
  };
  const a = await start('a');
  const b = await start('b');
  const src = await a.entity('main', 'src');
  queues.push(inboxName(src.gid));
  const dst = await b.entity('main', 'dst');
  queues.push(inboxName(dst.gid));
  const inRoster = (gateway, entityName, host) => async () =>
    gateway.services.status.roster().some((e) => e.name === entityName && e.host === host);
  await waitFor(inRoster(a.gateway, 'dst', hosts.b), { what: `dst@${hosts.b} in the roster of ${hosts.a}` });
  await waitFor(inRoster(b.gateway, 'src', hosts.a), { what: `src@${hosts.a} in the roster of ${hosts.b}` });
  const drain = startDrainLoop(ctx, teardown, async (waitMs) => {
    const handover = await b.gateway.services.drains.drain(dst, undefined, waitMs);
    handover.confirm(); // in process, the caller has them once the call returns
    return handover.envelopes;
  });

  const brokerCpuMs = localBrokerCpuMs(brokerUri);
  const to = `dst@${hosts.b}`;
  return {
    sideCpuMs: {
      'both gateways and the drain loop (this process)': processCpuMs,
      ...(brokerCpuMs ? { broker: brokerCpuMs } : {}),
    },
    op: (i) =>
      drain.deliveredAfter(i, () =>
        a.gateway.services.sends.send(src, { kind: 'SEND', to, text: messageText(i, textBytes) }),
      ),
    verify: async () => drain.verify(dst.depth, await queueDepths(brokerUri, [inboxName(dst.gid)])),
  };
}

/**
 * Drains dst for as long as the target is open: `drainOnce(waitMs)` returns the messages one drain
 * handed over, a long poll that waits up to `drainWaitMs` for one when none is held (so a drain
 * returns as soon as a message arrives, and an idle loop does not spin); each counts as delivered (by the key its text starts with). A failed drain fails
 * every waiting operation. `deliveredAfter(i, send)` is operation i: send message i, then wait for
 * the drain to return it (and, outside the warm-up, note how long the send itself took). The
 * quorum scenario drains the same way.
 */
export function startDrainLoop({ deliveryTimeoutMs, drainWaitMs, total }, teardown, drainOnce) {
  const tracker = createDeliveryTracker({ timeoutMs: deliveryTimeoutMs });
  const seen = new Set();
  const sendMs = [];
  let duplicates = 0;
  let foreign = 0;
  let drains = 0;
  let emptyDrains = 0;
  let draining = true;
  let failure;
  const loop = (async () => {
    while (draining) {
      const messages = await drainOnce(drainWaitMs);
      drains++;
      for (const message of messages) {
        const key = keyOfText(message.text);
        if (message.from.name !== 'src' || !/^m-?\d+$/.test(key)) {
          // dst's inbox is bound to broadcast.all: someone else's broadcast on the shared broker.
          foreign++;
          continue;
        }
        if (seen.has(key)) duplicates++;
        seen.add(key);
        tracker.delivered(key);
      }
      if (messages.length === 0) emptyDrains++;
    }
  })().catch((err) => {
    failure = err;
    tracker.fail(err);
  });
  teardown.add(async () => {
    draining = false;
    await loop;
    if (failure) throw failure;
  });
  return {
    async deliveredAfter(i, send) {
      const delivered = tracker.wait(`m${i}`);
      delivered.catch(() => {}); // awaited below; only a failed send leaves it unawaited
      const started = performance.now();
      await send();
      if (i >= 0) sendMs.push(performance.now() - started);
      await delivered;
    },
    verify(depth, brokerDepths) {
      const [[queue, ready]] = Object.entries(brokerDepths);
      const problems = [
        seen.size === total ? '' : `drained ${seen.size} distinct messages of ${total}`,
        duplicates === 0 ? '' : `${duplicates} drained twice`,
        depth === 0 ? '' : `dst still holds ${depth}`,
        ready === 0 ? '' : `${queue} has ${ready} ready`,
      ].filter(Boolean);
      if (problems.length > 0) throw new Error(`cross-host check failed: ${problems.join('; ')}`);
      const sorted = Float64Array.from(sendMs).sort();
      return (
        `dst drained all ${total} messages once each (depth 0 on B, its broker inbox empty); ` +
        `the send leg (until A returned, broker-confirmed) took p50 ${round(percentile(sorted, 0.5), 2)} ms, ` +
        `p99 ${round(percentile(sorted, 0.99), 2)} ms; ${drains} drains, ${emptyDrains} of them empty` +
        (foreign > 0 ? `; ${foreign} foreign broadcasts (other users of the broker) drained too` : '')
      );
    },
  };
}
