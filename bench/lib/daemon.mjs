import { existsSync, mkdirSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { fetchWithOwnSignal } from '../../test/support/ownSignalFetch.mjs';
import { freePort, runNode, spawnNode, waitFor } from './processes.mjs';

const cliPath = new URL('../../dist/cli/main.js', import.meta.url).pathname;

/**
 * `agentbridge start` as its own OS process: its own BRIDGE_HOME (`home`), a free BRIDGE_MCP_PORT and
 * whatever else `env` sets (BRIDGE_HOST_ID, BRIDGE_BROKER_URI), with `configFile` if given.
 * Resolves once /healthz answers and the admin socket exists. With `cpuProf` ({ dir, name? }) it
 * runs under `node --cpu-prof`.
 * @param {{ home: string, env?: Record<string, string>, configFile?: string, cpuProf?: { dir: string, name?: string } }} options
 */
export async function startDaemon({ home, env = {}, configFile, cpuProf }) {
  mkdirSync(home, { recursive: true });
  const port = await freePort();
  const daemonEnv = {
    BRIDGE_HOME: home,
    BRIDGE_MCP_PORT: String(port),
    ...(configFile ? { BRIDGE_CONFIG: configFile } : {}),
    ...env,
  };
  const profile = cpuProf
    ? [
        '--cpu-prof',
        `--cpu-prof-dir=${cpuProf.dir}`,
        ...(cpuProf.name ? [`--cpu-prof-name=${cpuProf.name}`] : []),
      ]
    : [];
  const daemon = spawnNode([...profile, cliPath, 'start'], { env: daemonEnv, cwd: home });
  try {
    await waitFor(
      async () =>
        (await fetch(`http://127.0.0.1:${port}/healthz`)).ok && existsSync(join(home, 'admin.sock')),
      { what: 'agentbridge start', process: daemon },
    );
  } catch (err) {
    await daemon.stop();
    throw err;
  }
  /** Runs a `bridge` CLI command against this daemon (admin socket) and parses its --json output. */
  const cliJson = async (args) => JSON.parse(await runNode([cliPath, ...args, '--json'], { env: daemonEnv }));
  return {
    process: daemon,
    mcpUrl: `http://127.0.0.1:${port}/mcp`,
    metricsUrl: `http://127.0.0.1:${port}/metrics`,
    adminSocket: join(home, 'admin.sock'),
    cpuMs: daemon.cpuMs,
    output: daemon.output,
    /** `agentbridge register --json`: {gid, token, name, host, kind}. */
    register: (name, kind = 'main') => cliJson(['register', '--kind', kind, '--name', name]),
    /** `agentbridge roster --json`: local entities, then every remote host's. */
    roster: () => cliJson(['roster']),
    /** SIGTERM; rejects if it did not exit cleanly (which also means no CPU profile). */
    async stop() {
      const code = await daemon.stop();
      if (code !== 0) throw new Error(`agentbridge start (${home}) exited with ${code}:\n${daemon.output()}`);
    },
  };
}

/**
 * A client of a daemon's admin socket (JSON over HTTP on a unix socket, as `agentbridge send` and
 * `agentbridge drain` use it), but with keep-alive connections, by default one per concurrent call
 * (`agentOptions`, e.g. maxSockets, bound them). `call(route, body)` resolves with the reply's
 * result and throws the gateway's error.
 */
export function adminClient(socketPath, agentOptions = {}) {
  const agent = new Agent({ keepAlive: true, ...agentOptions });
  return {
    call: (route, body) =>
      new Promise((resolve, reject) => {
        const payload = JSON.stringify(body);
        const req = request(
          {
            socketPath,
            agent,
            path: route,
            method: 'POST',
            headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
          },
          (res) => {
            const chunks = [];
            res.on('data', (chunk) => chunks.push(chunk));
            res.on('end', () => {
              const reply = JSON.parse(Buffer.concat(chunks).toString('utf8'));
              if (reply.ok) resolve(reply.result);
              else reject(new Error(`${route} failed: ${reply.error.code}: ${reply.error.message}`));
            });
            res.on('error', reject);
          },
        );
        req.on('error', reject);
        req.end(payload);
      }),
    close: () => agent.destroy(),
  };
}

/**
 * A real MCP SDK client (Streamable HTTP) with an entity's bearer token; its requests leave no
 * abort listener behind on the transport's signal (see test/support/ownSignalFetch.mjs).
 */
export async function connectMcp(url, token) {
  const client = new Client({ name: 'bridge-bench', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
    fetch: fetchWithOwnSignal(),
  });
  await client.connect(transport);
  return client;
}

/**
 * One MCP SDK client per lane on `url` with `token`. If one cannot connect, those already made
 * are closed before the error is thrown.
 */
export async function connectLanes(url, token, lanes) {
  const clients = [];
  try {
    for (let lane = 0; lane < lanes; lane++) clients.push(await connectMcp(url, token));
  } catch (err) {
    await Promise.all(clients.map((client) => client.close()));
    throw err;
  }
  return clients;
}

/** Calls a bridge tool and returns its structured result; a tool error throws with its text. */
export async function callTool(client, name, args) {
  const result = await client.callTool({ name, arguments: args });
  if (result.isError) throw new Error(`${name} failed: ${JSON.stringify(result.content)}`);
  return result.structuredContent;
}
