import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import { z } from 'zod';
import type { EntityActor } from '../actors/entityActor.js';
import type { Gateway, SendOutcome } from '../actors/gateway.js';
import { BridgeError, ErrorCode, toBridgeError } from '../errors.js';
import { withTrace } from '../log/logger.js';
import { receiptStages, WaitableStage } from '../receipts/receipt.js';
import {
  type Envelope,
  entityNameSchema,
  groupNameSchema,
  groupsSchema,
  maxGroups,
  nameRule,
  profileRequestSchema,
  smuggledRunKeys,
} from '../wire/envelope.js';
import { responseGoneSignal, settleOnResponse } from './responseOutcome.js';

export const serverInfo = { name: 'bridge', version: '0.1.0' } as const;

const idempotencyKey = z
  .string()
  .min(1)
  .max(200)
  .optional()
  .describe(
    'Retry-safe key for one call: a repeat of the same call with the same key returns the first msgId and ' +
      'sends nothing new; another message under a used key is refused (IDEMPOTENCY_CONFLICT): use a new key',
  );

const addressShape = { gid: z.string(), name: z.string(), host: z.string(), kind: z.string() };

const messageShape = z.object({
  msgId: z.string(),
  traceId: z.string(),
  kind: z.string(),
  from: z.object(addressShape),
  text: z.string(),
  inReplyTo: z.string().optional(),
  turnId: z.string().optional(),
  result: z.record(z.string(), z.unknown()).optional(),
});

const stageShape = z.enum(receiptStages);

const sentShape = {
  msgId: z.string(),
  traceId: z.string(),
  to: z.object(addressShape),
  duplicate: z.boolean(),
  reply: messageShape.nullable().optional(),
  /** The latest stage recorded for the message when the call returned (R-RC1); null: none yet. */
  stage: stageShape.nullable(),
  timed_out: z.boolean().optional(),
};

const statusShape = {
  msg_id: z.string(),
  trace_id: z.string(),
  kind: z.string(),
  to: z.object({ gid: z.string(), name: z.string().optional(), host: z.string().optional() }),
  stage: stageShape.nullable(),
  stages: z.array(
    z.object({
      stage: stageShape,
      at: z.number(),
      reason: z.string().optional(),
      detail: z.string().optional(),
    }),
  ),
  send_state: z.string(),
  failure: z.string().nullable(),
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
    ...(envelope.turnId === undefined ? {} : { turnId: envelope.turnId }),
    ...(envelope.result === undefined ? {} : { result: envelope.result }),
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
    stage: outcome.stage,
    ...(outcome.timedOut ? { timed_out: true } : {}),
    ...(outcome.reply === undefined
      ? {}
      : { reply: outcome.reply === null ? null : messageView(outcome.reply) }),
  };
}

/** How far a message got, in words, for a tool result's text. */
function stageWords(outcome: SendOutcome): string {
  if (outcome.timedOut)
    return `; not ${outcome.stage === null ? 'queued' : `past ${outcome.stage}`} yet (timed out)`;
  return outcome.stage === null ? '' : `; ${outcome.stage}`;
}

/**
 * What each tool is: its description and argument and result schemas. Built once, not per session:
 * a session is created at every initialize, and building these zod schemas was most of its cost.
 */
const bridgeSendTool = {
  description:
    'Send a message to an entity (gid, name@host, or a unique name). With wait_ms the call stays open until ' +
    'the recipient answers (or wait_ms passes) and returns the reply; otherwise the reply waits for bridge_drain. ' +
    'With wait_for it stays open until the message reached that stage: "queued" (durable at the ' +
    'recipient\'s gateway) or "submitted" (its pane took it; for a main: handed over), or was dead-lettered ' +
    '(then `stage` says so), at most delivery.receiptWaitMs (then timed_out: true). With both, a reply returns at ' +
    'once, a dead letter too; otherwise the call returns when the stage is reached and wait_ms has passed. ' +
    'The result always has `stage` (null: nothing recorded yet); bridge_status tells it later.',
  inputSchema: {
    to: z.string().min(1).describe('Recipient: gid, name@host, or a unique name'),
    text: z.string().min(1).describe('The message'),
    wait_ms: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe('How long to wait for the reply (ms); 0 = return at once'),
    wait_for: z
      .enum([WaitableStage.queued, WaitableStage.submitted])
      .optional()
      .describe('Return once the message is queued at the recipient, or submitted (handed over, for a main)'),
    idempotency_key: idempotencyKey,
  },
  outputSchema: sentShape,
};

