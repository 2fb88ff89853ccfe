/**
 * The MCP server of one session and its tools, grouped by what they do: messaging
 * (`messageTools.ts`), asking turns (`turnTools.ts`), starting and stopping agents
 * (`spawnTools.ts`). Each tool's description and argument and result schemas are module
 * constants, built once and not per session: a session is created at every initialize, and
 * building these zod schemas was most of its cost.
 */
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import type { EntityActor } from '../deliver/EntityActor.js';
import type { Gateway } from '../gateway/Gateway.js';
import { registerMessageTools } from './messageTools.js';
import { registerSpawnTools } from './spawnTools.js';
import { createToolScope } from './toolScope.js';
import { registerTurnTools } from './turnTools.js';

export const serverInfo = { name: 'bridge', version: '0.1.0' } as const;

/**
 * One JSON Schema validator for every session. Left to itself the SDK builds a fresh Ajv (with
 * its formats) per server: about a millisecond and a good part of a session's memory. The SDK
 * uses it only to check a client's answer to an elicitation, which bridge never asks for, so its
 * cache of compiled schemas does not grow.
 */
const jsonSchemaValidator = new AjvJsonSchemaValidator();

/**
 * One MCP server per session, bound to the entity whose token opened it: identity comes from
 * the connection, never from an argument (R-ID2).
 */
export function createMcpSession(gateway: Gateway, entity: EntityActor): McpServer {
  const server = new McpServer(serverInfo, {
    capabilities: { logging: {} },
    jsonSchemaValidator,
    instructions:
      `You are ${entity.record.name}@${gateway.host} (${entity.record.kind}) on bridge. ` +
      'Send with bridge_send (wait_ms keeps the call open for the reply, wait_for until it is queued or ' +
      'submitted), see where a message is with bridge_status, answer with bridge_reply, ' +
      'collect waiting messages with bridge_drain, see who is reachable with bridge_roster. ' +
      'Ask with bridge_ask when you need an answer to go on; answer an ASK with bridge_answer. ' +
      'Start an agent on a host with bridge_spawn (a profile that host defines), end it with bridge_stop.',
  });

  const scope = createToolScope(gateway, entity);
  registerMessageTools(server, scope);
  registerTurnTools(server, scope);
  registerSpawnTools(server, scope);
  return server;
}
