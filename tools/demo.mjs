#!/usr/bin/env node
// A self-contained walkthrough on this machine: a gateway, a worker (the stand-in agent in a
// tmux pane of a private tmux server) and a main (an MCP client). The main sends a task and
// waits; the worker's reply comes back on the open send. Prints what happened and the flow's
// trail in the event log, then cleans up everything it started.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import Database from 'better-sqlite3';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(root, 'dist', 'cli', 'main.js');
const home = mkdtempSync(join(tmpdir(), 'bridge-demo-'));
const tmuxSocket = join(home, 'tmux.sock');
const port = await new Promise((resolve) => {
  const s = createServer().listen(0, '127.0.0.1', () => {
    const { port: free } = s.address();
    s.close(() => resolve(free));
  });
});
const env = {
  ...process.env,
  BRIDGE_HOME: join(home, 'gateway'),
  BRIDGE_HOST_ID: 'demo-host',
  BRIDGE_MCP_PORT: String(port),
};
const say = (text) => console.log(`\n▶ ${text}`);
const bridge = (...args) =>
  JSON.parse(execFileSync(process.execPath, [cli, ...args, '--json'], { env }).toString());
const tmux = (...args) => execFileSync('tmux', ['-S', tmuxSocket, '-f', '/dev/null', ...args]).toString();

let gateway;
let client;
try {
  say(`starting a gateway (host demo-host, home ${env.BRIDGE_HOME}, MCP on 127.0.0.1:${port})`);
  gateway = spawn(process.execPath, [cli, 'start'], { env, stdio: 'ignore' });
  for (let i = 0; i < 100; i++) {
    if (
      await fetch(`http://127.0.0.1:${port}/healthz`).then(
        (r) => r.ok,
        () => false,
      )
    )
      break;
    await sleep(100);
  }

  say('opening a tmux pane for the worker and registering it');
  tmux('new-session', '-d', '-x', '160', '-y', '40', '-s', 'demo', 'sleep', '100000');
  const pane = tmux('new-window', '-d', '-P', '-F', '#{pane_id}', '-t', 'demo:', 'sleep', '100000').trim();
  const worker = bridge(
    'register',
    '--kind',
    'worker',
    '--name',
    'coder',
    '--tmux',
    pane,
    '--tmux-socket',
    tmuxSocket,
  );
  console.log(`  worker coder@demo-host  gid ${worker.gid}  pane ${pane}`);
  const agent = join(root, 'tools', 'standInAgent.mjs');
  tmux(
    'respawn-pane',
    '-k',
    '-t',
    pane,
    `BRIDGE_MCP_URL=http://127.0.0.1:${port}/mcp BRIDGE_TOKEN=${worker.token} ${process.execPath} ${agent}`,
  );
  for (let i = 0; i < 100 && !tmux('capture-pane', '-p', '-t', pane).includes('ready'); i++) await sleep(100);

  say('registering a main and connecting it over MCP');
  const main = bridge('register', '--kind', 'main', '--name', 'lead');
  client = new Client({ name: 'demo-main', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${main.token}` } },
    }),
  );

  say('lead → coder: bridge_send {to: "coder", text: "add a --verbose flag", wait_ms: 20000}');
  const result = await client.callTool({
    name: 'bridge_send',
    arguments: { to: 'coder', text: 'add a --verbose flag', wait_ms: 20_000 },
  });
  const sent = result.structuredContent;
  console.log(`  msgId ${sent.msgId}  traceId ${sent.traceId}`);
  console.log(`  reply from ${sent.reply?.from.name}: "${sent.reply?.text}"`);

  say('what the worker’s pane shows');
  console.log(
    tmux('capture-pane', '-p', '-t', pane)
      .split('\n')
      .filter(Boolean)
      .map((l) => `  │ ${l}`)
      .join('\n'),
  );

  say('roster');
  for (const e of bridge('roster')) console.log(`  ${e.name}@${e.host}  ${e.kind}  ${e.status}`);

  say(`the flow in the event log (${env.BRIDGE_HOME}/events.db, trace ${sent.traceId})`);
  const db = new Database(join(env.BRIDGE_HOME, 'events.db'), { readonly: true });
  for (const row of db
    .prepare(
      'SELECT hlc, actor_kind, event, from_state, to_state FROM events WHERE trace_id = ? ORDER BY seq',
    )
    .all(sent.traceId)) {
    console.log(
      `  ${row.hlc}  ${row.actor_kind.padEnd(8)} ${row.event.padEnd(22)} ${row.from_state ?? '∅'} → ${row.to_state}`,
    );
  }
  db.close();
  console.log('\ndone.');
} finally {
  await client?.close().catch(() => {});
  gateway?.kill('SIGTERM');
  try {
    tmux('kill-server');
  } catch {}
  await sleep(300);
  rmSync(home, { recursive: true, force: true });
}