const bridgeStatusTool = {
  description:
    'Where a message you sent is (msg_id as bridge_send returned it): queued at the recipient’s gateway, typed ' +
    'into its pane, submitted (the agent took it), handed-over (a main drained it), dead-lettered (with the ' +
    'reason) or too-late (an answer whose ask was over); `stages` lists each with its time. Receipts from ' +
    'another host may come late. A worker may ask about its own messages, a main or an orchestrator about any.',
  inputSchema: { msg_id: z.string().uuid().describe('msgId of a message sent from this gateway') },
  outputSchema: statusShape,
};

const bridgeReplyTool = {
  description:
    'Reply to a message: the recipient is usually its sender; in_reply_to links the reply to it and may ' +
    'name only a message delivered to you (UNKNOWN_MESSAGE otherwise).',
  inputSchema: {
    to: z.string().min(1).describe('Recipient: gid, name@host, or a unique name'),
    text: z.string().min(1).describe('The reply'),
    in_reply_to: z.string().uuid().optional().describe('msgId of a message you received that this answers'),
    idempotency_key: idempotencyKey,
  },
  outputSchema: sentShape,
};

const bridgeDrainTool = {
  description: 'Collect messages waiting for you, oldest first. Each is handed over once.',
  inputSchema: { max: z.number().int().min(1).optional().describe('Most messages to return') },
  outputSchema: { messages: z.array(messageShape) },
};

const bridgeRosterTool = {
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
};

