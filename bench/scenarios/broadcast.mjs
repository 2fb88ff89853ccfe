import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import amqp from 'amqplib';
import { controlSpec, Exchange, inboxName, inboxSpec, QueueMode } from '#bridge/federation/topology';
import { clusterHosts, inParallel, trustAll, withCluster } from '../lib/cluster.mjs';
import { finishRow } from '../lib/fleetReport.mjs';
import { wireSizedBody } from '../lib/floors.mjs';
import { keyOfText, percentile, round } from '../lib/measure.mjs';
import { waitFor } from '../lib/processes.mjs';
import { intSetting } from '../lib/settings.mjs';
import { startGateway } from './router.mjs';

/** @typedef {import('#bridge/deliver/EntityActor').EntityActor} EntityActor */
/** @typedef {import('#bridge/gateway/Gateway').Gateway} Gateway */

/**
 * Broadcast to 1,000 inboxes (`BENCH_ONLY=broadcast`): 1,000 entities spread over 3 gateways
 * federated through the shared broker (`new Gateway` from dist/ in this process, signing on,
 * trusting each other), every other one a worker with a no-op pane, the rest mains, all in one
 * group unique to the run. A sender on gateway 1 (not in the group) calls gateway.broadcast()
 * with that group: one publish to `bridge.msg` with key `broadcast.<group>`, which the broker
 * copies into the 1,000 inboxes. Timed: from the call until every recipient has it: each worker's
 * copy typed into its pane (the no-op injector is called), each main's held for it (its depth
 * counts it; polled every millisecond). Repeated BENCH_BROADCAST_ROUNDS times (default 5), one
 * broadcast at a time, after BENCH_BROADCAST_WARMUP_ROUNDS (1) not measured; median and worst reported. Afterwards every main is drained and must hold
 * exactly the rounds' broadcasts, and every worker must have been typed each one once.
 *
 * Baseline: raw amqplib on the same broker, the same shape: 1,000 durable queues with an
 * inbox's arguments bound to `bridge.msg` with a unique `broadcast.<group>` key, consumed over
 * 3 connections (one per "gateway"), a channel per queue, exclusive, manual ack, the gateway's
 * prefetch; one persistent, mandatory publish of a wire-sized envelope on a confirm channel;
 * timed until all 1,000 copies are consumed and acked. Same rounds.
 *
 * Every queue either side declares is deleted afterwards (also on failure).
 * Settings (env): BENCH_BROADCAST_ENTITIES (1000), BENCH_BROADCAST_GATEWAYS (3),
 * BENCH_BROADCAST_ROUNDS (5), BENCH_BROADCAST_WARMUP_ROUNDS (1).
 */

const summary = (times) => {
  const sorted = Float64Array.from(times).sort();
  return {
    medianMs: round(percentile(sorted, 0.5), 2),
    maxMs: round(sorted[sorted.length - 1], 2),
    minMs: round(sorted[0], 2),
    allMs: times.map((ms) => round(ms, 2)),
  };
};

