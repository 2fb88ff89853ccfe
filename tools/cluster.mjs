#!/usr/bin/env node
/**
 * A local RabbitMQ cluster for tests and for trying several brokers on one machine.
 *
 *   node tools/cluster.mjs start [--nodes 3] [--port 5701] [--dir DIR] [--name bridge-cluster]
 *   node tools/cluster.mjs status            JSON: each node's name, AMQP URI, running, in the cluster
 *   node tools/cluster.mjs kill NODE         kill -9 the node's Erlang VM (a crash, not a clean stop)
 *   node tools/cluster.mjs start-node NODE   bring a killed or stopped node back; it rejoins
 *   node tools/cluster.mjs stop-node NODE    clean stop of one node
 *   node tools/cluster.mjs stop [--keep]     stop every node; remove DIR unless --keep
 *
 * NODE is a node's number (1..N) or its name. DIR defaults to $BRIDGE_CLUSTER_DIR or
 * /tmp/bridge-cluster; every command after `start` finds the cluster's layout in DIR/cluster.json.
 *
 * Nodes come from the Debian package (/usr/lib/rabbitmq/bin, or $BRIDGE_RABBITMQ_BIN). Node k is
 * `<name>-k@localhost`, AMQP on 127.0.0.1:<port+k-1>, Erlang distribution on that port + 20000
 * (5701 → 25701): nothing of the machine's default node (rabbit@localhost, 5672/25672,
 * /var/lib/rabbitmq, its cookie) is read or touched. Each node gets an environment of its own:
 * HOME=DIR holds the cluster's own Erlang cookie, RABBITMQ_CONF_ENV_FILE keeps
 * /etc/rabbitmq/rabbitmq-env.conf out, the config, conf.d, advanced.config and enabled-plugins
 * paths point into DIR (no plugins), data and logs live in DIR/node-k. Run as root, nodes and
 * CLI calls run as the `rabbitmq` user (the Debian wrappers in /usr/sbin would drop this
 * environment); run as another user, they run as that user.
 *
 * Nodes 2..N join node 1 with `rabbitmqctl stop_app / join_cluster / start_app` (RabbitMQ
 * clustering guide). A node that crashed or was stopped keeps its data dir and, started again,
 * rejoins by itself; `start` on a cluster that already runs reuses it.
 *
 * The same operations are exported for tests (typed in cluster.d.mts).
 */