const bridgeBroadcastTool = {
  description:
    'Announce the same text to everyone (or to one group) at once: published once, every inbox bound to it ' +
    'gets a copy. For per-worker briefs use bridge_send to each.',
  inputSchema: {
    text: z.string().min(1).describe('The announcement'),
    group: groupNameSchema.optional().describe('Only entities in this group; everyone when omitted'),
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
};

const bridgeAskTool = {
  description:
    'Ask a question and wait for the answer: the call stays open until the recipient answers with bridge_answer ' +
    'or timeout_ms passes (then it fails with ASK_EXPIRED). Retrying with the same idempotency_key attaches to ' +
    'the same ask.',
  inputSchema: {
    to: z.string().min(1).describe('Whom to ask: gid, name@host, or a unique name'),
    question: z.string().min(1).describe('The question'),
    timeout_ms: z.number().int().min(1).optional().describe('How long to wait for the answer (ms)'),
    idempotency_key: idempotencyKey,
  },
  outputSchema: {
    askId: z.string(),
    turnId: z.string(),
    traceId: z.string(),
    to: z.object(addressShape),
    answer: messageShape,
  },
};

const bridgeAnswerTool = {
  description:
    "Answer an ASK you received (ask_id = its msgId). The asker's waiting call resumes with your text; if it " +
    'is no longer waiting the answer goes nowhere and you get too_late (now, or later as a TOO_LATE message).',
  inputSchema: {
    ask_id: z.string().uuid().describe('msgId of the ASK'),
    text: z.string().min(1).describe('The answer'),
  },
  outputSchema: {
    msgId: z.string(),
    askId: z.string(),
    turnId: z.string(),
    traceId: z.string(),
    status: z.enum(['delivered', 'sent', 'too_late']),
    duplicate: z.boolean(),
    why: z.string().optional(),
  },
};

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

  server.registerTool('bridge_send', bridgeSendTool, (args) =>
    run('bridge_send', async () => {
      const outcome = await gateway.send(entity, {
        kind: 'SEND',
        to: args.to,
        text: args.text,
        waitMs: args.wait_ms,
        waitFor: args.wait_for,
        idempotencyKey: args.idempotency_key,
      });
      settleOnResponse(outcome.handover);
      return withTrace(outcome.traceId, () => {
        const summary = outcome.reply
          ? `sent ${outcome.msgId}; reply from ${outcome.reply.from.name}@${outcome.reply.from.host}: ${outcome.reply.text}`
          : `sent ${outcome.msgId} to ${outcome.to.name}@${outcome.to.host}${stageWords(outcome)}`;
        return ok(sentView(outcome), summary);
      });
    }),
  );

  server.registerTool('bridge_status', bridgeStatusTool, (args) =>
    run('bridge_status', async () => {
      const status = await gateway.messageStatus(entity, args.msg_id);
      const where = status.to.name ? `${status.to.name}@${status.to.host}` : status.to.gid;
      const summary =
        status.stage === null
          ? `${status.msgId} to ${where}: ${status.sendState}, no receipt yet`
          : `${status.msgId} to ${where}: ${status.stage}${status.stages.at(-1)?.reason ? ` (${status.stages.at(-1)?.reason})` : ''}`;
      return withTrace(status.traceId, () =>
        ok(
          {
            msg_id: status.msgId,
            trace_id: status.traceId,
            kind: status.kind,
            to: status.to,
            stage: status.stage,
            stages: status.stages,
            send_state: status.sendState,
            failure: status.failure,
          },
          summary,
        ),
      );
    }),
  );

  server.registerTool('bridge_reply', bridgeReplyTool, (args) =>
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

  server.registerTool('bridge_drain', bridgeDrainTool, (args) =>
    run('bridge_drain', async () => {
      const handover = await gateway.drain(entity, args.max);
      settleOnResponse(handover);
      const messages = handover.envelopes.map(messageView);
      return ok({ messages }, `${messages.length} message${messages.length === 1 ? '' : 's'}`);
    }),
  );

  server.registerTool('bridge_roster', bridgeRosterTool, () =>
    run('bridge_roster', async () => {
      const entities = gateway.roster();
      return ok({ entities }, `${entities.length} entities`);
    }),
  );

  server.registerTool('bridge_broadcast', bridgeBroadcastTool, (args) =>
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

  server.registerTool('bridge_ask', bridgeAskTool, (args, extra) =>
    run('bridge_ask', async () => {
      const gone = responseGoneSignal();
      const signal = gone ? AbortSignal.any([extra.signal, gone]) : extra.signal;
      const outcome = await gateway.ask(entity, {
        to: args.to,
        question: args.question,
        timeoutMs: args.timeout_ms,
        idempotencyKey: args.idempotency_key,
        signal,
      });
      settleOnResponse(outcome.handover);
      const { answer } = outcome;
      return withTrace(outcome.traceId, () =>
        ok(
          {
            askId: outcome.askId,
            turnId: outcome.turnId,
            traceId: outcome.traceId,
            to: outcome.to,
            answer: messageView(answer),
          },
          `answer from ${answer.from.name}@${answer.from.host}: ${answer.text}`,
        ),
      );
    }),
  );

  server.registerTool('bridge_answer', bridgeAnswerTool, (args) =>
    run('bridge_answer', async () => {
      const outcome = await gateway.answer(entity, args.ask_id, args.text);
      const summary =
        outcome.status === 'too_late'
          ? `too_late: ${outcome.why ?? 'the ask is over'}; the answer was not given to anyone`
          : `answer ${outcome.msgId} ${outcome.status}${outcome.duplicate ? ' (you had already answered; the first answer counts)' : ''}`;
      return ok({ ...outcome }, summary);
    }),
  );

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
      const outcome = await gateway.spawn(entity, {
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
        return ok(
          { ...base, status: 'pending' },
          `spawn ${outcome.requestId} sent; the result will arrive by bridge_drain`,
        );
      }
      if (!result.ok) throw controlError(result.code, result.message);
      return ok(
        { ...base, status: 'running', gid: result.gid, name: result.name },
        `spawned ${result.name}@${outcome.host} (${result.gid})`,
      );
    }),
  );

  server.registerTool('bridge_stop', bridgeStopTool, (args) =>
    run('bridge_stop', async () => {
      const outcome = await gateway.stopSpawned(entity, args.gid, args.wait_ms);
      const base = { requestId: outcome.requestId, traceId: outcome.traceId, host: outcome.host };
      if (!outcome.result) return ok({ ...base, status: 'pending' }, `stop ${outcome.requestId} sent`);
      if (!outcome.result.ok) throw controlError(outcome.result.code, outcome.result.message);
      return ok({ ...base, status: 'stopped' }, `stopped ${args.gid} on ${outcome.host}`);
    }),
  );
  return server;
}

/** A refused spawn or stop, as the target host reported it. */
function controlError(code: string | undefined, message: string | undefined): BridgeError {
  const known = (Object.values(ErrorCode) as string[]).includes(code ?? '');
  return new BridgeError(
    known ? (code as ErrorCode) : ErrorCode.spawnRefused,
    message ?? 'refused by the target host',
  );
}
