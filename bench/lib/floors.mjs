import { randomBytes, randomUUID } from 'node:crypto';
import { Agent, request } from 'node:http';
import { join } from 'node:path';
import amqp from 'amqplib';
import BetterSqlite3 from 'better-sqlite3';
import { Exchange, inboxSpec, QueueMode } from '#bridge/federation/topology';
import { encodeEnvelope } from '#bridge/wire/codec';
import { schemaVersionString, WireKind } from '#bridge/wire/envelope';
import { encodeHlc } from '#bridge/wire/hlc';
import { uuidv7 } from '#bridge/wire/ids';
import { deleteQueues, localBrokerCpuMs } from './broker.mjs';
import { callTool, connectLanes } from './daemon.mjs';
import { createDeliveryTracker, messageText, processCpuMs } from './measure.mjs';
import { createTeardown, spawnNode, waitFor } from './processes.mjs';

/**
 * The baselines ("floors") each gateway scenario is compared with. Like a scenario, a floor
 * opens a target `{ op(i, lane), close() }` that the shared `measure` helper drives with the
 * same message count, concurrency and text size.
 */

/**
 * The durability floor: one row per message in a SQLite file next to the gateway's, with the
 * gateway's own settings (WAL, `synchronous` from the default config: FULL), the rows of one
 * tick (setImmediate) committed in one transaction, each writer resolved after its commit.
 * What the gateway costs beyond this is its own overhead.
 */
export const sqliteFloor = {
  id: 'sqlite',
  label: 'sqlite floor',
  measures:
    'better-sqlite3 on a file in the same temp dir, same pragmas (WAL, synchronous as in the default config), ' +
    'one INSERT per message, the inserts of one tick (setImmediate) in one transaction, each resolved after its commit',
  async open({ dir, name, textBytes, synchronous }) {
    const db = new BetterSqlite3(join(dir, `floor-${name}.db`));
    db.pragma('journal_mode = WAL');
    db.pragma(`synchronous = ${synchronous}`);
    db.exec('CREATE TABLE messages (seq INTEGER PRIMARY KEY, msg_id TEXT NOT NULL, body TEXT NOT NULL)');
    const insert = db.prepare('INSERT INTO messages (msg_id, body) VALUES (?, ?)');
    const insertAll = db.transaction((rows) => {
      for (const row of rows) insert.run(row.msgId, row.body);
    });
    let pending = [];
    const commit = () => {
      const rows = pending;
      pending = [];
      try {
        insertAll(rows);
      } catch (err) {
        for (const row of rows) row.reject(err);
        return;
      }
      for (const row of rows) row.resolve();
    };
    return {
      op: (i) =>
        new Promise((resolve, reject) => {
          if (pending.length === 0) setImmediate(commit);
          pending.push({ msgId: randomUUID(), body: messageText(i, textBytes), resolve, reject });
        }),
      close: async () => db.close(),
    };
  },
};

/**
 * The transport floor for the MCP scenario: a keep-alive node:http client POSTing the same
 * JSON-RPC `tools/call` body to a plain JSON echo server running as its own process, as the
 * daemon does.
 */
export const httpEchoFloor = {
  id: 'http',
  label: 'http echo floor',
  measures:
    'keep-alive node:http client POSTing the same JSON-RPC tools/call body to a node:http JSON echo server ' +
    'in its own process (the transport floor), one connection per lane',
  async open({ textBytes, concurrency }) {
    const server = spawnNode([new URL('../echoServer.mjs', import.meta.url).pathname]);
    const port = await waitFor(async () => /"port":(\d+)/.exec(server.output())?.[1], {
      what: 'echo server',
      process: server,
    });
    const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
    const url = `http://127.0.0.1:${port}/`;
    return {
      cpuMs: server.cpuMs,
      op: (i) => postJson(url, agent, toolCallBody(i, textBytes)),
      close: async () => {
        agent.destroy();
        await server.stop();
      },
    };
  },
};