import { execFile, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chownSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { createServer, connect as netConnect } from 'node:net';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

export const DEFAULT_DIR = '/tmp/bridge-cluster';
export const DEFAULT_NODES = 3;
export const DEFAULT_PORT = 5701;
export const DEFAULT_NAME = 'bridge-cluster';
/** The machine's default node: never ours, whatever the options say. */
const RESERVED_PORTS = new Set([5672, 25672, 4369]);
const DIST_OFFSET = 20_000;
const NODE_START_TIMEOUT_MS = 120_000;

/** An error whose message says what happened and what to do. */
export class ClusterError extends Error {
  name = 'ClusterError';
}

/** @param {{ dir?: string }} [opts] */
function clusterDir(opts = {}) {
  return resolve(opts.dir ?? process.env.BRIDGE_CLUSTER_DIR ?? DEFAULT_DIR);
}

function binDir() {
  return process.env.BRIDGE_RABBITMQ_BIN ?? '/usr/lib/rabbitmq/bin';
}

function requireRabbitmq() {
  const bin = binDir();
  for (const tool of ['rabbitmq-server', 'rabbitmqctl']) {
    if (!existsSync(join(bin, tool))) {
      throw new ClusterError(
        `${tool} not found in ${bin}: install RabbitMQ (Debian/Ubuntu: apt-get install rabbitmq-server) ` +
          'or set BRIDGE_RABBITMQ_BIN to the directory holding rabbitmq-server and rabbitmqctl',
      );
    }
  }
}

/** Root runs RabbitMQ as the `rabbitmq` user; anyone else runs it as themselves. */
function brokerUser() {
  if (process.getuid?.() !== 0) return undefined;
  try {
    const uid = Number(execFileSync('id', ['-u', 'rabbitmq'], { stdio: ['ignore', 'pipe', 'ignore'] }));
    const gid = Number(execFileSync('id', ['-g', 'rabbitmq'], { stdio: ['ignore', 'pipe', 'ignore'] }));
    return { uid, gid };
  } catch {
    throw new ClusterError(
      'running as root but there is no `rabbitmq` user: RabbitMQ nodes should not run as root; ' +
        'install the rabbitmq-server package (it creates the user) or run this as an ordinary user',
    );
  }
}

/** The command line that runs `file args` as the broker's user. */
function asBrokerUser(file, args) {
  const user = brokerUser();
  if (!user) return { file, args };
  return {
    file: 'setpriv',
    args: ['--reuid', String(user.uid), '--regid', String(user.gid), '--init-groups', file, ...args],
  };
}

function chownTree(path, user) {
  chownSync(path, user.uid, user.gid);
  if (statSync(path).isDirectory()) for (const entry of readdirSync(path)) chownTree(join(path, entry), user);
}

// ---------------------------------------------------------------- layout

/**
 * @typedef {{ index: number, name: string, amqpPort: number, distPort: number }} NodeLayout
 * @typedef {{ dir: string, name: string, nodes: NodeLayout[] }} Layout
 */

function layoutFile(dir) {
  return join(dir, 'cluster.json');
}

/** @returns {Layout | undefined} */
function readLayout(dir) {
  try {
    return JSON.parse(readFileSync(layoutFile(dir), 'utf8'));
  } catch {
    return undefined;
  }
}

/** @returns {Layout} */
function requireLayout(dir) {
  const layout = readLayout(dir);
  if (!layout) {
    throw new ClusterError(
      `no cluster in ${dir}: start one with \`node tools/cluster.mjs start --dir ${dir}\``,
    );
  }
  return layout;
}

/** @returns {Layout} */
function planLayout(dir, count, port, name) {
  if (!Number.isInteger(count) || count < 1)
    throw new ClusterError(`--nodes must be a whole number ≥ 1, not ${count}`);
  if (!Number.isInteger(port) || port < 1024)
    throw new ClusterError(`--port must be a port number ≥ 1024, not ${port}`);
  if (!/^[A-Za-z0-9_-]+$/.test(name))
    throw new ClusterError(`--name may hold letters, digits, - and _ only, not "${name}"`);
  if (name === 'rabbit')
    throw new ClusterError('--name rabbit would clash with the default node rabbit@localhost: pick another');
  const nodes = [];
  for (let index = 1; index <= count; index++) {
    const amqpPort = port + index - 1;
    const distPort = amqpPort + DIST_OFFSET;
    for (const p of [amqpPort, distPort]) {
      if (RESERVED_PORTS.has(p) || p > 65_535) {
        throw new ClusterError(
          `port ${p} (node ${index}) belongs to the default RabbitMQ node or does not exist: pass --port with another base (e.g. ${DEFAULT_PORT})`,
        );
      }
    }
    nodes.push({ index, name: `${name}-${index}@localhost`, amqpPort, distPort });
  }
  return { dir, name, nodes };
}

/** @param {Layout} layout */
function pickNode(layout, which) {
  const node = layout.nodes.find(
    (n) => String(n.index) === String(which) || n.name === which || n.name.split('@')[0] === which,
  );
  if (!node) {
    throw new ClusterError(
      `no node "${which}" in ${layout.dir}: give a number 1..${layout.nodes.length} or one of ${layout.nodes.map((n) => n.name).join(', ')}`,
    );
  }
  return node;
}

function nodeDir(layout, node) {
  return join(layout.dir, `node-${node.index}`);
}

function pidFile(layout, node) {
  return join(nodeDir(layout, node), 'beam.pid');
}

function uriOf(node) {
  return `amqp://guest:guest@127.0.0.1:${node.amqpPort}`;
}

/** The environment a node and the CLI tools talking to it get, and nothing else. */
function brokerEnv(layout, node) {
  const env = {
    PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin',
    // The Elixir CLI warns and mangles output without a UTF-8 locale.
    LANG: 'C.UTF-8',
    LC_ALL: 'C.UTF-8',
    // Erlang reads $HOME/.erlang.cookie: the cluster's own cookie, not the default node's.
    HOME: layout.dir,
    RABBITMQ_CONF_ENV_FILE: join(layout.dir, 'rabbitmq-env.conf'),
    ERL_EPMD_ADDRESS: '127.0.0.1',
  };
  if (!node) return env;
  const home = nodeDir(layout, node);
  return {
    ...env,
    RABBITMQ_NODENAME: node.name,
    RABBITMQ_NODE_IP_ADDRESS: '127.0.0.1',
    RABBITMQ_NODE_PORT: String(node.amqpPort),
    RABBITMQ_DIST_PORT: String(node.distPort),
    RABBITMQ_MNESIA_BASE: join(home, 'mnesia'),
    RABBITMQ_LOG_BASE: join(home, 'log'),
    RABBITMQ_PID_FILE: pidFile(layout, node),
    RABBITMQ_CONFIG_FILE: join(layout.dir, 'rabbitmq.conf'),
    RABBITMQ_CONFIG_FILES: join(layout.dir, 'conf.d'),
    RABBITMQ_ADVANCED_CONFIG_FILE: join(layout.dir, 'advanced.config'),
    RABBITMQ_ENABLED_PLUGINS_FILE: join(layout.dir, 'enabled_plugins'),
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS: '-kernel inet_dist_use_interface {127,0,0,1}',
  };
}

/**
 * @param {Layout} layout
 * @param {number} [netTicktime] seconds without a sign of life after which the nodes take a
 *   peer for down (Erlang's net_ticktime, default 60)
 */
function writeLayout(layout, netTicktime) {
  mkdirSync(layout.dir, { recursive: true });
  writeFileSync(
    join(layout.dir, 'rabbitmq-env.conf'),
    '# Empty on purpose: this cluster takes its settings from its own environment, not /etc/rabbitmq.\n',
  );
  writeFileSync(
    join(layout.dir, 'rabbitmq.conf'),
    '# Listeners, names and paths come from the environment.\n' +
      (netTicktime === undefined ? '' : `net_ticktime = ${netTicktime}\n`),
  );
  writeFileSync(join(layout.dir, 'enabled_plugins'), '[].\n');
  mkdirSync(join(layout.dir, 'conf.d'), { recursive: true });
  const cookie = join(layout.dir, '.erlang.cookie');
  if (!existsSync(cookie))
    writeFileSync(cookie, randomBytes(24).toString('hex').toUpperCase(), { mode: 0o400 });
  for (const node of layout.nodes) {
    mkdirSync(join(nodeDir(layout, node), 'mnesia'), { recursive: true });
    mkdirSync(join(nodeDir(layout, node), 'log'), { recursive: true });
  }
  writeFileSync(layoutFile(layout.dir), `${JSON.stringify(layout, null, 2)}\n`);
  const user = brokerUser();
  if (user) chownTree(layout.dir, user);
}

// ---------------------------------------------------------------- processes

/** The node's Erlang VM pid, if it is alive (and still a BEAM, not a reused pid). */
function vmPid(layout, node) {
  let pid;
  try {
    pid = Number(readFileSync(pidFile(layout, node), 'utf8').trim());
  } catch {
    return undefined;
  }
  if (!(pid > 0)) return undefined;
  try {
    process.kill(pid, 0);
  } catch (err) {
    if (err.code !== 'EPERM') return undefined;
  }
  try {
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    if (!cmdline.includes('beam')) return undefined;
    const environ = readFileSync(`/proc/${pid}/environ`, 'utf8');
    if (!environ.split('\0').includes(`RABBITMQ_NODENAME=${node.name}`)) return undefined;
  } catch {
    // no /proc (or not ours to read): trust the pid file
  }
  return pid;
}

function acceptsTcp(port, timeoutMs = 1_000) {
  return new Promise((resolveAccepts) => {
    const socket = netConnect({ host: '127.0.0.1', port });
    const done = (ok) => {
      socket.destroy();
      resolveAccepts(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

function portIsFree(port) {
  return new Promise((resolveFree) => {
    const server = createServer();
    server.once('error', () => resolveFree(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolveFree(true)));
  });
}

/**
 * The lowest base ≥ `from` whose `count` AMQP ports and their distribution ports are all free.
 * For tests that must not clash with a cluster someone else runs on the default ports.
 */
export async function findFreePortBase(count = DEFAULT_NODES, from = 5800) {
  for (let base = from; base + count - 1 + DIST_OFFSET <= 65_535; base += count) {
    const ports = [];
    for (let i = 0; i < count; i++) ports.push(base + i, base + i + DIST_OFFSET);
    if (ports.some((p) => RESERVED_PORTS.has(p))) continue;
    let free = true;
    for (const p of ports) {
      if (!(await portIsFree(p))) {
        free = false;
        break;
      }
    }
    if (free) return base;
  }
  throw new ClusterError(`no free range of ${count} ports from ${from}`);
}

/** Runs `rabbitmqctl -n NODE args` with the cluster's cookie; resolves to stdout. */
function rabbitmqctl(layout, node, args, timeoutMs = 90_000) {
  const { file, args: argv } = asBrokerUser(join(binDir(), 'rabbitmqctl'), ['-n', node.name, ...args]);
  return new Promise((resolveCtl, rejectCtl) => {
    execFile(
      file,
      argv,
      { env: brokerEnv(layout), cwd: layout.dir, timeout: timeoutMs },
      (err, stdout, stderr) => {
        if (err) {
          const detail = (stderr || stdout || err.message).trim().split('\n').slice(0, 8).join('\n');
          rejectCtl(new ClusterError(`rabbitmqctl -n ${node.name} ${args.join(' ')} failed: ${detail}`));
        } else resolveCtl(stdout);
      },
    );
  });
}

/** `cluster_status` as seen by `node`: its disc nodes and the running ones. */
async function clusterStatusOf(layout, node) {
  const out = await rabbitmqctl(layout, node, ['cluster_status', '--formatter', 'json'], 30_000);
  const start = out.indexOf('{');
  let parsed;
  try {
    parsed = JSON.parse(out.slice(start === -1 ? out.length : start));
  } catch {
    // A node still booting can answer with a line of text instead (seen under load).
    throw new ClusterError(`${node.name}: cluster_status gave no status yet: ${out.trim().slice(0, 200)}`);
  }
  return {
    clusterName: parsed.cluster_name,
    members: [...(parsed.disk_nodes ?? []), ...(parsed.ram_nodes ?? [])],
    running: parsed.running_nodes ?? [],
  };
}

function tail(path, lines = 30) {
  try {
    return readFileSync(path, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

function postMortem(layout, node) {
  const home = nodeDir(layout, node);
  const logs = join(home, 'log');
  let text = `--- ${join(home, 'server.out')}\n${tail(join(home, 'server.out'))}`;
  try {
    for (const name of readdirSync(logs).filter((f) => f.endsWith('.log'))) {
      text += `\n--- ${join(logs, name)}\n${tail(join(logs, name))}`;
    }
  } catch {
    // no log dir yet
  }
  return text;
}

/** Node names registered with this machine's epmd (empty when epmd cannot be asked). */
function registeredNames() {
  try {
    const out = execFileSync('epmd', ['-names'], { stdio: ['ignore', 'pipe', 'ignore'], timeout: 5_000 });
    return [...out.toString().matchAll(/^name (\S+) at port/gm)].map((match) => match[1]);
  } catch {
    return [];
  }
}

function nameTaken(layout, node) {
  return new ClusterError(
    `the node name ${node.name} is already in use on this machine (another cluster started with --name ${layout.name}?): ` +
      'stop that one (node tools/cluster.mjs stop --dir ITS_DIR) or pass another --name',
  );
}

/**
 * What a node that does not run would need and another holds: one of its ports, or its name
 * with epmd; undefined when it is all free.
 */
async function stillHeld(node) {
  for (const [what, port] of [
    ['AMQP', node.amqpPort],
    ['distribution', node.distPort],
  ]) {
    if (!(await portIsFree(port))) return { what, port };
  }
  return registeredNames().includes(node.name.split('@')[0]) ? { what: 'name' } : undefined;
}

/** Starts one node's VM in the background (it outlives this process); resolves once AMQP answers. */
async function bootNode(layout, node, log) {
  if (vmPid(layout, node) !== undefined) {
    await waitForAmqp(layout, node, undefined);
    return;
  }
  const held = await stillHeld(node);
  if (held?.port !== undefined) {
    throw new ClusterError(
      `port ${held.port} (${held.what} for node ${node.index}, ${node.name}) is taken by another process: ` +
        `free it (ss -ltnp 'sport = :${held.port}'), or start the cluster on other ports with --port BASE and another --dir`,
    );
  }
  if (held) throw nameTaken(layout, node);
  const out = join(nodeDir(layout, node), 'server.out');
  const fd = openSync(out, 'a');
  const user = brokerUser();
  if (user) chownSync(out, user.uid, user.gid);
  rmSync(pidFile(layout, node), { force: true });
  log(`starting ${node.name} (AMQP ${node.amqpPort}, distribution ${node.distPort})`);
  const { file, args } = asBrokerUser(join(binDir(), 'rabbitmq-server'), []);
  const child = spawn(file, args, {
    env: brokerEnv(layout, node),
    cwd: layout.dir,
    detached: true,
    stdio: ['ignore', fd, fd],
  });
  closeSync(fd);
  let exited;
  child.once('exit', (code, signal) => {
    exited = signal ?? code;
  });
  child.once('error', (err) => {
    exited = err.message;
  });
  child.unref();
  await waitForAmqp(layout, node, () => exited);
}

async function waitForAmqp(layout, node, exitedWith) {
  const deadline = Date.now() + NODE_START_TIMEOUT_MS;
  for (;;) {
    const exit = exitedWith?.();
    if (exit !== undefined) {
      const report = postMortem(layout, node);
      if (report.includes('duplicate_node_name')) throw nameTaken(layout, node);
      throw new ClusterError(`${node.name} exited during startup (${exit}):\n${report}`);
    }
    if (vmPid(layout, node) !== undefined && (await acceptsTcp(node.amqpPort))) return;
    if (Date.now() > deadline) {
      throw new ClusterError(
        `${node.name} did not accept AMQP on ${node.amqpPort} within ${NODE_START_TIMEOUT_MS / 1000} s.\n${postMortem(layout, node)}`,
      );
    }
    await sleep(200);
  }
}

/** `cluster_status` from the first node that answers, node 1 first. */
async function anyView(layout) {
  for (const peer of layout.nodes) {
    if (vmPid(layout, peer) === undefined) continue;
    const seen = await clusterStatusOf(layout, peer).catch(() => undefined);
    if (seen) return seen;
  }
  return undefined;
}

/**
 * Joins each of `nodes` that is not yet a member to node 1 (`stop_app`, `join_cluster`,
 * `start_app`), then waits until the cluster lists all of them as running.
 */
async function ensureJoined(layout, nodes, log) {
  const first = layout.nodes[0];
  let joined = false;
  for (const node of nodes) {
    // Each node is asked itself whether it is a member: a view from whichever node answers first
    // (node 2's own, when node 1 is slow to answer on a loaded machine) lists that node as
    // running in a cluster of one, and a join skipped on that is a cluster that never forms.
    if (node.index === first.index) continue;
    // A node just started may not answer cluster_status yet: ask until it does.
    /** @type {Awaited<ReturnType<typeof clusterStatusOf>> | undefined} */
    let own;
    await waitUntil(
      async () => {
        own = await clusterStatusOf(layout, node).catch(() => undefined);
        return own !== undefined;
      },
      60_000,
      `${node.name} to answer cluster_status`,
    );
    // waitUntil resolved, so own is set.
    if (/** @type {NonNullable<typeof own>} */ (own).members.includes(first.name)) continue;
    log(`joining ${node.name} to ${first.name}`);
    await rabbitmqctl(layout, node, ['stop_app']);
    await rabbitmqctl(layout, node, ['join_cluster', first.name]);
    await rabbitmqctl(layout, node, ['start_app']);
    joined = true;
  }
  // The default cluster name is each node's own name; one set on the cluster is shared by all.
  if (joined) await rabbitmqctl(layout, first, ['set_cluster_name', layout.name]);
  await waitUntil(
    async () => {
      const seen = await anyView(layout);
      return seen !== undefined && nodes.every((node) => seen.running.includes(node.name));
    },
    60_000,
    `${nodes.map((node) => node.name).join(', ')} to show as running in the cluster`,
  );
}

async function waitUntil(check, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline)
      throw new ClusterError(`gave up waiting for ${what} after ${timeoutMs / 1000} s`);
    await sleep(300);
  }
}

// ---------------------------------------------------------------- operations

const quiet = () => {};

/**
 * Starts the cluster (or reuses the one running in `dir`): boots every node that is not up,
 * joins nodes 2..N to node 1 and waits until node 1's `cluster_status` lists all as running.
 * Resolves to the status and how long it took.
 */
export async function startCluster(opts = {}) {
  requireRabbitmq();
  const log = opts.log ?? quiet;
  const dir = clusterDir(opts);
  const started = Date.now();
  let layout = readLayout(dir);
  const reused = layout !== undefined;
  if (layout) {
    const asked = planLayout(
      dir,
      opts.nodes ?? layout.nodes.length,
      opts.port ?? layout.nodes[0].amqpPort,
      opts.name ?? layout.name,
    );
    if (JSON.stringify(asked.nodes) !== JSON.stringify(layout.nodes)) {
      throw new ClusterError(
        `${dir} already holds a cluster of ${layout.nodes.length} nodes (${layout.nodes.map((n) => `${n.name}:${n.amqpPort}`).join(', ')}): ` +
          'stop it first (node tools/cluster.mjs stop) or pass another --dir',
      );
    }
    log(`reusing the cluster in ${dir}`);
  } else {
    layout = planLayout(
      dir,
      opts.nodes ?? DEFAULT_NODES,
      opts.port ?? DEFAULT_PORT,
      opts.name ?? DEFAULT_NAME,
    );
    writeLayout(layout, opts.netTicktime);
  }
  try {
    // All at once: faster, and nodes restarted from kept data wait for their peers at boot.
    const booted = await Promise.allSettled(layout.nodes.map((node) => bootNode(layout, node, log)));
    const failed = booted.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
    await ensureJoined(layout, layout.nodes, log);
  } catch (err) {
    // A cluster that never formed leaves nothing behind; a reused one is left as it was.
    if (!reused) await stopCluster({ dir, log });
    throw err;
  }
  const status = await clusterStatus({ dir });
  const ms = Date.now() - started;
  log(`cluster of ${layout.nodes.length} running in ${(ms / 1000).toFixed(1)} s`);
  return { ...status, ms };
}

/** Runs `rabbitmqctl -n NODE ...args` with the cluster's cookie; resolves to its stdout. */
export async function clusterCtl(which, args, opts = {}) {
  requireRabbitmq();
  const layout = requireLayout(clusterDir(opts));
  return rabbitmqctl(layout, pickNode(layout, which), args);
}

/**
 * Kills the node's Erlang VM with SIGKILL: a crash, not a clean stop. Resolves once it is gone
 * and what it held is free again (its ports, its name with epmd), so the node can be started
 * at once: a dying VM loses its memory (and its /proc cmdline) before its sockets close, which
 * on a loaded machine takes seconds.
 */
export async function killNode(which, opts = {}) {
  const layout = requireLayout(clusterDir(opts));
  const node = pickNode(layout, which);
  const pid = vmPid(layout, node);
  if (pid === undefined) throw new ClusterError(`${node.name} is not running: nothing to kill`);
  (opts.log ?? quiet)(`kill -9 ${pid} (${node.name})`);
  process.kill(pid, 'SIGKILL');
  await waitUntil(
    async () => vmPid(layout, node) === undefined && (await stillHeld(node)) === undefined,
    30_000,
    `${node.name} (pid ${pid}) to die and free its ports and name`,
  );
  return { node: node.name, pid };
}

/** Brings a killed or stopped node back and waits until it runs in the cluster again. */
export async function startNode(which, opts = {}) {
  requireRabbitmq();
  const layout = requireLayout(clusterDir(opts));
  const node = pickNode(layout, which);
  const log = opts.log ?? quiet;
  const started = Date.now();
  await bootNode(layout, node, log);
  await ensureJoined(layout, [node], log);
  return { node: node.name, ms: Date.now() - started };
}

/** Stops one node cleanly (`rabbitmqctl shutdown` returns once its VM is gone). */
export async function stopNode(which, opts = {}) {
  const layout = requireLayout(clusterDir(opts));
  const node = pickNode(layout, which);
  await shutdown(layout, node, opts.log ?? quiet);
  return { node: node.name };
}

async function shutdown(layout, node, log) {
  const pid = vmPid(layout, node);
  if (pid === undefined) return;
  log(`stopping ${node.name}`);
  try {
    await rabbitmqctl(layout, node, ['shutdown'], 60_000);
  } catch (err) {
    log(`${err.message}; killing pid ${pid}`);
  }
  if (vmPid(layout, node) !== undefined) process.kill(pid, 'SIGKILL');
  await waitUntil(async () => vmPid(layout, node) === undefined, 10_000, `${node.name} to exit`);
}

/** Stops every node and removes the cluster's directory unless `keep`. Safe when nothing runs. */
export async function stopCluster(opts = {}) {
  const dir = clusterDir(opts);
  const layout = readLayout(dir);
  const log = opts.log ?? quiet;
  if (!layout) {
    log(`no cluster in ${dir}`);
    return { dir, removed: false };
  }
  await Promise.all(layout.nodes.map((node) => shutdown(layout, node, log)));
  if (opts.keep) return { dir, removed: false };
  rmSync(dir, { recursive: true, force: true });
  log(`removed ${dir}`);
  return { dir, removed: true };
}

/**
 * Each node's Erlang VM as its pid file and /proc tell, without asking the cluster (no
 * `rabbitmqctl`, which boots a VM of its own): `pid` null when the VM is gone.
 */
export function nodeVms(opts = {}) {
  const layout = readLayout(clusterDir(opts));
  if (!layout) return [];
  return layout.nodes.map((node) => ({
    index: node.index,
    name: node.name,
    pid: vmPid(layout, node) ?? null,
  }));
}

/**
 * Each node's name, AMQP URI and whether it runs (its VM is alive and its AMQP port answers) and
 * runs in the cluster (the `cluster_status` of a running node lists it as running).
 */
export async function clusterStatus(opts = {}) {
  const dir = clusterDir(opts);
  const layout = readLayout(dir);
  if (!layout) return { dir, cluster: null, nodes: [] };
  const nodes = await Promise.all(
    layout.nodes.map(async (node) => {
      const pid = vmPid(layout, node);
      const running = pid !== undefined && (await acceptsTcp(node.amqpPort));
      return { node, pid, running };
    }),
  );
  let seen;
  for (const { node, running } of nodes) {
    if (!running) continue;
    seen = await clusterStatusOf(layout, node).catch(() => undefined);
    if (seen) break;
  }
  return {
    dir,
    cluster: seen?.clusterName ?? null,
    nodes: nodes.map(({ node, pid, running }) => ({
      index: node.index,
      name: node.name,
      uri: uriOf(node),
      amqpPort: node.amqpPort,
      distPort: node.distPort,
      pid: pid ?? null,
      running,
      inCluster: running && (seen?.running.includes(node.name) ?? false),
    })),
  };
}

// ---------------------------------------------------------------- command line

const usage = `usage: node tools/cluster.mjs <command> [options]
  start [--nodes N] [--port BASE] [--name PREFIX]   start (or reuse) an N-node cluster (default 3, ports 5701..)
  status                                          JSON: each node's name, amqp URI, running, in the cluster
  kill NODE                                       kill -9 a node's Erlang VM (NODE: 1..N or its name)
  start-node NODE                                 bring a killed or stopped node back; it rejoins
  stop-node NODE                                  stop one node cleanly
  stop [--keep]                                   stop every node and remove the directory (unless --keep)
options: --dir DIR (default $BRIDGE_CLUSTER_DIR or ${DEFAULT_DIR})`;

async function main(argv) {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      nodes: { type: 'string' },
      port: { type: 'string' },
      name: { type: 'string' },
      dir: { type: 'string' },
      keep: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const [command, target] = positionals;
  if (values.help || !command) {
    console.log(usage);
    return values.help ? 0 : 2;
  }
  const log = (line) => console.error(`cluster: ${line}`);
  const opts = { log };
  if (values.dir !== undefined) opts.dir = values.dir;
  if (values.name !== undefined) opts.name = values.name;
  if (values.nodes !== undefined) opts.nodes = Number(values.nodes);
  if (values.port !== undefined) opts.port = Number(values.port);
  if (values.keep) opts.keep = true;
  const needsNode = () => {
    if (!target)
      throw new ClusterError(`${command} needs a node: a number (1, 2, …) or a node name\n${usage}`);
    return target;
  };
  const print = (value) => console.log(JSON.stringify(value, null, 2));
  switch (command) {
    case 'start':
      print(await startCluster(opts));
      return 0;
    case 'status':
      print(await clusterStatus(opts));
      return 0;
    case 'kill':
      print(await killNode(needsNode(), opts));
      return 0;
    case 'start-node':
      print(await startNode(needsNode(), opts));
      return 0;
    case 'stop-node':
      print(await stopNode(needsNode(), opts));
      return 0;
    case 'stop':
      print(await stopCluster(opts));
      return 0;
    default:
      console.error(`unknown command "${command}"\n${usage}`);
      return 2;
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (err) => {
      console.error(`cluster: ${err instanceof ClusterError ? err.message : (err?.stack ?? err)}`);
      process.exitCode = 1;
    },
  );
}