/** The gateway side: 3 in-process gateways, 1,000 entities, `rounds` broadcasts. */
async function gatewayBroadcast(ctx, settings, teardown, queues) {
  const { dir, brokerUri, gatewayConfigFile, progress, textBytes } = ctx;
  const hosts = clusterHosts('bc', settings.gateways);
  const members = hosts.map((host) => ({ host, home: join(dir, 'broadcast', host) }));
  trustAll(members);
  const group = `bench-bc-${randomBytes(3).toString('hex')}`;
  const typed = new Map(); // broadcast key → copies typed into panes
  const gateways = [];
  progress.step(`broadcast: start ${settings.gateways} gateways`);
  for (const { host, home } of members) {
    queues.add(controlSpec(host).name);
    const started = await startGateway({
      home,
      configFile: gatewayConfigFile,
      env: { BRIDGE_HOST_ID: host, BRIDGE_BROKER_URI: brokerUri },
      onInjected: (text) => {
        const key = keyOfText(text);
        typed.set(key, (typed.get(key) ?? 0) + 1);
      },
    });
    teardown.add(() => started.stop());
    gateways.push(started);
  }

  progress.step(`broadcast: register ${settings.entities} entities`, settings.entities);
  const registerStarted = performance.now();
  const sender = await gateways[0].entity('main', 'caster');
  queues.add(inboxName(sender.gid));
  const recipients = await inParallel(
    settings.entities,
    8,
    async (i) => {
      const { gateway } = gateways[i % gateways.length];
      const worker = i % 2 === 1;
      const registration = await gateway.services.registrations.register({
        kind: worker ? 'worker' : 'main',
        name: `${worker ? 'w' : 'm'}${i}`,
        groups: [group],
        ...(worker ? { pane: { type: 'tmux', target: `%${i}` } } : {}),
      });
      queues.add(inboxName(registration.gid));
      return { worker, gateway, entity: gateway.directory.authenticate(registration.token) };
    },
    (done) => progress.update(done),
  );
  const registerSeconds = (performance.now() - registerStarted) / 1000;
  const mains = recipients.filter((r) => !r.worker).map((r) => r.entity);
  const workers = recipients.length - mains.length;
  // Receivers check that the sender lives on the signing host: wait until each sees it.
  progress.step('broadcast: wait for the roster');
  for (const { gateway } of gateways.slice(1)) {
    await waitFor(async () => gateway.services.status.roster().some((e) => e.gid === sender.gid), {
      what: `caster in the roster of ${gateway.host}`,
      timeoutMs: 30_000,
    });
  }

  const all = settings.warmupRounds + settings.rounds;
  progress.step(`broadcast: ${all} broadcasts to ${settings.entities}`, all);
  const times = [];
  const publishMs = [];
  for (let round_ = 1; round_ <= all; round_++) {
    const key = `bc${round_}`;
    const started = performance.now();
    const result = await gateways[0].gateway.services.router.broadcast(sender, {
      text: `${key} ${'x'.repeat(Math.max(0, textBytes - key.length - 1))}`,
      group,
    });
    if (round_ > settings.warmupRounds) publishMs.push(performance.now() - started);
    if (result.partial) throw new Error(`broadcast ${key} was only partly delivered by the broker`);
    const deadline = started + ctx.deliveryTimeoutMs;
    for (;;) {
      const held = mains.reduce((sum, main) => sum + (main.depth >= round_ ? 1 : 0), 0);
      if (held + (typed.get(key) ?? 0) >= settings.entities) break;
      if (performance.now() > deadline) {
        throw new Error(
          `broadcast ${key}: after ${ctx.deliveryTimeoutMs} ms only ${typed.get(key) ?? 0} of ${workers} workers ` +
            `typed it and ${held} of ${mains.length} mains held it`,
        );
      }
      await sleep(1);
    }
    if (round_ > settings.warmupRounds) times.push(performance.now() - started);
    progress.update(round_);
  }

  // Check: every main holds exactly the rounds' broadcasts (drained now), every worker got each once.
  let foreign = 0;
  const problems = [];
  /** @type {Map<Gateway, EntityActor[]>} */
  const byGateway = new Map(gateways.map((g) => [g.gateway, []]));
  // Every recipient's gateway is one of gateways: its list exists.
  for (const r of recipients)
    if (!r.worker) /** @type {EntityActor[]} */ (byGateway.get(r.gateway)).push(r.entity);
  for (const [gateway, entities] of byGateway) {
    for (const main of entities) {
      const keys = [];
      for (;;) {
        const handover = await gateway.services.drains.drain(main);
        handover.confirm();
        if (handover.envelopes.length === 0) break;
        for (const envelope of handover.envelopes) {
          if (envelope.from.gid === sender.gid) keys.push(keyOfText(envelope.text));
          else foreign++;
        }
      }
      const expected = Array.from({ length: all }, (_, i) => `bc${i + 1}`);
      if (keys.join(',') !== expected.join(','))
        problems.push(`${main.record.name} held ${keys.join(',') || 'nothing'}`);
    }
  }
  for (let i = 1; i <= all; i++) {
    if (typed.get(`bc${i}`) !== workers)
      problems.push(`bc${i} typed ${typed.get(`bc${i}`) ?? 0} times, not ${workers}`);
  }
  if (problems.length > 0) throw new Error(`broadcast check failed: ${problems.slice(0, 5).join('; ')}`);
  return {
    ...summary(times),
    publish: summary(publishMs),
    registerSeconds: round(registerSeconds, 2),
    hosts,
    perGateway: gateways.map(({ gateway }) => recipients.filter((r) => r.gateway === gateway).length),
    check:
      `every round reached all ${settings.entities}: ${workers} workers typed each broadcast once, ` +
      `${mains.length} mains held exactly the ${all} broadcasts in order (drained afterwards)` +
      (foreign > 0 ? `; ${foreign} foreign broadcasts (other users of the broker) drained too` : ''),
  };
}