/**
 * The MCP SDK floors: the official SDK's server and client with nothing of bridge between them.
 * bench/mcpEchoServer.mjs runs in its own process, in one of its transport variants, and serves
 * a tool shaped like bridge_send that only echoes; one SDK client per lane calls it, as the
 * MCP scenario's clients call the daemon. The gap between such a floor and the HTTP echo floor is
 * what the transport costs; the gap between it and the daemon is what bridge's tool costs.
 */
export const mcpSdkFloors = [
  ['session-sse', 'a session per client, a server per session, SSE responses (the gateway today)'],
  ['session-json', 'a session per client, a server per session, JSON responses'],
  ['stateless-json', 'no session, a new server and transport per request, JSON responses'],
].map(([variant, how]) => ({
  id: `mcp-${variant}`,
  label: `mcp sdk echo (${variant})`,
  measures: `MCP SDK client → SDK server echo tool in its own process: ${how}`,
  async open({ textBytes, concurrency }) {
    const server = spawnNode([new URL('../mcpEchoServer.mjs', import.meta.url).pathname, variant]);
    const port = await waitFor(async () => /"port":(\d+)/.exec(server.output())?.[1], {
      what: `MCP echo server (${variant})`,
      process: server,
    });
    const clients = await connectLanes(`http://127.0.0.1:${port}/mcp`, 'floor', concurrency).catch(
      async (err) => {
        await server.stop();
        throw err;
      },
    );
    return {
      cpuMs: server.cpuMs,
      op: (i, lane) => callTool(clients[lane], 'bridge_send', { to: 'b', text: messageText(i, textBytes) }),
      close: async () => {
        await Promise.all(clients.map((client) => client.close()));
        await server.stop();
      },
    };
  },
}));

/** The JSON-RPC body an MCP client sends for one bridge_send. */
function toolCallBody(i, textBytes) {
  return {
    jsonrpc: '2.0',
    id: i,
    method: 'tools/call',
    params: { name: 'bridge_send', arguments: { to: 'b', text: messageText(i, textBytes) } },
  };
}

