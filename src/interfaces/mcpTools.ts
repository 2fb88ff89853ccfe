import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { EntityActor } from '../actors/entityActor.js';
import type { Gateway, SendOutcome } from '../actors/gateway.js';
import { BridgeError, ErrorCode, toBridgeError } from '../errors.js';
import { withTrace } from '../log/logger.js';
import type { Envelope } from '../wire/envelope.js';
import { settleOnResponse } from './responseOutcome.js';

export const serverInfo = { name: 'bridge', version: '0.1.0' } as const;

const idempotencyKey = z
  .string()
  .min(1)
  .max(200)
  .optional()
  .describe('Retry-safe key: a repeat with the same key returns the first msgId and sends nothing new');

const addressShape = { gid: z.string(), name: z.string(), host: z.string(), kind: z.string() };

const messageShape = z.object({
  msgId: z.string(),
  traceId: z.string(),
  kind: z.string(),
  from: z.object(addressShape),
  text: z.string(),
  inReplyTo: z.string().optional(),
});

const sentShape = {
  msgId: z.string(),
  traceId: z.string(),
  to: z.object(addressShape),
  duplicate: z.boolean(),
  reply: messageShape.nullable().optional(),
};

/** A message as a tool result shows it: no internal fields. */
function messageView(envelope: Envelope): z.infer<typeof messageShape> {
  return {
    msgId: envelope.msgId,
    traceId: envelope.traceId,
    kind: envelope.kind,
    from: envelope.from,
    text: envelope.text,
    ...(envelope.inReplyTo === undefined ? {} : { inReplyTo: envelope.inReplyTo }),
  };
}

function ok(structured: Record<string, unknown>, summary: string): CallToolResult {
  return {
    content: [{ type: 'text', text: `${summary}\n${JSON.stringify(structured)}` }],
    structuredContent: structured,
  };
}

/** An MCP tool error with a stable code (SPEC §9). */
export function toolError(err: unknown): CallToolResult {
  const error = toBridgeError(err);
  return {
    isError: true,
    content: [{ type: 'text', text: `${error.code}: ${error.message}` }],
    structuredContent: { error: error.toJSON() },
  };
}

function sentView(outcome: SendOutcome): Record<string, unknown> {
  return {
    msgId: outcome.msgId,
    traceId: outcome.traceId,
    to: outcome.to,
    duplicate: outcome.duplicate,
    ...(outcome.reply === undefined
      ? {}
      : { reply: outcome.reply === null ? null : messageView(outcome.reply) }),
  };
}

function notYet(tool: string, arrivesWith: string): () => CallToolResult {
  return () =>
    toolError(
      new BridgeError(
        ErrorCode.notAvailable,
        `${tool} is not available in this version of bridge (it arrives with ${arrivesWith}); ` +
          'use bridge_send and bridge_reply meanwhile',
      ),
    );
}

/**
 * One MCP server per session, bound to the entity whose token opened it: identity comes from
 * the connection, never from an argument (R-ID2).
 */
