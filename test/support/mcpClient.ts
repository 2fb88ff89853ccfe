import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { fetchWithOwnSignal, linkSignal } from './ownSignalFetch.mjs';

/**
 * An MCP SDK client connected to a gateway with an entity's bearer token. Its requests do not
 * pile abort listeners on the transport's signal (see ownSignalFetch.mjs): tests make
 * thousands of calls on one client.
 */
export async function connectMcp(url: string, token: string): Promise<Client> {
  const client = new Client({ name: 'bridge-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
    fetch: fetchWithOwnSignal(),
  });
  await client.connect(transport);
  return client;
}

/**
 * Calls a tool and returns its result with structured content typed loosely for assertions.
 * `signal` (a connection-lost signal, say, alive as long as the client) gives up the call when
 * it aborts; it is linked per call, so it does not collect one listener per call.
 */
export async function callTool(
  client: Client,
  name: string,
  args: Record<string, unknown>,
  timeoutMs = 60_000,
  signal?: AbortSignal,
): Promise<CallToolResult & { structuredContent?: Record<string, unknown> }> {
  const link = signal ? linkSignal(signal) : undefined;
  try {
    return (await client.callTool({ name, arguments: args }, undefined, {
      timeout: timeoutMs,
      ...(link ? { signal: link.signal } : {}),
    })) as CallToolResult & {
      structuredContent?: Record<string, unknown>;
    };
  } finally {
    link?.unlink();
  }
}

/** What `agentbridge register --json` prints. */
export interface Registered {
  gid: string;
  token: string;
  name: string;
  host: string;
}

/** A message as bridge_drain (and an open send's `reply`) returns it. */
export interface DrainedMessage {
  msgId: string;
  traceId: string;
  kind: string;
  text: string;
  inReplyTo?: string;
  turnId?: string;
  from: { gid: string; name: string; host: string };
  result?: Record<string, unknown>;
}

/** An MCP `initialize` request as a raw POST body, for tests that open sessions without the SDK. */
export const initializeBody = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'leaky', version: '1' } },
});
