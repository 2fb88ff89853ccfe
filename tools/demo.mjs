#!/usr/bin/env node
// A self-contained cross-host walkthrough on this machine: two gateways (hosts alpha and beta)
// federated through the local RabbitMQ, a main on alpha (an MCP client) and a worker on beta
// (the stand-in agent, in a pane of a private tmux server). The main sends a task and waits;
// the worker's reply comes back on the open send; then a broadcast goes out. Prints what
// happened and where the event logs are, then removes everything it made.
// Env: BRIDGE_DEMO_BROKER_URI (default amqp://guest:guest@127.0.0.1:5672), BRIDGE_DEMO_KEEP=1
// keeps the temp dir with both event logs.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import amqp from 'amqplib';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(root, 'dist', 'cli', 'main.js');
const brokerUri = process.env.BRIDGE_DEMO_BROKER_URI ?? 'amqp://guest:guest@127.0.0.1:5672';
const dir = mkdtempSync(join(tmpdir(), 'bridge-demo-'));
const tmuxSocket = join(dir, 'tmux.sock');
// Host ids and deployment of this run only: the broker may be shared with other deployments,
// even ones whose hosts are called alpha and beta; the demo touches nothing but its own.
const run = Math.random().toString(36).slice(2, 7);
const deployment = `demo-${run}`;
const say = (text) => console.log(`\n▶ ${text}`);
const tmux = (...args) => execFileSync('tmux', ['-S', tmuxSocket, '-f', '/dev/null', ...args]).toString();

async function freePort() {
  return new Promise((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = /** @type {import('node:net').AddressInfo} */ (server.address());
      server.close(() => resolve(port));
    });
  });
}

async function gatewayOn(host) {
  const port = await freePort();
  const env = {
    ...process.env,
    BRIDGE_HOME: join(dir, host),
    BRIDGE_HOST_ID: host,
    BRIDGE_MCP_PORT: String(port),
    BRIDGE_BROKER_URI: brokerUri,
    BRIDGE_DEPLOYMENT: deployment,
    BRIDGE_LOG_LEVEL: 'warn',
  };
  const child = spawn(process.execPath, [cli, 'start'], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (c) => {
    stderr += c;
  });
  for (let i = 0; i < 150; i++) {
    if (child.exitCode !== null) throw new Error(`gateway ${host} exited:\n${stderr}`);
    if (
      await fetch(`http://127.0.0.1:${port}/healthz`).then(
        (r) => r.ok,
        () => false,
      )
    )
      break;
    await sleep(100);
  }
  const bridge = (...args) =>
    JSON.parse(execFileSync(process.execPath, [cli, ...args, '--json'], { env }).toString());
  return { host, port, env, child, bridge, mcpUrl: `http://127.0.0.1:${port}/mcp` };
}

async function mcpClient(url, token) {
  const client = new Client({ name: 'demo-main', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(url), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    }),
  );
  return client;
}

