import { join } from 'node:path';
import pino from 'pino';
import { loadConfig } from '#bridge/config/loadConfig';
import { Gateway } from '#bridge/gateway/Gateway';
import { createLogger } from '#bridge/log/logger';
import { sqliteFloor } from '../lib/floors.mjs';
import { createDeliveryTracker, keyOfText, messageText } from '../lib/measure.mjs';

/**
 * (a) Same-host messages through the internal router, in process: `new Gateway(...)` from dist/
 * with the default config (WAL + synchronous FULL), a fresh event log per scenario, two mains
 * (a → b, b holds: R-DL3) and a worker whose pane injector is a no-op in memory, so only the
 * gateway's own cost is measured.
 */
export function routerScenarios({ count, concurrency }) {
  const common = { count, concurrency, baselines: [sqliteFloor] };
  return [
    {
      ...common,
      name: 'router-accept',
      label: 'router: main → main (held), accept',
      measures: 'gateway.send() until it resolves: the message is durable and held for b',
      open: (ctx) =>
        openGateway(ctx, ({ gateway, a, b }) => ({
          op: (i) => gateway.services.sends.send(a, send(b, i, ctx)),
          verify: () => expectDepth(b, ctx.total, 'b holds every message'),
        })),
    },
    {
      ...common,
      name: 'router-drain',
      label: 'router: main → main, delivered to drain',
      measures: 'gateway.send() until a drain loop on b has returned the message (acked, durable)',
      open: (ctx) =>
        openGateway(ctx, ({ gateway, a, b, tracker }) => {
          let draining = true;
          const drainLoop = (async () => {
            while (draining) {
              const handover = await gateway.services.drains.drain(b);
              handover.confirm(); // in process, the caller has them once the call returns
              const messages = handover.envelopes;
              for (const message of messages) tracker.delivered(keyOfText(message.text));
              if (messages.length === 0) await new Promise(setImmediate);
            }
          })();
          return {
            op: async (i) => {
              const delivered = tracker.wait(`m${i}`);
              await gateway.services.sends.send(a, send(b, i, ctx));
              await delivered;
            },
            verify: () => expectDepth(b, 0, 'b drained everything'),
            close: async () => {
              draining = false;
              await drainLoop;
            },
          };
        }),
    },
    {
      ...common,
      name: 'router-open-send',
      label: 'router: main → main, delivered to open send',
      measures: 'b opens bridge_send(a, wait_ms); a sends to b; until b’s open send returns that message',
      open: (ctx) =>
        openGateway(ctx, ({ gateway, a, b }) => ({
          op: async (i) => {
            const open = gateway.services.sends.send(b, {
              kind: 'SEND',
              to: a.gid,
              text: `open ${i}`,
              waitMs: 60_000,
            });
            await gateway.services.sends.send(a, send(b, i, ctx));
            const { reply, handover } = await open;
            if (!reply) throw new Error(`open send ${i} got no reply`);
            handover?.confirm(); // in process, the caller has it once the call returns
          },
          verify: () => expectDepth(b, 0, 'every message to b went to an open send'),
        })),
    },
    {
      ...common,
      name: 'router-worker',
      label: 'router: main → worker (no-op pane), injected',
      measures: 'gateway.send() until the no-op injector is called with the message (pane typing costs 0)',
      open: (ctx) =>
        openGateway(ctx, ({ gateway, a, worker, tracker }) => ({
          op: async (i) => {
            const injected = tracker.wait(`m${i}`);
            await gateway.services.sends.send(a, send(worker, i, ctx));
            await injected;
          },
          verify: () => expectDepth(worker, 0, 'the worker got everything'),
        })),
    },
  ];
}

function send(recipient, i, { textBytes }) {
  return { kind: 'SEND', to: recipient.gid, text: messageText(i, textBytes) };
}

/** The statements the gateway's event log has committed so far (`bridge_store_rows_written_total`). */
async function rowsWritten(gateway) {
  const metric = await gateway.metrics.registry.getSingleMetric('bridge_store_rows_written_total')?.get();
  return metric?.values[0]?.value ?? 0;
}

