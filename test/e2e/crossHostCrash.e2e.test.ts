import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import Database from 'better-sqlite3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { dlqName } from '../../src/federation/topology.js';
import { deliveryActorId, parseDeliveryActorId } from '../../src/store/actorIds.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { tailLines } from '../support/chaosStreams.js';
import { brokerEnv, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { hasStalled } from '../support/hasStalled.js';
import { keepOnFailure, keepState, keptMark, queueStates } from '../support/keepOnFailure.js';
import { callTool, connectMcp } from '../support/mcpClient.js';
import { readUntil } from '../support/readUntil.js';
import { startTmuxServer, type TmuxTestServer } from '../support/tmux.js';

const typed = Number(process.env.BRIDGE_XHOST_MESSAGES ?? 600);
const drained = Number(process.env.BRIDGE_XHOST_DRAINED ?? 500);
const kills = Number(process.env.BRIDGE_XHOST_KILLS ?? 4);
const drainKills = Number(process.env.BRIDGE_XHOST_DRAIN_KILLS ?? 8);

interface Registered {
  gid: string;
  token: string;
  name: string;
  host: string;
  kind: string;
}

interface Drained {
  msgId: string;
  text: string;
  from: { name: string; host: string };
}

interface Pair {
  a: GatewayProcess;
  b: GatewayProcess;
  source: Registered;
  target: Registered;
  /** The recipient as the sender names it: `name@<B's host id>`. */
  address: string;
}

/** How long nothing may arrive, with B up, before a stream counts as stalled. */
const stallMs = 10_000;

const random = (min: number, max: number) => min + Math.random() * (max - min);

/**
 * Sends one MCP tools/call over a raw socket of its own and hangs up as soon as the request is
 * out, as a main does whose process dies (or whose connection drops) while it waits.
 */
function callAndHangUp(port: number, token: string, sessionId: string, tool: string): Promise<void> {
  const body = JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: { name: tool, arguments: {} },
  });
  const request = [
    'POST /mcp HTTP/1.1',
    `Host: 127.0.0.1:${port}`,
    `Authorization: Bearer ${token}`,
    `Mcp-Session-Id: ${sessionId}`,
    'Content-Type: application/json',
    'Accept: application/json, text/event-stream',
    `Content-Length: ${Buffer.byteLength(body)}`,
    '',
    body,
  ].join('\r\n');
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => {
      socket.write(request, () => {
        socket.destroy();
        resolve();
      });
    });
    socket.on('error', reject);
  });
}

/**
 * Invariant 5 and R-DL4/R-DL5 across hosts under SIGKILL: a main on gateway A streams messages
 * to an entity on gateway B (separate OS processes, federated through the real broker) while
 * B, the receiver, is killed -9 at random moments of the stream and restarted. The sender
 * retries with idempotency keys, as an agent would. At the end every message reached the
 * recipient exactly once, in send order, and B's log holds each as one acked delivery.
 *
 * The 600-message stream (BRIDGE_XHOST_MESSAGES) goes to a worker in a real tmux pane running `cat >> file`, so the
 * kills also land in the typed-but-not-yet-recorded window (R-DL5). A shorter stream goes to a
 * main on B that drains, whose handover is a drain call instead of a pane; a last test takes the
 * drain's crash window apart deterministically: the main's connection is gone when the answer
 * to its drain is written.
 *
 * The gateways run with `store.synchronous: NORMAL` (BRIDGE_XHOST_SYNC=FULL to change): in WAL
 * mode a commit survives the death of the process either way (only power loss tells them
 * apart), and it halves the cost of a send on this machine.
 */