/** The baseline: raw amqplib fan-out to 1,000 bound queues, consumed over 3 connections. */
async function floorBroadcast(ctx, settings, teardown, queues) {
  const { brokerUri, gatewayConfig, progress, textBytes } = ctx;
  const { prefetch, inboxMaxLength, deployment } = gatewayConfig.broker;
  const suffix = randomBytes(3).toString('hex');
  const key = `broadcast.bench-bc-floor-${suffix}`;
  const names = Array.from({ length: settings.entities }, (_, i) => `bench.bc-floor.${suffix}.${i}`);
  progress.step(`broadcast: amqplib floor, ${settings.entities} queues`, settings.entities);
  const publishing = await amqp.connect(brokerUri, {
    clientProperties: { connection_name: `bench bc-floor ${suffix}` },
  });
  teardown.add(() => publishing.close().catch(() => {}));
  const publisher = await publishing.createConfirmChannel();
  await publisher.assertExchange(Exchange.msg, 'topic', { durable: true });
  // Only the spec's queue arguments are used (each queue is bound to `key` alone below).
  const spec = inboxSpec({
    gid: 'x',
    deployment,
    groups: [],
    mode: QueueMode.classic,
    maxLength: inboxMaxLength,
  });
  const counts = new Map();
  let failure;
  const connections = [];
  for (let c = 0; c < settings.gateways; c++) {
    const connection = await amqp.connect(brokerUri, {
      clientProperties: { connection_name: `bench bc-floor ${suffix} consumer ${c}` },
    });
    teardown.add(() => connection.close().catch(() => {}));
    connections.push(connection);
  }
  await inParallel(
    names.length,
    8,
    async (i) => {
      const name = names[i];
      queues.add(name);
      const channel = await connections[i % connections.length].createChannel();
      channel.on('error', (err) => {
        failure ??= err;
      });
      await channel.assertQueue(name, {
        durable: true,
        arguments: { ...spec.arguments, 'x-expires': 10 * 60_000 },
      });
      await channel.bindQueue(name, Exchange.msg, key);
      await channel.prefetch(prefetch);
      await channel.consume(
        name,
        (message) => {
          if (message === null) return;
          channel.ack(message);
          const id = message.properties.messageId;
          counts.set(id, (counts.get(id) ?? 0) + 1);
        },
        { noAck: false, exclusive: true },
      );
    },
    (done) => progress.update(done),
  );
  const body = wireSizedBody(textBytes, gatewayConfig.delivery.ttlMs);
  const times = [];
  const publishMs = [];
  for (let round_ = 1; round_ <= settings.warmupRounds + settings.rounds; round_++) {
    const id = `bc${round_}`;
    const started = performance.now();
    await /** @type {Promise<void>} */ (
      new Promise((resolve, reject) =>
        publisher.publish(
          Exchange.msg,
          key,
          body,
          { persistent: true, mandatory: true, messageId: id, contentType: 'application/json' },
          (err) => (err ? reject(err) : resolve()),
        ),
      )
    );
    if (round_ > settings.warmupRounds) publishMs.push(performance.now() - started);
    const deadline = started + ctx.deliveryTimeoutMs;
    while ((counts.get(id) ?? 0) < settings.entities) {
      if (failure) throw failure;
      if (performance.now() > deadline) throw new Error(`floor ${id}: only ${counts.get(id) ?? 0} consumed`);
      await sleep(1);
    }
    if (round_ > settings.warmupRounds) times.push(performance.now() - started);
  }
  await sleep(50);
  const extra = [...counts.values()].some((count) => count !== settings.entities);
  if (extra) throw new Error(`floor: some broadcast was consumed more often than ${settings.entities} times`);
  return { ...summary(times), publish: summary(publishMs) };
}

