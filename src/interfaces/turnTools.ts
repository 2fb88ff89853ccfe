/**
 * The tools of an asking turn (U2): ask and wait for the answer, answer an ASK.
 */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { withTrace } from '../log/logger.js';
import { callGoneSignal, settleOnResponse } from './responseOutcome.js';
import {
  addressShape,
  idempotencyKey,
  messageShape,
  messageView,
  type ToolScope,
  toolResult,
} from './toolScope.js';

// Module constants, built once and not per session: see `mcpTools.ts`.
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

/** Registers the turn tools, in the order `tools/list` shows them. */
export function registerTurnTools(server: McpServer, scope: ToolScope): void {
  const { gateway, entity, run } = scope;
  server.registerTool('bridge_ask', bridgeAskTool, (args, extra) =>
    run('bridge_ask', async () => {
      const signal = callGoneSignal(extra.signal);
      const outcome = await gateway.services.asks.ask(entity, {
        to: args.to,
        question: args.question,
        timeoutMs: args.timeout_ms,
        idempotencyKey: args.idempotency_key,
        signal,
      });
      settleOnResponse(outcome.handover);
      const { answer } = outcome;
      return withTrace(outcome.traceId, () =>
        toolResult(
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
      const outcome = await gateway.services.asks.answer(entity, args.ask_id, args.text);
      const summary =
        outcome.status === 'too_late'
          ? `too_late: ${outcome.why ?? 'the ask is over'}; the answer was not given to anyone`
          : `answer ${outcome.msgId} ${outcome.status}${outcome.duplicate ? ' (you had already answered; the first answer counts)' : ''}`;
      return toolResult({ ...outcome }, summary);
    }),
  );
}
