/**
 * The tools that start and stop agents on a host (U4): spawn from one of its profiles, stop.
 */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { BridgeError, controlError, ErrorCode } from '../errors.js';
import { attachLine } from '../wire/agentHost.js';
import {
  entityNameSchema,
  groupsSchema,
  maxGroups,
  nameRule,
  profileRequestSchema,
  smuggledRunKeys,
} from '../wire/envelope.js';
import { idempotencyKey, type ToolScope, toolResult } from './toolScope.js';

// Module constants, built once and not per session: see `mcpTools.ts`.
const bridgeSpawnTool = {
  description:
    "Start an agent on a host from one of that host's profiles (its config defines the command; you name the " +
    'profile only). The brief becomes its first message. Waits up to wait_ms for the new gid.',
  inputSchema: z.looseObject({
    host: z.string().min(1).describe('Host id to run the agent on'),
    profile: profileRequestSchema.describe('A profile that host defines'),
    brief: z.string().describe("The task: delivered as the agent's first message"),
    name: entityNameSchema
      .optional()
      .describe(`Entity name for the agent (default: profile-xxxxxx): ${nameRule}`),
    groups: groupsSchema
      .optional()
      .describe(`Extra broadcast groups (at most ${maxGroups}), named as entities are`),
    wait_ms: z.number().int().min(0).optional().describe('How long to wait for the result (ms)'),
    idempotency_key: idempotencyKey,
  }),
  outputSchema: {
    requestId: z.string(),
    traceId: z.string(),
    host: z.string(),
    status: z.enum(['running', 'pending']),
    gid: z.string().optional(),
    name: z.string().optional(),
    attach: z
      .string()
      .optional()
      .describe('An agent a person can attach to (Codex on its app-server): the command that does'),
  },
};

const bridgeStopTool = {
  description: 'Stop an agent started with bridge_spawn: its pane is closed and it is deregistered.',
  inputSchema: {
    gid: z.string().uuid().describe('gid of the spawned agent'),
    wait_ms: z.number().int().min(0).optional().describe('How long to wait for the result (ms)'),
  },
  outputSchema: {
    requestId: z.string(),
    traceId: z.string(),
    host: z.string(),
    status: z.enum(['stopped', 'pending']),
  },
};

/** Registers the spawn tools, in the order `tools/list` shows them. */
export function registerSpawnTools(server: McpServer, scope: ToolScope): void {
  const { gateway, entity, run } = scope;
  server.registerTool('bridge_spawn', bridgeSpawnTool, (args) =>
    run('bridge_spawn', async () => {
      const smuggled = smuggledRunKeys(args);
      if (smuggled.length > 0) {
        throw new BridgeError(
          ErrorCode.spawnRefused,
          `bridge_spawn takes a profile name, not ${smuggled.join(', ')}: the target host owns its profiles ` +
            '(its config `profiles` says what each runs); remove those arguments',
        );
      }
      const outcome = await gateway.services.spawnRequests.spawn(entity, {
        host: args.host,
        profile: args.profile,
        brief: args.brief,
        name: args.name,
        groups: args.groups,
        waitMs: args.wait_ms,
        idempotencyKey: args.idempotency_key,
      });
      const base = { requestId: outcome.requestId, traceId: outcome.traceId, host: outcome.host };
      const result = outcome.result;
      if (!result) {
        return toolResult(
          { ...base, status: 'pending' },
          `spawn ${outcome.requestId} sent; the result will arrive by bridge_drain`,
        );
      }
      if (!result.ok) throw controlError(result.code, result.message);
      return toolResult(
        { ...base, status: 'running', gid: result.gid, name: result.name, attach: result.attach },
        `spawned ${result.name}@${outcome.host} (${result.gid})` +
          (result.attach === undefined ? '' : `; ${attachLine(result.attach)}`),
      );
    }),
  );

  server.registerTool('bridge_stop', bridgeStopTool, (args) =>
    run('bridge_stop', async () => {
      const outcome = await gateway.services.spawnRequests.stopSpawned(entity, args.gid, args.wait_ms);
      const base = { requestId: outcome.requestId, traceId: outcome.traceId, host: outcome.host };
      if (!outcome.result)
        return toolResult({ ...base, status: 'pending' }, `stop ${outcome.requestId} sent`);
      if (!outcome.result.ok) throw controlError(outcome.result.code, outcome.result.message);
      return toolResult({ ...base, status: 'stopped' }, `stopped ${args.gid} on ${outcome.host}`);
    }),
  );
}
