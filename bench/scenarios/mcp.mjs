import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { httpEchoFloor, sqliteFloor } from '../lib/floors.mjs';
import { messageText } from '../lib/measure.mjs';
import { freePort, runNode, spawnNode, waitFor } from '../lib/processes.mjs';

const cliPath = new URL('../../dist/cli/main.js', import.meta.url).pathname;

/**
 * (b) Same-host messages through the MCP interface: `bridge start` as its own OS process (its
 * own BRIDGE_HOME and port, default config), entities registered with `bridge register --json`,
 * and one real MCP SDK client (Streamable HTTP, bearer token of main a) per lane calling
 * bridge_send to main b, which holds the messages.
 */
export function mcpScenario({ count, concurrency }) {
  return {
    name: 'mcp-send',
    label: 'mcp: bridge_send main → main (held)',
    measures: 'one bridge_send tool call (MCP SDK client → daemon process) until its result arrives',
    count,
    concurrency,
    baselines: [sqliteFloor, httpEchoFloor],
    open: openMcp,
  };
}

async function openMcp({ dir, name, textBytes, concurrency, total, cpuProfDir }) {
  const home = join(dir, name);
  mkdirSync(home, { recursive: true });
  const port = await freePort();
  const env = { BRIDGE_HOME: home, BRIDGE_HOST_ID: 'bench', BRIDGE_MCP_PORT: String(port) };
  const profile = cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${cpuProfDir}`] : [];
  const daemon = spawnNode([...profile, cliPath, 'start'], { env, cwd: home });
  const clients = [];
  try {
    await waitFor(
      async () =>
        (await fetch(`http://127.0.0.1:${port}/healthz`)).ok && existsSync(join(home, 'admin.sock')),
      { what: 'bridge start', process: daemon },
    );
    const register = async (entityName) =>
      JSON.parse(
        await runNode([cliPath, 'register', '--kind', 'main', '--name', entityName, '--json'], { env }),
      );
    const a = await register('a');
    await register('b');
    for (let lane = 0; lane < concurrency; lane++) {
      clients.push(await connect(`http://127.0.0.1:${port}/mcp`, a.token));
    }
  } catch (err) {
    await Promise.all(clients.map((client) => client.close()));
    await daemon.stop();
    throw err;
  }

  return {
    cpuMs: daemon.cpuMs,
    op: async (i, lane) => {
      const result = await clients[lane].callTool({
        name: 'bridge_send',
        arguments: { to: 'b', text: messageText(i, textBytes) },
      });
      if (result.isError) throw new Error(`bridge_send failed: ${JSON.stringify(result.content)}`);
    },
    verify: async () => {
      const roster = await clients[0].callTool({ name: 'bridge_roster', arguments: {} });
      const b = roster.structuredContent.entities.find((entity) => entity.name === 'b');
      if (b?.depth !== total) throw new Error(`b should hold ${total} messages, holds ${b?.depth}`);
      return `b holds every message (depth ${b.depth}, per bridge_roster)`;
    },
    close: async () => {
      await Promise.all(clients.map((client) => client.close()));
      const code = await daemon.stop();
      if (code !== 0) throw new Error(`bridge start exited with ${code}:\n${daemon.output()}`);
    },
  };
}

async function connect(url, token) {
  const client = new Client({ name: 'bridge-bench', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  return client;
}