const gateways = [];
let client;
let failed = false;
try {
  const probe = await amqp.connect(brokerUri).catch((err) => {
    throw new Error(
      `the demo needs RabbitMQ at ${brokerUri} (${err.message}); start it or set BRIDGE_DEMO_BROKER_URI`,
    );
  });
  await probe.close();

  say('the broker operator declares the shared exchanges and bridge.dlq once: agentbridge broker setup');
  execFileSync(process.execPath, [cli, 'broker', 'setup'], {
    env: { ...process.env, BRIDGE_BROKER_URI: brokerUri },
    stdio: ['ignore', 'ignore', 'inherit'],
  });

  say(
    `starting two gateways, alpha-${run} and beta-${run} (deployment ${deployment}), federated through RabbitMQ`,
  );
  const alpha = await gatewayOn(`alpha-${run}`);
  const beta = await gatewayOn(`beta-${run}`);
  gateways.push(alpha, beta);

  say(
    "each gateway trusts the other's signing key (made at first start): agentbridge keys show / agentbridge trust add",
  );
  for (const [self, peer] of [
    [alpha, beta],
    [beta, alpha],
  ]) {
    const key = peer.bridge('keys', 'show');
    self.bridge('trust', 'add', peer.host, key.publicKey);
    console.log(`  ${self.host} trusts ${peer.host}: ${key.publicKey}`);
  }
  console.log(`  alpha: MCP on 127.0.0.1:${alpha.port}, home ${alpha.env.BRIDGE_HOME}`);
  console.log(`  beta:  MCP on 127.0.0.1:${beta.port}, home ${beta.env.BRIDGE_HOME}`);

  say('beta: a worker pane with the stand-in agent, registered as "coder"');
  tmux('new-session', '-d', '-x', '160', '-y', '40', '-s', 'demo', 'sleep', '100000');
  const pane = tmux('new-window', '-d', '-P', '-F', '#{pane_id}', '-t', 'demo:', 'sleep', '100000').trim();
  const worker = beta.bridge(
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
  const agent = join(root, 'tools', 'standInAgent.mjs');
  tmux(
    'respawn-pane',
    '-k',
    '-t',
    pane,
    `BRIDGE_MCP_URL=${beta.mcpUrl} BRIDGE_TOKEN=${worker.token} ${process.execPath} ${agent}`,
  );
  for (let i = 0; i < 100 && !tmux('capture-pane', '-p', '-t', pane).includes('ready'); i++) await sleep(100);

  say('alpha: a main registered as "lead", connected over MCP');
  const main = alpha.bridge('register', '--kind', 'main', '--name', 'lead');
  client = await mcpClient(alpha.mcpUrl, main.token);
  for (let i = 0; i < 100; i++) {
    if (alpha.bridge('roster').some((e) => e.name === 'coder')) break;
    await sleep(100);
  }
  console.log('  alpha’s roster (presence from beta included):');
  for (const e of alpha.bridge('roster'))
    console.log(`    ${`${e.name}@${e.host}`.padEnd(14)} ${e.kind.padEnd(7)} ${e.status}`);

  say(
    `lead@${alpha.host} → coder@${beta.host}: bridge_send {to: "coder@${beta.host}", text: "add a --verbose flag", wait_ms: 20000}`,
  );
  const result = await client.callTool({
    name: 'bridge_send',
    arguments: { to: `coder@${beta.host}`, text: 'add a --verbose flag', wait_ms: 20_000 },
  });
  if (result.isError) throw new Error(result.content?.[0]?.text);
  const sent =
    /** @type {{ msgId: string, traceId: string, reply?: { from: { name: string, host: string }, text: string } | null }} */ (
      result.structuredContent
    );
  console.log(`  msgId ${sent.msgId}, traceId ${sent.traceId}`);
  console.log(
    `  reply on the open send, from ${sent.reply?.from.name}@${sent.reply?.from.host}: "${sent.reply?.text}"`,
  );

  say('lead broadcasts to everyone: bridge_broadcast {text: "wrap up and report"}');
  const broadcast = await client.callTool({
    name: 'bridge_broadcast',
    arguments: { text: 'wrap up and report' },
  });
  const published = /** @type {{ key: string, msgId: string }} */ (broadcast.structuredContent);
  console.log(`  published once to ${published.key} (msgId ${published.msgId})`);
  await sleep(500);

  say('what coder’s pane on beta shows');
  console.log(
    tmux('capture-pane', '-p', '-t', pane)
      .split('\n')
      .filter(Boolean)
      .map((l) => `  │ ${l}`)
      .join('\n'),
  );

  say(
    `post-mortem of the task's flow (trace ${sent.traceId}): agentbridge export on each host, agentbridge replay`,
  );
  const exports = [alpha, beta].map((g) => {
    const out = join(dir, `${g.host}.ndjson`);
    g.bridge('export', '--trace', sent.traceId, '--out', out);
    console.log(`  agentbridge export --trace ${sent.traceId} --out ${out}   (on ${g.host})`);
    return out;
  });
  console.log(`  agentbridge replay --trace ${sent.traceId} ${exports.join(' ')}`);
  const replay = execFileSync(process.execPath, [cli, 'replay', '--trace', sent.traceId, ...exports], {
    env: alpha.env,
  }).toString();
  console.log(replay.replace(/^/gm, '  ').trimEnd());

  say('cleaning up: deregistering (which deletes the inboxes), stopping the gateways');
  beta.bridge('deregister', 'coder');
  alpha.bridge('deregister', 'lead');
} catch (err) {
  failed = true;
  console.error(`\ndemo failed: ${err.message}`);
} finally {
  await client?.close().catch(() => {});
  for (const g of gateways) g.child.kill('SIGTERM');
  await Promise.all(
    gateways.map(
      (g) =>
        /** @type {Promise<void>} */ (
          new Promise((r) => (g.child.exitCode === null ? g.child.once('exit', r) : r()))
        ),
    ),
  );
  const connection = await amqp.connect(brokerUri).catch(() => undefined);
  if (connection) {
    const channel = await connection.createChannel();
    // Only this run's own control queues (its host ids are its own).
    for (const g of gateways) await channel.deleteQueue(`control.${g.host}`).catch(() => {});
    await connection.close().catch(() => {});
  }
  try {
    tmux('kill-server');
  } catch {}
  if (process.env.BRIDGE_DEMO_KEEP) console.log(`kept ${dir}`);
  else rmSync(dir, { recursive: true, force: true });
  console.log(failed ? '' : '\ndone.');
  process.exitCode = failed ? 1 : 0;
}
