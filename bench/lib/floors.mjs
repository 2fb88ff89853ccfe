import { randomUUID } from 'node:crypto';
import { Agent, request } from 'node:http';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { messageText } from './measure.mjs';
import { spawnNode, waitFor } from './processes.mjs';

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