function expectDepth(entity, expected, what) {
  if (entity.depth !== expected) {
    throw new Error(
      `${what}: expected ${expected} undelivered for ${entity.record.name}, found ${entity.depth}`,
    );
  }
  return `${what} (depth ${entity.depth})`;
}

/**
 * A gateway in its own data dir under the run's temp dir, with the production config defaults,
 * logging at the default level to a file, and entities a, b (mains) and worker (no-op pane).
 */
async function openGateway(ctx, build) {
  const { dir, name, gatewayConfigFile } = ctx;
  const tracker = createDeliveryTracker();
  const started = await startGateway({
    home: join(dir, name),
    configFile: gatewayConfigFile,
    env: { BRIDGE_HOST_ID: 'bench' },
    onInjected: (text) => tracker.delivered(keyOfText(text)),
  });
  const { gateway, entity } = started;
  const parts = {
    gateway,
    tracker,
    a: await entity('main', 'a'),
    b: await entity('main', 'b'),
    worker: await entity('worker', 'worker', { type: 'tmux', target: '%bench' }),
  };
  const target = build(parts);
  const rowsBefore = await rowsWritten(gateway);
  return {
    op: target.op,
    // What the event log wrote per message, with the check: statements (rows inserted, upserted
    // or deleted) over the run, warm-up included.
    verify: async () =>
      `${await target.verify()}; event log ${(((await rowsWritten(gateway)) - rowsBefore) / ctx.total).toFixed(2)} statements/message`,
    close: async () => {
      await target.close?.();
      await started.stop();
    },
  };
}

/**
 * `new Gateway(...)` from dist/ in this process: config from `env` over `configFile` (or the
 * defaults), as the daemon loads it; its data dir `home`, logs at the default level to a file
 * there, panes that are no-ops (`onInjected` sees the text typed). With BRIDGE_BROKER_URI in `env`
 * it federates, and resolves once it has connected. `entity(kind, name, pane?)` registers a local
 * entity.
 * @param {{ home: string, env?: Record<string, string>, configFile?: string, onInjected?: (text: string) => void }} options
 */
export async function startGateway({ home, env, configFile, onInjected = () => {} }) {
  const { config } = loadConfig({ file: configFile, env: { BRIDGE_HOME: home, ...env } });
  const destination = pino.destination({ dest: join(home, 'gateway.log'), mkdir: true, sync: false });
  const gateway = new Gateway({
    config,
    logger: createLogger({ level: config.log.level, host: config.hostId, destination }),
    createInjector: () => createNoopInjector(onInjected),
    onFatal: (err) => {
      throw err;
    },
  });
  await gateway.start();
  return {
    gateway,
    /**
     * @param {import('#bridge/wire/envelope').EntityKind} kind
     * @param {string} entityName
     * @param {import('#bridge/wire/paneTarget').PaneTarget} [pane]
     */
    entity: async (kind, entityName, pane) =>
      // A token just issued always authenticates.
      /** @type {import('#bridge/deliver/EntityActor').EntityActor} */ (
        gateway.directory.authenticate(
          (await gateway.services.registrations.register({ kind, name: entityName, pane })).token,
        )
      ),
    stop: async () => {
      await gateway.stop();
      destination.end();
    },
  };
}

/**
 * A pane that takes input instantly and is always idle: the gateway's cost alone. It speaks the
 * PaneInjector interface of src/panes/paneInjector.ts: typed, then submitted at once.
 * @param {(text: string) => void} onInjected
 * @returns {import('#bridge/panes/paneInjector').PaneInjector}
 */
function createNoopInjector(onInjected) {
  return {
    type: () => Promise.resolve({ kind: 'typed' }),
    submit(message) {
      // formatInjection: "[bridge SEND from a@host msg <id>] <text>"
      onInjected(message.text.slice(message.text.indexOf('] ') + 2));
      return Promise.resolve({ kind: 'submitted', how: 'no-op pane' });
    },
    inspect: () => Promise.resolve(undefined),
    locate: () => Promise.resolve('submitted'),
    contains: () => Promise.resolve(false),
    watchStatus(listener) {
      queueMicrotask(() => listener('idle'));
      return () => {};
    },
    close: () => Promise.resolve(),
  };
}
