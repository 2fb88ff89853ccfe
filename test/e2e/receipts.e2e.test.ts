import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminRoutes } from '../../src/interfaces/adminProtocol.js';
import { namedUuid } from '../../src/wire/ids.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { brokerEnv, removeDeadLettersOf, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';

interface Registered {
  gid: string;
  token: string;
  name: string;
  host: string;
}

interface Status {
  msg_id: string;
  trace_id: string;
  to: { gid: string; name?: string; host?: string };
  stage: string | null;
  stages: Array<{ stage: string; at: number; reason?: string; detail?: string }>;
  send_state: string;
}

interface Sent {
  msgId: string;
  traceId: string;
  stage: string | null;
  timed_out?: boolean;
}

// A's bound on a wait_for: long enough that the receipts of a message B hands over at once are
// back within it on a machine running the whole suite (3 s was not, under a load of 6 on 2
// cores), short enough that "unreached within the bound" does not drag.
const receiptWaitMs = 8_000;

/**
 * Receipts (R-RC1) end to end: two gateway processes on the real broker, MCP SDK clients for
 * the mains, the CLI for the operator. The stages of a delivery on B come back to A and answer
 * bridge_status and wait_for there; same-host messages too; a kill of either gateway while a
 * receipt is on its way loses it not, and records it once.
 */