export const broadcastScenario = {
  name: 'broadcast',
  title: 'one broadcast to 1,000 inboxes over 3 federated gateways',
  steps: 5,
  timeoutMs: 150_000,
  async run(ctx) {
    const settings = {
      entities: intSetting('BENCH_BROADCAST_ENTITIES', 1000, 1),
      gateways: intSetting('BENCH_BROADCAST_GATEWAYS', 3, 1),
      rounds: intSetting('BENCH_BROADCAST_ROUNDS', 5, 1),
      warmupRounds: intSetting('BENCH_BROADCAST_WARMUP_ROUNDS', 1, 0),
    };
    const floor = await withCluster(ctx.brokerUri, (teardown, queues) =>
      floorBroadcast(ctx, settings, teardown, queues),
    );
    console.error(`broadcast: amqplib floor: median ${floor.medianMs} ms, worst ${floor.maxMs} ms`);
    const gateway = await withCluster(ctx.brokerUri, (teardown, queues) =>
      gatewayBroadcast(ctx, settings, teardown, queues),
    );
    console.error(`broadcast: gateways: median ${gateway.medianMs} ms, worst ${gateway.maxMs} ms`);
    const label = `broadcast: 1 → ${settings.entities} entities on ${settings.gateways} gateways (in process)`;
    const base = {
      label,
      unit: 'ms',
      baselineLabel: `amqplib fan-out to ${settings.entities} queues`,
      better: 'lower',
    };
    return {
      settings,
      rows: [
        {
          ...base,
          metric: `all have it, median of ${settings.rounds}`,
          gateway: gateway.medianMs,
          baseline: floor.medianMs,
        },
        {
          ...base,
          metric: `all have it, worst of ${settings.rounds}`,
          gateway: gateway.maxMs,
          baseline: floor.maxMs,
        },
      ].map(finishRow),
      measures: [
        `Gateway: ${settings.gateways} \`new Gateway\`s from dist/ in this process, federated through the shared broker (signing on, trusting each other), ${gateway.perGateway.join(' / ')} recipients each (every other one a worker with a no-op pane, the rest mains), all in one group; a sender on the first calls gateway.broadcast() to that group; timed from the call until every worker’s copy was typed into its pane and every main held its copy (polled every ms). Registration took ${gateway.registerSeconds} s.`,
        `Baseline: raw amqplib on the same broker: ${settings.entities} durable queues with an inbox’s arguments bound to bridge.msg with one broadcast key, consumed over ${settings.gateways} connections (a channel per queue, exclusive, manual ack, the gateway’s prefetch); one persistent, mandatory publish on a confirm channel; timed until all ${settings.entities} copies were acked.`,
        `Rounds: ${settings.rounds} measured after ${settings.warmupRounds} not measured (the first is several times slower, cold), one broadcast at a time; per round, gateway ${gateway.allMs.join(', ')} ms, floor ${floor.allMs.join(', ')} ms. The publish alone (until the broker confirmed it): gateway median ${gateway.publish.medianMs} ms, floor ${floor.publish.medianMs} ms.`,
      ],
      check: gateway.check,
      raw: { gateway, floor },
    };
  },
};