export function createMcpSession(gateway: Gateway, entity: EntityActor): McpServer {
  const server = new McpServer(serverInfo, {
    instructions:
      `You are ${entity.record.name}@${gateway.host} (${entity.record.kind}) on bridge. ` +
      'Send with bridge_send (wait_ms keeps the call open for the reply), answer with bridge_reply, ' +
      'collect waiting messages with bridge_drain, see who is reachable with bridge_roster.',
  });

  const run = async (tool: string, fn: () => Promise<CallToolResult>): Promise<CallToolResult> => {
    try {
      return await fn();
    } catch (err) {
      const error = toBridgeError(err);
      gateway.metrics.rejectedRequests.inc({ code: error.code });
      const level = error.code === ErrorCode.internal ? 'error' : 'warn';
      gateway.logger[level](
        { err: error, tool, entity: entity.record.name },
        `${tool} refused: ${error.code}`,
      );
      return toolError(error);
    }
  };

  server.registerTool(
    'bridge_send',
    {
      description:
        'Send a message to an entity (gid, name@host, or a unique name). With wait_ms the call stays open until ' +
        'the recipient answers (or wait_ms passes) and returns the reply; otherwise the reply waits for bridge_drain.',
      inputSchema: {
        to: z.string().min(1).describe('Recipient: gid, name@host, or a unique name'),
        text: z.string().min(1).describe('The message'),
        wait_ms: z
          .number()
          .int()
          .min(0)
          .optional()
          .describe('How long to wait for the reply (ms); 0 = return at once'),
        idempotency_key: idempotencyKey,
      },
      outputSchema: sentShape,
    },
    (args) =>
      run('bridge_send', async () => {
        const outcome = await gateway.send(entity, {
          kind: 'SEND',
          to: args.to,
          text: args.text,
          waitMs: args.wait_ms,
          idempotencyKey: args.idempotency_key,
        });
        settleOnResponse(outcome.handover);
        return withTrace(outcome.traceId, () => {
          const summary = outcome.reply
            ? `sent ${outcome.msgId}; reply from ${outcome.reply.from.name}@${outcome.reply.from.host}: ${outcome.reply.text}`
            : `sent ${outcome.msgId} to ${outcome.to.name}@${outcome.to.host}`;
          return ok(sentView(outcome), summary);
        });
      }),
  );

  server.registerTool(
    'bridge_reply',
    {
      description:
        'Reply to a message: the recipient is usually its sender; in_reply_to links the reply to it.',
      inputSchema: {
        to: z.string().min(1).describe('Recipient: gid, name@host, or a unique name'),
        text: z.string().min(1).describe('The reply'),
        in_reply_to: z.string().uuid().optional().describe('msgId of the message this answers'),
        idempotency_key: idempotencyKey,
      },
      outputSchema: sentShape,
    },
    (args) =>
      run('bridge_reply', async () => {
        const outcome = await gateway.send(entity, {
          kind: 'REPLY',
          to: args.to,
          text: args.text,
          inReplyTo: args.in_reply_to,
          idempotencyKey: args.idempotency_key,
        });
        return ok(sentView(outcome), `replied ${outcome.msgId} to ${outcome.to.name}@${outcome.to.host}`);
      }),
  );

  server.registerTool(
    'bridge_drain',
    {
      description: 'Collect messages waiting for you, oldest first. Each is handed over once.',
      inputSchema: { max: z.number().int().min(1).optional().describe('Most messages to return') },
      outputSchema: { messages: z.array(messageShape) },
    },
    (args) =>
      run('bridge_drain', async () => {
        const handover = await gateway.drain(entity, args.max);
        settleOnResponse(handover);
        const messages = handover.envelopes.map(messageView);
        return ok({ messages }, `${messages.length} message${messages.length === 1 ? '' : 's'}`);
      }),
  );

  server.registerTool(
    'bridge_roster',
    {
      description: 'Who is reachable: every entity with its host, kind, groups and status.',
      inputSchema: {},
      outputSchema: {
        entities: z.array(
          z.object({
            ...addressShape,
            groups: z.array(z.string()),
            status: z.string(),
            depth: z.number().optional(),
          }),
        ),
      },
    },
    () =>
      run('bridge_roster', async () => {
        const entities = gateway.roster();
        return ok({ entities }, `${entities.length} entities`);
      }),
  );

  server.registerTool(
    'bridge_broadcast',
    {
      description:
        'Announce the same text to everyone (or to one group) at once: published once, every inbox bound to it ' +
        'gets a copy. For per-worker briefs use bridge_send to each.',
      inputSchema: {
        text: z.string().min(1).describe('The announcement'),
        group: z
          .string()
          .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/)
          .optional()
          .describe('Only entities in this group; everyone when omitted'),
        idempotency_key: idempotencyKey,
      },
      outputSchema: {
        msgId: z.string(),
        traceId: z.string(),
        key: z.string(),
        duplicate: z.boolean(),
        partial: z.boolean(),
        localCopies: z.number().optional(),
      },
    },
    (args) =>
      run('bridge_broadcast', async () => {
        const result = await gateway.broadcast(entity, {
          text: args.text,
          group: args.group,
          idempotencyKey: args.idempotency_key,
        });
        const note = result.partial ? ' (some inboxes were full and refused their copy)' : '';
        return ok({ ...result }, `broadcast ${result.msgId} to ${result.key}${note}`);
      }),
  );

  const pending = {
    bridge_ask: ['the ask flow', { to: z.string(), question: z.string(), timeout_ms: z.number().optional() }],
    bridge_answer: ['the ask flow', { ask_id: z.string(), text: z.string() }],
    bridge_spawn: [
      'cross-host spawn',
      { host: z.string(), profile: z.string(), brief: z.string(), name: z.string().optional() },
    ],
    bridge_stop: ['cross-host spawn', { gid: z.string() }],
  } as const;
  for (const [tool, [arrivesWith, inputSchema]] of Object.entries(pending)) {
    server.registerTool(
      tool,
      { description: `Not available yet (arrives with ${arrivesWith}).`, inputSchema },
      notYet(tool, arrivesWith),
    );
  }
  return server;
}
