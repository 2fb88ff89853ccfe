/**
 * The messaging tools: send, see where a message is, reply, drain, who is reachable, broadcast.
 */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import type { SendOutcome } from '../gateway/Gateway.js';
import { withTrace } from '../log/logger.js';
import { busyPolicySchema } from '../wire/agentHost.js';
import { groupNameSchema, WireKind } from '../wire/envelope.js';
import { receiptStages, WaitableStage } from '../wire/receipt.js';
import { callGoneSignal, settleOnResponse } from './responseOutcome.js';
import {
  addressShape,
  idempotencyKey,
  messageShape,
  messageView,
  type ToolScope,
  toolResult,
} from './toolScope.js';

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

// Module constants, built once and not per session: see `mcpTools.ts`.
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
    busy: busyPolicySchema
      .optional()
      .describe(
        'For a worker whose agent takes a message mid-turn (Claude stream-json, Codex app-server): "steer" hands ' +
          'it into the running turn, "queue" holds it until the turn ends. Default: the worker\'s policy',
      ),
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
  description:
    'Collect messages waiting for you, oldest first. Each is handed over once. With wait_ms and nothing ' +
    'waiting, the call stays open until a message arrives (and returns it at once) or wait_ms passes ' +
    '(then it returns no messages): a long poll, instead of calling bridge_drain in a loop.',
  inputSchema: {
    max: z.number().int().min(1).optional().describe('Most messages to return'),
    wait_ms: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe('When nothing is waiting, how long to wait for a message (at most limits.maxWaitMs)'),
  },
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

/** Registers the messaging tools, in the order `tools/list` shows them. */
export function registerMessageTools(server: McpServer, scope: ToolScope): void {
  const { gateway, entity, run } = scope;
  server.registerTool('bridge_send', bridgeSendTool, (args) =>
    run('bridge_send', async () => {
      const outcome = await gateway.services.sends.send(entity, {
        kind: WireKind.send,
        to: args.to,
        text: args.text,
        waitMs: args.wait_ms,
        waitFor: args.wait_for,
        idempotencyKey: args.idempotency_key,
        busy: args.busy,
      });
      settleOnResponse(outcome.handover);
      return withTrace(outcome.traceId, () => {
        const summary = outcome.reply
          ? `sent ${outcome.msgId}; reply from ${outcome.reply.from.name}@${outcome.reply.from.host}: ${outcome.reply.text}`
          : `sent ${outcome.msgId} to ${outcome.to.name}@${outcome.to.host}${stageWords(outcome)}`;
        return toolResult(sentView(outcome), summary);
      });
    }),
  );

  server.registerTool('bridge_status', bridgeStatusTool, (args) =>
    run('bridge_status', async () => {
      const status = await gateway.services.messageStatus(entity, args.msg_id);
      const where = status.to.name ? `${status.to.name}@${status.to.host}` : status.to.gid;
      const summary =
        status.stage === null
          ? `${status.msgId} to ${where}: ${status.sendState}, no receipt yet`
          : `${status.msgId} to ${where}: ${status.stage}${status.stages.at(-1)?.reason ? ` (${status.stages.at(-1)?.reason})` : ''}`;
      return withTrace(status.traceId, () =>
        toolResult(
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
      const outcome = await gateway.services.sends.send(entity, {
        kind: WireKind.reply,
        to: args.to,
        text: args.text,
        inReplyTo: args.in_reply_to,
        idempotencyKey: args.idempotency_key,
      });
      return toolResult(
        sentView(outcome),
        `replied ${outcome.msgId} to ${outcome.to.name}@${outcome.to.host}`,
      );
    }),
  );

  server.registerTool('bridge_drain', bridgeDrainTool, (args, extra) =>
    run('bridge_drain', async () => {
      const signal = callGoneSignal(extra.signal);
      const handover = await gateway.services.drains.drain(entity, args.max, args.wait_ms, signal);
      settleOnResponse(handover);
      const messages = handover.envelopes.map(messageView);
      return toolResult({ messages }, `${messages.length} message${messages.length === 1 ? '' : 's'}`);
    }),
  );

  server.registerTool('bridge_roster', bridgeRosterTool, () =>
    run('bridge_roster', async () => {
      const entities = gateway.services.status.roster();
      return toolResult({ entities }, `${entities.length} entities`);
    }),
  );

  server.registerTool('bridge_broadcast', bridgeBroadcastTool, (args) =>
    run('bridge_broadcast', async () => {
      const result = await gateway.services.router.broadcast(entity, {
        text: args.text,
        group: args.group,
        idempotencyKey: args.idempotency_key,
      });
      const note = result.partial ? ' (some inboxes were full and refused their copy)' : '';
      return toolResult({ ...result }, `broadcast ${result.msgId} to ${result.key}${note}`);
    }),
  );
}