function postJson(url, agent, payload) {
  const body = JSON.stringify(payload);
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        const chunks = [];
        res.on('data', (chunk) => chunks.push(chunk));
        res.on('end', () => {
          if (res.statusCode !== 200) reject(new Error(`echo server answered ${res.statusCode}`));
          else resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * The transport floor for the cross-host scenarios: what RabbitMQ alone costs for the same
 * semantics, with raw amqplib on the same broker. A confirm channel publishes each message
 * persistent and mandatory, with the gateway's publish properties (messageId, content type,
 * headers, per-message TTL) and a body as long as the gateway's envelope, through `bridge.msg` to
 * a durable queue declared with an inbox's arguments (x-max-length, reject-publish-dlx, DLX); a
 * second connection consumes it exclusively, manual ack, with the gateway's prefetch. One
 * operation: publish until it is consumed and acked. The queue has a unique name, is deleted at
 * close (and has `x-expires`, in case the run is killed outright).
 */
export const amqpFloor = {
  id: 'amqp',
  label: 'amqplib floor',
  measures:
    'raw amqplib on the same broker: confirm channel, persistent + mandatory publish with the gateway’s properties ' +
    'and wire size through bridge.msg to a durable queue with an inbox’s arguments; a second connection consuming ' +
    'it (exclusive, manual ack, the gateway’s prefetch); from publish until the consumer has acked it',
  async open({ name, textBytes, brokerUri, gatewayConfig, deliveryTimeoutMs }) {
    const teardown = createTeardown();
    try {
      return await openAmqpFloor({ name, textBytes, brokerUri, gatewayConfig, deliveryTimeoutMs, teardown });
    } catch (err) {
      await teardown.run().catch(() => {});
      throw err;
    }
  },
};

async function openAmqpFloor({ name, textBytes, brokerUri, gatewayConfig, deliveryTimeoutMs, teardown }) {
  const { prefetch, inboxMaxLength, deployment } = gatewayConfig.broker;
  const ttlMs = gatewayConfig.delivery.ttlMs;
  const routingKey = randomUUID();
  const queue = `bench.${name}.${randomBytes(4).toString('hex')}`;
  const tracker = createDeliveryTracker({ timeoutMs: deliveryTimeoutMs });
  const body = wireSizedBody(textBytes, ttlMs);
  const properties = {
    persistent: true,
    mandatory: true,
    contentType: 'application/json',
    headers: { 'x-bridge-host': `bench-floor-${randomBytes(3).toString('hex')}`, 'x-bridge-trace': uuidv7() },
    expiration: String(ttlMs),
  };

  const publishing = await amqp.connect(brokerUri, {
    clientProperties: { connection_name: `bench ${queue} publish` },
  });
  teardown.add(() => publishing.close().catch(() => {}));
  const publisher = await publishing.createConfirmChannel();
  const returned = new Set();
  publisher.on('return', (message) => returned.add(message.properties.messageId));
  await publisher.assertExchange(Exchange.msg, 'topic', { durable: true });
  teardown.add(() => deleteQueues(brokerUri, [queue]));
  // Only the spec's queue arguments are used (the queue is bound to routingKey alone below).
  const inbox = inboxSpec({
    gid: routingKey,
    deployment,
    groups: [],
    mode: QueueMode.classic,
    maxLength: inboxMaxLength,
  });
  await publisher.assertQueue(queue, {
    durable: true,
    arguments: { ...inbox.arguments, 'x-expires': 10 * 60_000 },
  });
  await publisher.bindQueue(queue, Exchange.msg, routingKey);

  const consuming = await amqp.connect(brokerUri, {
    clientProperties: { connection_name: `bench ${queue} consume` },
  });
  teardown.add(() => consuming.close().catch(() => {}));
  const consumer = await consuming.createChannel();
  consumer.on('error', (err) => tracker.fail(err));
  await consumer.prefetch(prefetch);
  await consumer.consume(
    queue,
    (message) => {
      if (message === null) {
        tracker.fail(new Error(`the broker cancelled the consumer of ${queue}`));
        return;
      }
      consumer.ack(message);
      tracker.delivered(message.properties.messageId);
    },
    { noAck: false, exclusive: true },
  );

  const brokerCpuMs = localBrokerCpuMs(brokerUri);
  return {
    sideCpuMs: {
      'amqplib clients (this process)': processCpuMs,
      ...(brokerCpuMs ? { broker: brokerCpuMs } : {}),
    },
    op: async (i) => {
      const key = `m${i}`;
      const consumed = tracker.wait(key);
      consumed.catch(() => {}); // awaited below; only a failed publish leaves it unawaited
      await /** @type {Promise<void>} */ (
        new Promise((resolve, reject) => {
          // Like the gateway, no wait for 'drain': a closed loop of a few lanes never fills the buffer.
          publisher.publish(Exchange.msg, routingKey, body, { ...properties, messageId: key }, (err) => {
            if (returned.delete(key))
              reject(new Error(`${key} was returned: no queue bound to ${routingKey}`));
            else if (err) reject(new Error(`${key} was nacked: ${err.message ?? err}`));
            else resolve();
          });
        })
      );
      await consumed;
    },
    close: () => teardown.run(),
  };
}

/** A body as long as the gateway's wire envelope for a `textBytes` text (a real one, encoded). */
export function wireSizedBody(textBytes, ttlMs) {
  const now = Date.now();
  return encodeEnvelope({
    v: schemaVersionString,
    kind: WireKind.send,
    msgId: uuidv7(now),
    traceId: uuidv7(now),
    hlc: encodeHlc({ wall: now, counter: 0 }),
    from: { gid: randomUUID(), name: 'src', host: 'bench-a-000000', kind: 'main' },
    to: randomUUID(),
    text: messageText(0, textBytes),
    expiresAt: now + ttlMs,
  });
}