describe('receipts to the sender, across two gateway processes', () => {
  let a: GatewayProcess;
  let b: GatewayProcess;
  const ids: Record<string, Registered> = {};
  const clients: Client[] = [];
  const mcp: Record<string, Client> = {};
  const queues = new Set<string>();

  const register = async (g: GatewayProcess, kind: string, name: string): Promise<Registered> => {
    const result = await g.cli(['register', '--kind', kind, '--name', name, '--json']);
    expect(result.code, result.stderr || result.stdout).toBe(0);
    const registered = JSON.parse(result.stdout) as Registered;
    ids[name] = registered;
    queues.add(`agent.${registered.gid}.inbox`);
    return registered;
  };
  const connect = async (g: GatewayProcess, name: string): Promise<Client> => {
    const client = await connectMcp(g.mcpUrl, (ids[name] as Registered).token);
    clients.push(client);
    mcp[name] = client;
    return client;
  };
  const send = async (from: string, args: Record<string, unknown>): Promise<Sent> => {
    const result = await callTool(mcp[from] as Client, 'bridge_send', args);
    expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
    return result.structuredContent as unknown as Sent;
  };
  const status = async (who: string, msgId: string): Promise<Status> => {
    const result = await callTool(mcp[who] as Client, 'bridge_status', { msg_id: msgId });
    expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
    return result.structuredContent as unknown as Status;
  };
  /** Polls bridge_status until the stage shows (UNKNOWN_MESSAGE, before the send exists, too). */
  const statusUntil = (who: string, msgId: string, stage: string, ms = 20_000) =>
    waitFor(
      `${stage} for ${msgId}`,
      async () => {
        const result = await callTool(mcp[who] as Client, 'bridge_status', { msg_id: msgId });
        const s = result.structuredContent as unknown as Status;
        return !result.isError && s.stage === stage ? s : undefined;
      },
      ms,
    );
  const drain = async (name: string) => {
    const result = await callTool(mcp[name] as Client, 'bridge_drain', {});
    return (result.structuredContent as { messages: Array<{ msgId: string }> }).messages;
  };
  const drainUntil = (name: string, msgId: string) =>
    waitFor(`${msgId} drained by ${name}`, async () =>
      (await drain(name)).some((m) => m.msgId === msgId) ? true : undefined,
    );
  /** The receipts a gateway recorded on the send actor of `msgId`, from its event log. */
  const recorded = (g: GatewayProcess, msgId: string): string[] => {
    const db = new Database(join(g.home, 'events.db'), { readonly: true });
    try {
      const rows = db
        .prepare(
          "SELECT data FROM event_log WHERE actor_kind = 'send' AND actor_id = ? AND event = 'send.receipt' ORDER BY hlc",
        )
        .all(msgId) as Array<{ data: string }>;
      return rows.map((row) => (JSON.parse(row.data) as { stage: string }).stage);
    } finally {
      db.close();
    }
  };
  const outbox = (g: GatewayProcess): Array<{ msg_id: string; stage: string }> => {
    const db = new Database(join(g.home, 'events.db'), { readonly: true });
    try {
      return db.prepare('SELECT msg_id, stage FROM receipt_outbox').all() as Array<{
        msg_id: string;
        stage: string;
      }>;
    } finally {
      db.close();
    }
  };
  /** Closes a gateway's broker connection from the broker's side, as a network cut would. */
  const cutBrokerConnection = (g: GatewayProcess) => {
    const listing = execFileSync('rabbitmqctl', ['list_connections', '-q', 'pid', 'client_properties'], {
      encoding: 'utf8',
    });
    const line = listing.split('\n').find((l) => l.includes(`"bridge gateway ${g.hostId}"`));
    const pid = line?.split('\t')[0];
    if (!pid) throw new Error(`no broker connection of ${g.hostId}:\n${listing}`);
    execFileSync('rabbitmqctl', ['close_connection', pid, 'receipts test: cut'], { stdio: 'ignore' });
  };
  const admin = (g: GatewayProcess, route: string, body?: unknown): Promise<unknown> => g.admin(route, body);
  const inRoster = (g: GatewayProcess, name: string) =>
    waitFor(`${name} in ${g.hostId}'s roster`, async () => {
      return (await g.roster()).some((e) => e.name === name && e.status !== 'unknown') ? true : undefined;
    });

  beforeAll(async () => {
    a = new GatewayProcess({
      hostId: uniqueHostId('rcpt-a'),
      env: { ...brokerEnv },
      config: { broker: { heartbeatMs: 300 }, delivery: { receiptWaitMs } },
    });
    // B reconnects slowly, so that a cut connection stays cut long enough to drain meanwhile.
    b = new GatewayProcess({
      hostId: uniqueHostId('rcpt-b'),
      env: { ...brokerEnv },
      config: { broker: { heartbeatMs: 300, retryBaseMs: 8_000, retryMaxMs: 8_000 } },
    });
    await Promise.all([a.start(), b.start()]);
    for (const g of [a, b]) queues.add(`control.${g.hostId}`);
    await register(a, 'main', 'lead');
    await register(a, 'main', 'near');
    await register(b, 'main', 'far');
    await register(b, 'main', 'leaving');
    await connect(a, 'lead');
    await connect(a, 'near');
    await connect(b, 'far');
    await inRoster(a, 'far');
    await inRoster(a, 'leaving');
  });

  afterAll(async () => {
    for (const c of clients) await c.close().catch(() => {});
    for (const g of [a, b]) await g?.dispose();
    await deleteQueues([...queues]);
    await removeDeadLettersOf([a.hostId, b.hostId]);
  });

  it('a main on A sends to a main on B, B drains: A says queued, then handed-over (bridge_status, CLI)', async () => {
    const sent = await send('lead', { to: `far@${b.hostId}`, text: 'review PR 7', wait_for: 'queued' });
    expect(sent.stage).toBe('queued');
    expect(sent.timed_out).toBeUndefined();
    expect((await status('lead', sent.msgId)).stages.map((s) => s.stage)).toEqual(['queued']);

    await drainUntil('far', sent.msgId);
    const done = await statusUntil('lead', sent.msgId, 'handed-over');
    expect(done).toMatchObject({
      msg_id: sent.msgId,
      trace_id: sent.traceId,
      to: { gid: ids.far?.gid, name: 'far', host: b.hostId },
      send_state: 'handed-over',
    });
    expect(done.stages.map((s) => s.stage)).toEqual(['queued', 'handed-over']);
    const [queued, handedOver] = done.stages as [Status['stages'][0], Status['stages'][0]];
    expect(handedOver.at).toBeGreaterThanOrEqual(queued.at);

    const human = await a.cli(['status', sent.msgId]);
    expect(human.code, human.stderr || human.stdout).toBe(0);
    expect(human.stdout).toMatch(/stage:\s+handed-over/);
    expect(human.stdout).toContain(`far@${b.hostId}`);
    expect(human.stdout).toMatch(/queued[\s\S]*handed-over/);
    const json = await a.cli(['status', sent.msgId, '--json']);
    expect(JSON.parse(json.stdout)).toMatchObject({ msgId: sent.msgId, stage: 'handed-over' });
    // `agentbridge status` with no argument is still the gateway's own status.
    const own = await a.cli(['status', '--json']);
    expect(JSON.parse(own.stdout)).toMatchObject({ host: a.hostId, mode: 'federated' });
    expect(recorded(a, sent.msgId)).toEqual(['queued', 'handed-over']);
    expect(outbox(b)).toEqual([]);
  });

  it('wait_for submitted returns once the main on B has it; unreached within the bound it says timed_out', async () => {
    const waiting = send('lead', { to: `far@${b.hostId}`, text: 'and PR 8', wait_for: 'submitted' });
    const msgId = await waitFor('the send in the log', async () => {
      const listing = await drain('far');
      return listing[0]?.msgId;
    });
    const sent = await waiting;
    expect(sent.msgId).toBe(msgId);
    expect(sent.stage).toBe('handed-over');

    const started = Date.now();
    const unread = await send('lead', {
      to: `far@${b.hostId}`,
      text: 'nobody drains this',
      wait_for: 'submitted',
    });
    expect(Date.now() - started).toBeGreaterThanOrEqual(receiptWaitMs - 100);
    expect(unread).toMatchObject({ stage: 'queued', timed_out: true });
    await drainUntil('far', unread.msgId);
  });

  it('an ask that expires unanswered on B: dead-lettered (expired) at A', async () => {
    const result = await callTool(mcp.lead as Client, 'bridge_ask', {
      to: `far@${b.hostId}`,
      question: 'which branch?',
      timeout_ms: 1_500,
    });
    expect(result.isError).toBe(true);
    const askId = (result.structuredContent as { error: { code: string; details: { askId: string } } }).error
      .details.askId;
    const dead = await statusUntil('lead', askId, 'dead-lettered');
    expect(dead.stages.at(-1)).toMatchObject({ stage: 'dead-lettered', reason: 'expired' });
    expect(dead.stages.map((s) => s.stage)).toEqual(['queued', 'dead-lettered']);
  });

  it('a recipient deregistered on B: dead-lettered (recipient-gone) at A, and a wait_for submitted ends with it', async () => {
    // A keyed send's msgId is known before it returns (it is named after the sender and key).
    const msgId = namedUuid((ids.lead as Registered).gid, 'to-leaving');
    const waiting = send('lead', {
      to: `leaving@${b.hostId}`,
      text: 'too late for me',
      wait_for: 'submitted',
      idempotency_key: 'to-leaving',
    });
    let waitEnded = false;
    const ended = () => {
      waitEnded = true;
    };
    // A rejection is the `await waiting` below's to report; this only notes that the call ended.
    waiting.then(ended, ended);
    // Everything from here to the receipt runs within A's receiptWaitMs (8 s, which the case
    // above waits out): B is read and told through its admin socket, the routes the CLI calls,
    // since a CLI process takes more than a second to start on a busy machine.
    await statusUntil('lead', msgId, 'queued');
    // On B, not only on the broker: one still in the queue goes to the DLQ when its inbox goes.
    await waitFor('the message on B', async () => {
      const roster = (await admin(b, adminRoutes.roster)) as Array<{ name: string; depth?: number }>;
      return roster.find((e) => e.name === 'leaving')?.depth === 1 ? true : undefined;
    });
    expect(waitEnded, 'the wait_for ended before the deregistration').toBe(false);
    const gone = await admin(b, adminRoutes.deregister, { address: 'leaving' });
    expect(gone).toMatchObject({ name: 'leaving', host: b.hostId });
    const sent = await waiting;
    expect(sent).toMatchObject({ msgId, stage: 'dead-lettered' });
    expect(sent.timed_out).toBeUndefined();
    const dead = await status('lead', msgId);
    expect(dead.stages.at(-1)).toMatchObject({ stage: 'dead-lettered', reason: 'recipient-gone' });
    // The operator's view: `agentbridge roster` lists it no more, and `agentbridge deregister` finds it gone.
    const roster = (await b.roster()) as Array<{ name: string }>;
    expect(roster.map((e) => e.name)).not.toContain('leaving');
    const again = await b.cli(['deregister', 'leaving']);
    expect(again.code).not.toBe(0);
    expect(again.stderr).toContain('leaving');
  });

  it('same host: queued as the send returns, handed-over after the drain, with no broker hop', async () => {
    const sent = await send('lead', { to: 'near', text: 'local news' });
    expect(sent.stage).toBe('queued');
    await drainUntil('near', sent.msgId);
    const done = await statusUntil('lead', sent.msgId, 'handed-over');
    expect(done.to).toMatchObject({ name: 'near', host: a.hostId });
    // near may ask too (a main), about anyone's message.
    expect((await status('near', sent.msgId)).stage).toBe('handed-over');
    expect(recorded(a, sent.msgId)).toEqual(['queued', 'handed-over']);
    expect(outbox(a)).toEqual([]);
  });

  it('SIGKILL of B after the drain, before its receipt went out: after the restart it arrives, recorded once', async () => {
    const sent = await send('lead', { to: `far@${b.hostId}`, text: 'before the crash', wait_for: 'queued' });
    expect(sent.stage).toBe('queued');
    cutBrokerConnection(b);
    await sleep(300);
    await drainUntil('far', sent.msgId); // the drain needs no broker; its receipt does
    await waitFor('the receipt waiting in B’s outbox', () =>
      outbox(b).some((r) => r.msg_id === sent.msgId && r.stage === 'handed-over') ? true : undefined,
    );
    await b.kill9();
    expect((await status('lead', sent.msgId)).stage).toBe('queued');

    await b.start();
    await statusUntil('lead', sent.msgId, 'handed-over');
    await waitFor('B’s outbox emptied', () => (outbox(b).length === 0 ? true : undefined));
    await sleep(500);
    expect(recorded(a, sent.msgId)).toEqual(['queued', 'handed-over']);
  });

  it('SIGKILL of A while the receipt is on its way: A records it when it is back, once', async () => {
    await inRoster(a, 'far');
    const far = await connect(b, 'far'); // B was restarted: a new session
    expect(far).toBeDefined();
    const sent = await send('lead', { to: `far@${b.hostId}`, text: 'while A is down', wait_for: 'queued' });
    await a.kill9();
    await drainUntil('far', sent.msgId);
    await waitFor('B told the broker', () => (outbox(b).length === 0 ? true : undefined));
    await sleep(300);
    expect(recorded(a, sent.msgId)).toEqual(['queued']);

    await a.start();
    await connect(a, 'lead');
    await statusUntil('lead', sent.msgId, 'handed-over');
    await sleep(500);
    expect(recorded(a, sent.msgId)).toEqual(['queued', 'handed-over']);
  });
});