// Each case ends on a condition (every message typed or drained); its budget is what a loaded
// 2-core machine needs, not the e2e default (a CPU burner made the pane case take 184 s).
describe('SIGKILL of the receiving gateway during a cross-host stream', { timeout: 480_000 }, () => {
  let tmux: TmuxTestServer;
  let dir: string;
  const gateways: GatewayProcess[] = [];
  const queues: string[] = [];

  beforeAll(async () => {
    tmux = await startTmuxServer();
    dir = mkdtempSync(join(tmpdir(), 'bridge-xcrash-'));
  });
  afterEach(async ({ task }) => {
    // A failure the final checks did not catch (a timeout, a gateway that did not start):
    // keep the gateways' state all the same, before they are disposed of.
    const errors = task.result?.errors ?? [];
    if (task.result?.state === 'fail' && !errors.some((e) => e.message?.includes(keptMark))) {
      const label = `crossHostCrash-${task.name.replace(/[^A-Za-z0-9]+/g, '-').slice(0, 40)}`;
      const where = await keepState(label, {
        gateways: Object.fromEntries(gateways.map((g) => [g.hostId, g])),
        queues: [...queues, dlqName],
      }).catch((err: Error) => `the gateways' state could not be kept: ${err.message}`);
      console.log(where);
      for (const error of errors) error.message = `${error.message}\n\n${where}`;
    }
    for (const gateway of gateways.splice(0)) await gateway.dispose().catch(() => {});
    await deleteQueues(queues.splice(0));
  });
  afterAll(async () => {
    await tmux?.kill();
    rmSync(dir, { recursive: true, force: true });
  });

  const startGateway = async (prefix: string): Promise<GatewayProcess> => {
    const gateway = new GatewayProcess({
      hostId: uniqueHostId(prefix),
      env: { ...brokerEnv },
      config: {
        // A's roster keeps B's entries through B's restarts (30 s), so a send during an
        // outage is still addressed by name; the broker holds it in B's durable inbox.
        broker: { heartbeatMs: 1_000, presenceTtlBeats: 30 },
        limits: { maxDrain: 500 },
        store: { synchronous: process.env.BRIDGE_XHOST_SYNC ?? 'NORMAL' },
      },
    });
    gateways.push(gateway);
    queues.push(`control.${gateway.hostId}`);
    await gateway.start();
    return gateway;
  };

  const register = async (gateway: GatewayProcess, args: string[]): Promise<Registered> => {
    const result = await gateway.cli(['register', ...args, '--json']);
    expect(result.code, result.stderr || result.stdout).toBe(0);
    const registered = JSON.parse(result.stdout) as Registered;
    queues.push(`agent.${registered.gid}.inbox`);
    return registered;
  };

  /** A and B up, a main `source` on A, and A's roster showing the recipient on B. */
  const setUp = async (receiver: (b: GatewayProcess) => Promise<Registered>): Promise<Pair> => {
    const a = await startGateway('xa');
    const b = await startGateway('xb');
    const target = await receiver(b);
    const source = await register(a, ['--kind', 'main', '--name', 'source']);
    const address = `${target.name}@${b.hostId}`;
    const client = await connectMcp(a.mcpUrl, source.token);
    try {
      await waitFor(`${address} in A's roster`, async () => {
        const roster = await callTool(client, 'bridge_roster', {});
        const entities = (roster.structuredContent as { entities?: Array<{ name: string; host: string }> })
          .entities;
        return entities?.some((e) => `${e.name}@${e.host}` === address) ? true : undefined;
      });
    } finally {
      await client.close();
    }
    return { a, b, source, target, address };
  };

  /** Sends `seq-1..seq-count` in order, each retried with its idempotency key until accepted. */
  const send = async (
    a: GatewayProcess,
    token: string,
    to: string,
    count: number,
    progress: { sent: number } = { sent: 0 },
  ) => {
    let client: Client | undefined;
    let retries = 0;
    let repeats = 0;
    const errors: string[] = [];
    for (let i = 1; i <= count; i++) {
      for (;;) {
        try {
          client ??= await connectMcp(a.mcpUrl, token);
          const result = await callTool(
            client,
            'bridge_send',
            { to, text: `seq-${i}`, idempotency_key: `k-${i}` },
            10_000,
          );
          if (result.isError) throw new Error(JSON.stringify(result.content));
          if ((result.structuredContent as { duplicate: boolean }).duplicate) repeats++;
          progress.sent = i;
          break;
        } catch (err) {
          retries++;
          if (errors.length < 3) errors.push(String((err as Error).message ?? err).slice(0, 300));
          await client?.close().catch(() => {});
          client = undefined;
          await sleep(50);
        }
      }
    }
    await client?.close().catch(() => {});
    return { retries, idempotentRepeats: repeats, firstSendErrors: errors };
  };

  /**
   * Kills B -9 `kills` times, each when the receiver has got a random share (5-90 %) of the
   * stream and then `moment()` has passed, and restarts it after a random outage during which
   * the sender keeps publishing. `up.at` is when B was last up again: no stall is judged
   * across an outage (see hasStalled).
   */
  const killer = async (
    b: GatewayProcess,
    total: number,
    delivered: () => number,
    moment: () => Promise<unknown> = () => sleep(random(0, 300)),
    times = kills,
    up: { at: number } = { at: Date.now() },
  ) => {
    const marks = Array.from({ length: times }, () => Math.floor(random(0.05, 0.9) * total)).sort(
      (x, y) => x - y,
    );
    let done = 0;
    let outageMs = 0;
    const at: number[] = [];
    const killedAt: string[] = [];
    let seen = delivered();
    let changed = Date.now();
    for (const mark of marks) {
      while (delivered() < mark) {
        if (delivered() !== seen) {
          seen = delivered();
          changed = Date.now();
        }
        if (hasStalled({ now: Date.now(), lastArrival: changed, lastUp: up.at }, stallMs))
          return { kills: done, killedAtDelivered: at, killedAt, outageMs, stalled: true };
        await sleep(10);
      }
      await moment();
      at.push(delivered());
      killedAt.push(new Date().toISOString());
      await b.kill9();
      done++;
      const down = Date.now();
      await sleep(random(50, 800));
      await b.start();
      up.at = Date.now();
      outageMs += Date.now() - down;
    }
    return { kills: done, killedAtDelivered: at, killedAt, outageMs };
  };

  /** How the kills landed, from B's log: deliveries resumed at each restart, R-DL5 recoveries. */
  const recoveryOf = (b: GatewayProcess) => {
    const resumed = [...b.log.matchAll(/"resumedDeliveries":(\d+)/g)].map((m) => Number(m[1]));
    const db = new Database(join(b.home, 'events.db'), { readonly: true });
    try {
      const recovery = db
        .prepare(
          "SELECT json_extract(data, '$.where') AS found, count(*) AS n FROM event_log WHERE event = 'delivery.located' GROUP BY found",
        )
        .all();
      return { resumedAtRestart: resumed.slice(1), recovery };
    } finally {
      db.close();
    }
  };

  /** Final states of B's delivery actors for these msgIds, counted (one actor per msgId). */
  const deliveryStates = (b: GatewayProcess, msgIds: readonly string[]): Record<string, number> => {
    const wanted = new Set(msgIds);
    const db = new Database(join(b.home, 'events.db'), { readonly: true });
    try {
      const rows = db
        .prepare("SELECT actor_id AS id, state FROM actors WHERE actor_kind = 'delivery'")
        .all() as Array<{ id: string; state: string }>;
      const counts: Record<string, number> = {};
      for (const row of rows) {
        if (!wanted.has(parseDeliveryActorId(row.id)?.msgId ?? row.id)) continue;
        counts[row.state] = (counts[row.state] ?? 0) + 1;
      }
      return counts;
    } finally {
      db.close();
    }
  };

  /** The seqs of the received messages whose delivery on B did not end `acked`, in order. */
  const notAcked = (b: GatewayProcess, recipient: string, received: readonly Drained[]): number[] => {
    const db = new Database(join(b.home, 'events.db'), { readonly: true });
    try {
      const head = db.prepare("SELECT state FROM actors WHERE actor_kind = 'delivery' AND actor_id = ?");
      const seqs = new Set<number>();
      for (const m of received) {
        const row = head.get(deliveryActorId(m.msgId, recipient)) as { state: string } | undefined;
        if (row?.state !== 'acked') seqs.add(Number(/^seq-(\d+)$/.exec(m.text)?.[1]));
      }
      return [...seqs].sort((x, y) => x - y);
    } finally {
      db.close();
    }
  };

  /**
   * For messages the recipient never got: their msgId (A's idempotency table maps `k-<seq>` to
   * it), how A's send ended, and every event B's log holds for their delivery, next to B's
   * restart times, so a loss can be placed against the kills.
   */
  const lossReport = (pair: Pair, missing: readonly number[], label = 'missing') => {
    const dbA = new Database(join(pair.a.home, 'events.db'), { readonly: true });
    const dbB = new Database(join(pair.b.home, 'events.db'), { readonly: true });
    try {
      const restarts = [...pair.b.log.matchAll(/"time":"([^"]+)"[^\n]*"msg":"gateway started"/g)].map(
        (m) => m[1],
      );
      const messages = missing.slice(0, 10).map((seq) => {
        const row = dbA
          .prepare('SELECT msg_id AS msgId FROM idempotency WHERE sender = ? AND key = ?')
          .get(pair.source.gid, `k-${seq}`) as { msgId: string } | undefined;
        const msgId = row?.msgId;
        const send = dbA
          .prepare("SELECT state FROM actors WHERE actor_kind = 'send' AND actor_id = ?")
          .get(msgId) as { state: string } | undefined;
        const delivery = dbB
          .prepare(
            "SELECT hlc, event, from_state AS 'from', to_state AS 'to', data FROM event_log WHERE actor_kind = 'delivery' AND msg_id = ? ORDER BY hlc",
          )
          .all(msgId)
          .map((e) => {
            const event = e as { hlc: string; data: string | null };
            return { ...event, at: new Date(Number(event.hlc.slice(0, 15))).toISOString() };
          });
        return { seq, msgId, send: send?.state, delivery };
      });
      // Where each missing message is in B's store: its delivery's state, or not there at all
      // (then on the broker: the inbox's ready/unacked counts or the DLQ in the failure message).
      const where: Record<string, number> = {};
      for (const seq of missing) {
        const row = dbA
          .prepare('SELECT msg_id AS msgId FROM idempotency WHERE sender = ? AND key = ?')
          .get(pair.source.gid, `k-${seq}`) as { msgId: string } | undefined;
        const head = dbB
          .prepare("SELECT state FROM actors WHERE actor_kind = 'delivery' AND actor_id = ?")
          .get(deliveryActorId(`${row?.msgId}`, pair.target.gid)) as { state: string } | undefined;
        const state = head?.state ?? 'not in B’s store';
        where[state] = (where[state] ?? 0) + 1;
      }
      return { [label]: missing.length, whereOnB: where, restartsOfB: restarts, messages };
    } finally {
      dbA.close();
      dbB.close();
    }
  };

  const expectExactlyOnceInOrder = (seqs: number[], total: number) => {
    const distinct = new Set(seqs);
    expect({
      count: seqs.length,
      duplicates: seqs.length - distinct.size,
      missing: total - distinct.size,
    }).toEqual({ count: total, duplicates: 0, missing: 0 });
    expect(seqs).toEqual(Array.from({ length: total }, (_, i) => i + 1));
  };

  it(`${typed} messages A → a worker in a tmux pane on B, B killed -9 ${kills} times: each typed once, in order`, async () => {
    const started = Date.now();
    const out = join(dir, 'pane.txt');
    const pane = await tmux.newPane(`cat >> ${out}`);
    const { a, b, source, address } = await setUp((gateway) =>
      register(gateway, [
        '--kind',
        'worker',
        '--name',
        'worker',
        '--tmux',
        pane,
        '--tmux-socket',
        tmux.socket,
      ]),
    );

    // Other tests' broadcasts (`broadcast.all` on the shared broker) may be typed here too.
    const ourLine = new RegExp(`^\\[bridge SEND from source@${a.hostId} msg ([0-9a-f-]{36})\\] seq-(\\d+)$`);
    const lines: string[] = [];
    let foreign = 0;
    const tail = tailLines(out);
    const read = () => {
      for (const line of tail()) {
        if (ourLine.test(line)) lines.push(line);
        else foreign++;
      }
      return lines.length;
    };

    const [sender, kill] = await Promise.all([send(a, source.token, address, typed), killer(b, typed, read)]);
    const deadline = Date.now() + 60_000;
    while (read() < typed && Date.now() < deadline) await sleep(100);
    await sleep(1_000); // a duplicate would be typed now
    read();

    const parsed = lines.map((line) => ourLine.exec(line) as RegExpExecArray);
    const seqs = parsed.map((m) => Number(m[2]));
    console.log(
      JSON.stringify({
        test: 'typed',
        messages: typed,
        typed: lines.length,
        seconds: Math.round((Date.now() - started) / 100) / 10,
        ...kill,
        ...sender,
        foreignLines: foreign,
        ...recoveryOf(b),
      }),
    );
    expectExactlyOnceInOrder(seqs, typed);
    expect(kill.kills).toBe(kills);
    const typedIds = parsed.map((m) => m[1] as string);
    expect(await readUntil(() => deliveryStates(b, typedIds), { acked: typed })).toEqual({ acked: typed });
  });

  it(`${drained} messages A → a main on B, B killed -9 ${drainKills} times: none lost, in send order, repeats only from the crash window`, async () => {
    const started = Date.now();
    const pair = await setUp((gateway) => register(gateway, ['--kind', 'main', '--name', 'inbox']));
    const { a, b, source, target, address } = pair;
    // On failure the broker's side is reported too: B's inbox, and the shared DLQ (other
    // tests' letters land there as well: its depth now tells what this test added).
    const brokerQueues = [`agent.${target.gid}.inbox`, dlqName];
    const dlqAtStart = await queueStates([dlqName]).then(
      (states) => states[0]?.ready ?? 0,
      (err: Error) => err.message,
    );

    // Every inbox is bound to `broadcast.all` on the shared broker, so other tests'
    // broadcasts may land here too: only what `source` on A sent is this stream.
    const ours: Drained[] = [];
    let foreign = 0;
    let drainErrors = 0;
    const take = (messages: Drained[]) => {
      for (const m of messages) {
        if (m.from.name === 'source' && m.from.host === a.hostId) ours.push(m);
        else foreign++;
      }
    };
    // The kills land while a drain that has messages to hand over is in flight (0-8 ms after
    // the call goes out, with at least 5 sent and not yet received): the handover is the
    // drain's crash window, as typing is the pane's. Without such a drain in 3 s, at once.
    const progress = { sent: 0 };
    const drainStarts: Array<() => void> = [];
    const nextDrain = () =>
      Promise.race([
        new Promise<void>((resolve) => drainStarts.push(resolve)).then(() => sleep(random(0, 8))),
        sleep(3_000),
      ]);
    const drain = async (c: Client) => {
      if (progress.sent - ours.length >= 5) for (const resolve of drainStarts.splice(0)) resolve();
      const result = await callTool(c, 'bridge_drain', { max: 500 }, 10_000);
      if (result.isError) throw new Error(JSON.stringify(result.content));
      return (result.structuredContent as { messages: Drained[] }).messages;
    };
    const receive = async (killing: Promise<unknown>) => {
      let client: Client | undefined;
      // Stop early when the stream stalls after the last send (a lost message), so the test
      // reports what arrived instead of timing out; the window opens again at each restart
      // of B, whose messages come off the broker only once it is back.
      let sendsDone = false;
      let lastArrival = Date.now();
      void sending.finally(() => {
        sendsDone = true;
      });
      const stalled = () =>
        sendsDone && hasStalled({ now: Date.now(), lastArrival, lastUp: bUp.at }, stallMs);
      const drainOnce = async () => {
        try {
          client ??= await connectMcp(b.mcpUrl, target.token);
          const messages = await drain(client);
          take(messages);
          return messages.length;
        } catch {
          drainErrors++; // B is down or restarting
          await client?.close().catch(() => {});
          client = undefined;
          await sleep(100);
          return undefined;
        }
      };
      let killerDone = false;
      void killing.finally(() => {
        killerDone = true;
      });
      try {
        while (!killerDone || (ours.length < drained && !stalled())) {
          const got = await drainOnce();
          if (got !== undefined && got > 0) lastArrival = Date.now();
          if (got === 0) await sleep(20);
        }
        await sleep(1_000); // a duplicate would be waiting now
        for (let attempt = 0; attempt < 50 && (await drainOnce()) === undefined; attempt++);
      } finally {
        await client?.close().catch(() => {});
      }
    };

    const bUp = { at: Date.now() };
    const sending = send(a, source.token, address, drained, progress);
    const killing = killer(b, drained, () => ours.length, nextDrain, drainKills, bUp);
    const [sender, kill] = await Promise.all([sending, killing, receive(killing)]);

    const seqs = ours.map((m) => Number(/^seq-(\d+)$/.exec(m.text)?.[1]));
    console.log(
      JSON.stringify({
        test: 'drained',
        messages: drained,
        received: ours.length,
        seconds: Math.round((Date.now() - started) / 100) / 10,
        ...kill,
        ...sender,
        drainErrors,
        foreignBroadcasts: foreign,
        ...recoveryOf(b),
      }),
    );
    const got = new Set(seqs);
    const missing = Array.from({ length: drained }, (_, i) => i + 1).filter((seq) => !got.has(seq));
    if (missing.length > 0) console.log(JSON.stringify(lossReport(pair, missing), null, 1));
    const kept = { gateways: { a, b }, queues: brokerQueues, extra: () => ({ dlqAtStart }) };
    await keepOnFailure('crossHostCrash-drained', kept, async () => {
      // A main pulls: a drain's answer that went out just before the kill, whose confirmation
      // never reached the log, is handed over again after the restart, under the same msgId
      // (at-least-once to a main; the msgId lets it drop the repeat). Nothing is lost, and the
      // first arrivals are in send order.
      const firstSeen = seqs.filter((seq, i) => seqs.indexOf(seq) === i);
      expect(firstSeen).toEqual(Array.from({ length: drained }, (_, i) => i + 1));
      const repeats = seqs.length - firstSeen.length;
      const byMsgId = new Map<number, Set<string>>();
      for (const m of ours) {
        const seq = Number(/^seq-(\d+)$/.exec(m.text)?.[1]);
        byMsgId.set(seq, (byMsgId.get(seq) ?? new Set()).add(m.msgId));
      }
      expect([...byMsgId.values()].every((ids) => ids.size === 1)).toBe(true);
      expect(repeats).toBeLessThanOrEqual(drainKills * 100);
      console.log(JSON.stringify({ test: 'drained', repeatsFromTheCrashWindow: repeats }));
      expect(kill.kills).toBe(drainKills);
      // B records `acked` once the drain's answer is out, which the main may see first.
      const ids = ours.map((m) => m.msgId);
      const states = await readUntil(() => deliveryStates(b, ids), { acked: drained });
      if (states.acked !== drained) {
        // Received by the main and not acked on B: which ones, and their delivery's events.
        const unacked = notAcked(b, pair.target.gid, ours);
        console.log(JSON.stringify(lossReport(pair, unacked, 'notAcked'), null, 1));
      }
      expect(states).toEqual({ acked: drained });
    });
  });
  it('a drain whose answer never reaches the main (its connection is gone) hands the messages over again', async () => {
    const pair = await setUp((gateway) => register(gateway, ['--kind', 'main', '--name', 'inbox']));
    const { a, b, source, target, address } = pair;
    await send(a, source.token, address, 3);
    await waitFor('3 messages held on B', async () => {
      const roster = (await b.roster()) as Array<{
        gid: string;
        depth?: number;
      }>;
      const depth = roster.find((e) => e.gid === target.gid)?.depth ?? 0;
      return depth >= 3 ? true : undefined;
    });
    const client = await connectMcp(b.mcpUrl, target.token);
    try {
      const sessionId = (client.transport as StreamableHTTPClientTransport).sessionId as string;
      await callAndHangUp(b.port, target.token, sessionId, 'bridge_drain');
      await sleep(1_000);
      const result = await callTool(client, 'bridge_drain', {});
      const texts = (result.structuredContent as { messages: Drained[] }).messages
        .filter((m) => m.from.host === a.hostId)
        .map((m) => m.text);
      if (texts.length < 3) console.log(JSON.stringify(lossReport(pair, [1, 2, 3]), null, 1));
      expect(texts, 'the main never saw these; the next drain must hand them over').toEqual([
        'seq-1',
        'seq-2',
        'seq-3',
      ]);
    } finally {
      await client.close().catch(() => {});
    }
  });
});
