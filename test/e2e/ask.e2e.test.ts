import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { brokerEnv, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import {
  callTool,
  connectMcp,
  type DrainedMessage as Message,
  type Registered,
} from '../support/mcpClient.js';

interface EventRow {
  actor_kind: string;
  actor_id: string;
  trace_id: string;
  event: string;
  from_state: string | null;
  to_state: string;
  hlc: string;
  data: string | null;
}
type ToolResult = Awaited<ReturnType<typeof callTool>>;

const heartbeatMs = 300;

/** The event log rows of one flow on one gateway, oldest first. */
function traceEvents(gateway: GatewayProcess, traceId: string): EventRow[] {
  const db = new Database(join(gateway.home, 'events.db'), { readonly: true });
  try {
    return db.prepare('SELECT * FROM event_log WHERE trace_id = ? ORDER BY hlc').all(traceId) as EventRow[];
  } finally {
    db.close();
  }
}

/** `kind:event from→to` for the rows of one actor kind, as a readable trail. */
function trail(rows: EventRow[], kind: string): string[] {
  return rows
    .filter((r) => r.actor_kind === kind)
    .map((r) => `${r.event} ${r.from_state ?? '∅'}→${r.to_state}`);
}

function errorOf(result: ToolResult): { code: string; message: string; details?: Record<string, string> } {
  expect(result.isError, JSON.stringify(result.content)).toBe(true);
  return (result.structuredContent as { error: { code: string; message: string } }).error;
}

/** U2: an ask parks the asking call until the answer, its deadline, or the end of the turn. */
describe('ask turns across two gateway processes', () => {
  const gateways: GatewayProcess[] = [];
  const clients: Client[] = [];
  let alpha: GatewayProcess;
  let beta: GatewayProcess;
  const ids: Record<string, Registered> = {};
  const mcp: Record<string, Client> = {};

  const register = async (g: GatewayProcess, kind: string, name: string): Promise<Registered> => {
    const result = await g.cli(['register', '--kind', kind, '--name', name, '--json']);
    expect(result.code, result.stderr || result.stdout).toBe(0);
    const registered = JSON.parse(result.stdout) as Registered;
    ids[name] = registered;
    return registered;
  };
  const connect = async (g: GatewayProcess, name: string): Promise<Client> => {
    const client = await connectMcp(g.mcpUrl, (ids[name] as Registered).token);
    clients.push(client);
    mcp[name] = client;
    return client;
  };
  const drain = async (name: string): Promise<Message[]> => {
    const result = await callTool(mcp[name] as Client, 'bridge_drain', {});
    return (result.structuredContent as { messages: Message[] }).messages;
  };
  const nextMessage = (name: string, kind: string) =>
    waitFor(`a ${kind} for ${name}`, async () => (await drain(name)).find((m) => m.kind === kind));

  beforeAll(async () => {
    const gateway = (prefix: string) => {
      const g = new GatewayProcess({
        hostId: uniqueHostId(prefix),
        env: { ...brokerEnv },
        config: { broker: { heartbeatMs } },
      });
      gateways.push(g);
      return g;
    };
    alpha = gateway('ask-a');
    beta = gateway('ask-b');
    await Promise.all(gateways.map((g) => g.start()));
    await register(alpha, 'main', 'main');
    await register(alpha, 'worker', 'neighbour');
    await register(beta, 'worker', 'asker');
    await connect(alpha, 'main');
    await connect(alpha, 'neighbour');
    await connect(beta, 'asker');
    // Each side knows the other's entities before asking (the roster check of invariant 6).
    for (const g of [alpha, beta]) {
      await waitFor(`the roster on ${g.hostId}`, async () => {
        const names = (await g.roster()).map((e) => e.name);
        return ['main', 'asker'].every((n) => names.includes(n)) ? true : undefined;
      });
    }
  });

  afterAll(async () => {
    for (const c of clients) await c.close().catch(() => {});
    for (const g of gateways) await g.dispose();
    await deleteQueues([
      ...Object.values(ids).map((r) => `agent.${r.gid}.inbox`),
      ...gateways.map((g) => `control.${g.hostId}`),
    ]);
  });

  it('answered in time: the asking call resumes with the answer, and both logs show the turn', async () => {
    const asking = callTool(mcp.asker as Client, 'bridge_ask', {
      to: `main@${alpha.hostId}`,
      question: 'which branch should I rebase on?',
      timeout_ms: 30_000,
    });
    const ask = await nextMessage('main', 'ASK');
    expect(ask).toMatchObject({
      text: 'which branch should I rebase on?',
      from: { name: 'asker', host: beta.hostId },
    });
    expect(ask.turnId).toMatch(/^[0-9a-f-]{36}$/);

    const answered = await callTool(mcp.main as Client, 'bridge_answer', {
      ask_id: ask.msgId,
      text: 'main, please',
    });
    expect(answered.isError, JSON.stringify(answered.content)).toBeFalsy();
    expect(answered.structuredContent).toMatchObject({ askId: ask.msgId, status: 'sent', duplicate: false });

    const result = await asking;
    expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
    const outcome = result.structuredContent as { askId: string; traceId: string; answer: Message };
    expect(outcome.askId).toBe(ask.msgId);
    expect(outcome.answer).toMatchObject({ kind: 'ANSWER', text: 'main, please', inReplyTo: ask.msgId });

    // Only the first answer counts: a second one is the same message, not a new one.
    const again = await callTool(mcp.main as Client, 'bridge_answer', { ask_id: ask.msgId, text: 'or not' });
    expect(again.structuredContent).toMatchObject({ duplicate: true });

    const traceId = outcome.traceId;
    // The answer's delivery is acked once the tool result is out: wait for both rows.
    await waitFor('the turn answered and its answer acked in beta’s log', () => {
      const rows = traceEvents(beta, traceId);
      return trail(rows, 'turn').includes('turn.answered waiting→answered') &&
        trail(rows, 'delivery').includes('delivery.acked handed-over→acked')
        ? true
        : undefined;
    });
    expect(trail(traceEvents(beta, traceId), 'turn')).toEqual([
      'xstate.init ∅→waiting',
      'turn.answered waiting→answered',
    ]);
    expect(trail(traceEvents(beta, traceId), 'delivery')).toContain('delivery.acked handed-over→acked');
    expect(trail(traceEvents(alpha, traceId), 'delivery')).toContain('delivery.acked handed-over→acked');
    expect(trail(traceEvents(alpha, traceId), 'send')).toContain('send.confirmed published→confirmed');
  });

  it('expired: the caller gets ASK_EXPIRED at the deadline; an answer after it is too_late and sent nowhere', async () => {
    const started = Date.now();
    const result = await callTool(mcp.asker as Client, 'bridge_ask', {
      to: `main@${alpha.hostId}`,
      question: 'still there?',
      timeout_ms: 1_500,
    });
    const elapsed = Date.now() - started;
    const error = errorOf(result);
    expect(error.code).toBe('ASK_EXPIRED');
    expect(error.message).toMatch(/did not answer in time/);
    expect(elapsed).toBeGreaterThanOrEqual(1_400);

    // The ASK expired in the main's inbox too: a drain no longer offers it.
    const details = (result.structuredContent as { error: { details: { askId: string; traceId: string } } })
      .error.details;
    const late = await callTool(mcp.main as Client, 'bridge_answer', { ask_id: details.askId, text: 'yes!' });
    expect(late.isError, JSON.stringify(late.content)).toBeFalsy();
    expect(late.structuredContent).toMatchObject({ status: 'too_late' });
    expect((late.structuredContent as { why: string }).why).toMatch(/expired/);
    expect(trail(traceEvents(beta, details.traceId), 'turn')).toEqual([
      'xstate.init ∅→waiting',
      'xstate.after.untilDeadline.turn.waiting waiting→expired',
    ]);
    expect(trail(traceEvents(alpha, details.traceId), 'send')).toEqual([
      'xstate.init ∅→accepted',
      'send.failed accepted→failed',
    ]);
    // Nothing reached the asker.
    expect(await drain('asker')).toEqual([]);
  });

  it('answered late: the asking call hung up; the answer is injected nowhere and TOO_LATE reaches the main', async () => {
    const hangUp = new AbortController();
    const asking = (mcp.asker as Client)
      .callTool(
        {
          name: 'bridge_ask',
          arguments: { to: `main@${alpha.hostId}`, question: 'ok to force-push?', timeout_ms: 30_000 },
        },
        undefined,
        {
          signal: hangUp.signal,
          timeout: 60_000,
        },
      )
      .catch((err: unknown) => err);
    const ask = await nextMessage('main', 'ASK');
    hangUp.abort();
    await asking;
    // The cancellation reaches beta's gateway, which abandons the turn.
    await waitFor('the turn abandoned', () => {
      const rows = traceEvents(beta, ask.traceId);
      return trail(rows, 'turn').some((t) => t.startsWith('turn.abandoned')) ? true : undefined;
    });

    const answered = await callTool(mcp.main as Client, 'bridge_answer', { ask_id: ask.msgId, text: 'no!' });
    expect(answered.structuredContent).toMatchObject({ status: 'sent' });
    const answerId = (answered.structuredContent as { msgId: string }).msgId;

    const notice = await nextMessage('main', 'TOO_LATE');
    expect(notice).toMatchObject({ inReplyTo: answerId, from: { name: 'gateway', host: beta.hostId } });
    expect(notice.text).toMatch(/too late/);
    // The answer went nowhere: not to the asker's inbox, not to anyone else.
    expect(await drain('asker')).toEqual([]);
    const traceId = ask.traceId;
    expect(trail(traceEvents(beta, traceId), 'delivery')).toContain('delivery.tooLate pending→too-late');
  });

  it('same host: the answer resumes the asker at once and bridge_answer says delivered', async () => {
    const asking = callTool(mcp.neighbour as Client, 'bridge_ask', {
      to: 'main',
      question: 'lunch?',
      timeout_ms: 20_000,
    });
    const ask = await nextMessage('main', 'ASK');
    expect(ask.from.name).toBe('neighbour');
    const answered = await callTool(mcp.main as Client, 'bridge_answer', {
      ask_id: ask.msgId,
      text: 'at noon',
    });
    expect(answered.structuredContent).toMatchObject({ status: 'delivered' });
    expect(((await asking).structuredContent as { answer: Message }).answer.text).toBe('at noon');
  });

  it('bad answers are refused with a clear error', async () => {
    const unknown = errorOf(
      await callTool(mcp.main as Client, 'bridge_answer', {
        ask_id: '01890a5d-ac96-774b-bcce-b302099a8057',
        text: 'x',
      }),
    );
    expect(unknown.code).toBe('UNKNOWN_ASK');
    expect(unknown.message).toMatch(/ask_id is the msgId of an ASK you received/);
    const sent = await callTool(mcp.neighbour as Client, 'bridge_send', {
      to: 'main',
      text: 'a plain message',
    });
    const plain = (sent.structuredContent as { msgId: string }).msgId;
    const notAsk = errorOf(await callTool(mcp.main as Client, 'bridge_answer', { ask_id: plain, text: 'x' }));
    expect(notAsk.code).toBe('UNKNOWN_ASK');
    expect(notAsk.message).toMatch(/not an ASK: answer it with bridge_reply/);
    await drain('main');
  });

  it('the asking gateway restarted mid-ask: the deadline survives and fires on time', async () => {
    const timeoutMs = 8_000;
    const started = Date.now();
    const first = callTool(mcp.asker as Client, 'bridge_ask', {
      to: `main@${alpha.hostId}`,
      question: 'deploy now?',
      timeout_ms: timeoutMs,
      idempotency_key: 'deploy-question',
    }).catch((err: unknown) => err);
    const ask = await nextMessage('main', 'ASK');
    await beta.kill9();
    void first;
    await beta.start();
    await waitFor('alpha back in beta’s roster', async () => {
      return (await beta.roster()).some((e) => e.name === 'main') ? true : undefined;
    });

    // The agent retries its call with the same key: it waits on the same turn, whose deadline
    // is still the first call's.
    const client = await connect(beta, 'asker');
    const retried = await callTool(client, 'bridge_ask', {
      to: `main@${alpha.hostId}`,
      question: 'deploy now?',
      timeout_ms: timeoutMs,
      idempotency_key: 'deploy-question',
    });
    const elapsed = Date.now() - started;
    expect(errorOf(retried).code).toBe('ASK_EXPIRED');
    expect(elapsed).toBeGreaterThanOrEqual(timeoutMs - 200);
    expect(elapsed).toBeLessThan(timeoutMs + 3_000);

    const traceId = ask.traceId;
    const turn = traceEvents(beta, traceId).filter((r) => r.actor_kind === 'turn');
    expect(turn.map((r) => r.event)).toEqual([
      'xstate.init',
      'actor.rehydrated',
      'xstate.after.untilDeadline.turn.waiting',
    ]);
    // The expiry's own clock stamp is the deadline, not the retry's start plus the timeout.
    const input = JSON.parse(turn[0]?.data ?? '{}') as { deadline: number };
    const expiredAt = Number.parseInt((turn[2]?.hlc ?? '').split('.')[0] ?? '0', 10);
    expect(Math.abs(expiredAt - input.deadline)).toBeLessThan(1_500);
  });

  it('after the restart an answer to a turn nobody waits on is too late, and the main is told', async () => {
    const asking = callTool(mcp.asker as Client, 'bridge_ask', {
      to: `main@${alpha.hostId}`,
      question: 'merge?',
      timeout_ms: 30_000,
    }).catch((err: unknown) => err);
    const ask = await nextMessage('main', 'ASK');
    await beta.kill9();
    void asking;
    await beta.start();
    await waitFor('beta back in alpha’s roster', async () => {
      const r = await alpha.cli(['roster', '--json']);
      const entries = JSON.parse(r.stdout) as Array<{ name: string; status: string }>;
      return entries.some((e) => e.name === 'asker' && e.status !== 'unknown') ? true : undefined;
    });
    await sleep(heartbeatMs * 2);
    const answered = await callTool(mcp.main as Client, 'bridge_answer', { ask_id: ask.msgId, text: 'yes' });
    expect(answered.structuredContent).toMatchObject({ status: 'sent' });
    const notice = await nextMessage('main', 'TOO_LATE');
    expect(notice.text).toMatch(/gone|restarted/);
  });
});
