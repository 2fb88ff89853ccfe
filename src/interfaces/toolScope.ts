/**
 * What every MCP tool of a session shares: the scope it runs in (the gateway, the entity whose
 * token opened the session, and how a refusal is counted, logged and answered), and the shapes
 * its arguments and results have in common.
 */
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { EntityActor } from '../deliver/EntityActor.js';
import { ErrorCode, toBridgeError } from '../errors.js';
import type { Gateway } from '../gateway/Gateway.js';
import type { Envelope } from '../wire/envelope.js';

/** The session a tool runs in. Identity comes from the connection, never from an argument (R-ID2). */
export interface ToolScope {
  readonly gateway: Gateway;
  readonly entity: EntityActor;
  /** Runs a tool's call; a refusal comes back as a tool error with its stable code, counted and logged. */
  run(tool: string, fn: () => Promise<CallToolResult>): Promise<CallToolResult>;
}

export function createToolScope(gateway: Gateway, entity: EntityActor): ToolScope {
  return {
    gateway,
    entity,
    async run(tool, fn) {
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
    },
  };
}

export const idempotencyKey = z
  .string()
  .min(1)
  .max(200)
  .optional()
  .describe(
    'Retry-safe key for one call: a repeat of the same call with the same key returns the first msgId and ' +
      'sends nothing new; another message under a used key is refused (IDEMPOTENCY_CONFLICT): use a new key',
  );

export const addressShape = { gid: z.string(), name: z.string(), host: z.string(), kind: z.string() };

export const messageShape = z.object({
  msgId: z.string(),
  traceId: z.string(),
  kind: z.string(),
  from: z.object(addressShape),
  text: z.string(),
  inReplyTo: z.string().optional(),
  turnId: z.string().optional(),
  result: z.record(z.string(), z.unknown()).optional(),
});

/** A message as a tool result shows it: no internal fields. */
export function messageView(envelope: Envelope): z.infer<typeof messageShape> {
  return {
    msgId: envelope.msgId,
    traceId: envelope.traceId,
    kind: envelope.kind,
    from: envelope.from,
    text: envelope.text,
    ...(envelope.inReplyTo === undefined ? {} : { inReplyTo: envelope.inReplyTo }),
    ...(envelope.turnId === undefined ? {} : { turnId: envelope.turnId }),
    ...(envelope.result === undefined ? {} : { result: envelope.result }),
  };
}

/** A tool's result: a line for a reader, then the structured content as JSON. */
export function toolResult(structured: Record<string, unknown>, summary: string): CallToolResult {
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
