import { join } from 'node:path';
import { callTool, connectLanes, startDaemon } from '../lib/daemon.mjs';
import { httpEchoFloor, mcpSdkFloors, sqliteFloor } from '../lib/floors.mjs';
import { messageText } from '../lib/measure.mjs';

/**
 * (b) Same-host messages through the MCP interface: `agentbridge start` as its own OS process (its
 * own BRIDGE_HOME and port, default config), entities registered with `agentbridge register --json`,
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
    baselines: [sqliteFloor, httpEchoFloor, ...mcpSdkFloors, sseGateway],
    open: openMcp,
  };
}

/** The same daemon with its tool results as SSE streams (`mcp.responses: sse`, the old default). */
const sseGateway = {
  id: 'gateway-sse',
  label: 'gateway, mcp.responses sse',
  measures: 'the same bridge_send calls to a daemon with mcp.responses "sse": each result an event stream',
  config: { mcp: { responses: 'sse' } },
  open: openMcp,
};

async function openMcp({ dir, name, textBytes, concurrency, total, cpuProfDir, gatewayConfigFile }) {
  const daemon = await startDaemon({
    home: join(dir, name),
    configFile: gatewayConfigFile,
    env: { BRIDGE_HOST_ID: 'bench' },
    ...(cpuProfDir ? { cpuProf: { dir: cpuProfDir } } : {}),
  });
  let clients;
  try {
    const a = await daemon.register('a');
    await daemon.register('b');
    clients = await connectLanes(daemon.mcpUrl, a.token, concurrency);
  } catch (err) {
    await daemon.stop();
    throw err;
  }

  return {
    cpuMs: daemon.cpuMs,
    op: (i, lane) => callTool(clients[lane], 'bridge_send', { to: 'b', text: messageText(i, textBytes) }),
    verify: async () => {
      const { entities } = await callTool(clients[0], 'bridge_roster', {});
      const b = entities.find((entity) => entity.name === 'b');
      if (b?.depth !== total) throw new Error(`b should hold ${total} messages, holds ${b?.depth}`);
      return `b holds every message (depth ${b.depth}, per bridge_roster)`;
    },
    close: async () => {
      await Promise.all(clients.map((client) => client.close()));
      await daemon.stop();
    },
  };
}
