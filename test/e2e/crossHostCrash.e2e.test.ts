import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import Database from 'better-sqlite3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { deleteQueues, queueDepth, testBrokerUri, uniqueHostId } from '../support/broker.js';
import { GatewayProcess } from '../support/gatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';
import { startTmuxServer, type TmuxTestServer } from '../support/tmux.js';

const streamed = Number(process.env.BRIDGE_XHOST_MESSAGES ?? 5000);
const typed = Number(process.env.BRIDGE_XHOST_TYPED ?? 400);
const kills = Number(process.env.BRIDGE_XHOST_KILLS ?? 4);

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

const random = (min: number, max: number) => min + Math.random() * (max - min);

/**
 * Invariant 5 and R-DL4/R-DL5 across hosts under SIGKILL: a main on gateway A streams messages
 * to an entity on gateway B (separate OS processes, federated through the real broker) while
 * B, the receiver, is killed -9 at random moments and restarted. The sender retries with
 * idempotency keys, as an agent would. At the end every message reached the recipient exactly
 * once, in send order, and B's log shows every delivery acked.
 *
 * The 5,000-message stream goes to a main on B that drains (typing 5,000 messages into a tmux
 * pane costs more than this machine's two-minute budget); a shorter stream goes to a worker in
 * a real tmux pane running `cat >> file`, which adds the typed-but-not-recorded crash window.
 */
describe('SIGKILL of the receiving gateway during a cross-host stream', () => {
  let tmux: TmuxTestServer;
  let dir: string;
  const gateways: GatewayProcess[] = [];
  const queues: string[] = [];

  beforeAll(async () => {
    tmux = await startTmuxServer();
    dir = mkdtempSync(join(tmpdir(), 'bridge-xcrash-'));
  });
  afterEach(async () => {
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
      env: { BRIDGE_BROKER_URI: testBrokerUri },
      // A's roster keeps B's entries while B is down for a restart (30 s), so a send during
      // the outage is still addressed by name; the broker holds it in B's durable inbox.
      config: {
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
    expect(result.code, result.stderr).toBe(0);
    const registered = JSON.parse(result.stdout) as Registered;
    queues.push(`agent.${registered.gid}.inbox`);
    return registered;
  };

  /** A and B up, a main `source` on A, and A's roster showing `name@B`. */
  const setUp = async (receiver: (b: GatewayProcess) => Promise<Registered>) => {
    const a = await startGateway('xa');
    const b = await startGateway('xb');
    const target = await receiver(b);
    const source = await register(a, ['--kind', 'main', '--name', 'source']);
    const address = `${target.name}@${b.hostId}`;
    // Through the admin socket: A's MCP bridge_roster fails once it lists a remote entity
    // (see the roster test below).
    const deadline = Date.now() + 15_000;
    for (;;) {
      const roster = await a.cli(['roster', '--json']);
      expect(roster.code, roster.stderr).toBe(0);
      const entities = JSON.parse(roster.stdout) as Array<{ name: string; host: string }>;
      if (entities.some((e) => `${e.name}@${e.host}` === address)) break;
      if (Date.now() > deadline) throw new Error(`A's roster never showed ${address}`);
      await sleep(100);
    }
    return { a, b, source, target, address };
  };

  /** Sends `seq-1..seq-count` in order, each retried with its idempotency key until accepted. */
  const send = (a: GatewayProcess, token: string, to: string, count: number, progress: { sent: number }) =>
    (async () => {
      let client: Client | undefined;
      let retries = 0;
      let duplicates = 0;
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
            if ((result.structuredContent as { duplicate: boolean }).duplicate) duplicates++;
            break;
          } catch (err) {
            retries++;
            if (errors.length < 5) errors.push(String((err as Error).message ?? err).slice(0, 300));
            await client?.close().catch(() => {});
            client = undefined;
            await sleep(50);
          }
        }
        progress.sent = i;
      }
      await client?.close().catch(() => {});
      return { retries, duplicates, errors };
    })();

  /** Kills B -9 at random moments while `flowing()`, restarting it after a random outage. */
  const kill = (
    b: GatewayProcess,
    flowing: () => boolean,
    firstMs: [number, number],
    gapMs: [number, number],
  ) =>
    (async () => {
      let done = 0;
      let outageMs = 0;
      for (let k = 0; k < kills; k++) {
        await sleep(k === 0 ? random(...firstMs) : random(...gapMs));
        if (!flowing()) break;
        await b.kill9();
        done++;
        const down = Date.now();
        await sleep(random(50, 800));
        await b.start();
        outageMs += Date.now() - down;
      }
      return { kills: done, outageMs };
    })();

  /** What B's log says about the kills: deliveries resumed at each restart, R-DL5 recoveries. */
  const recoveryOf = (b: GatewayProcess) => {
    const resumed = [...b.log.matchAll(/"resumedDeliveries":(\d+)/g)].map((m) => Number(m[1]));
    const db = new Database(join(b.home, 'events.db'), { readonly: true });
    try {
      const recovery = db
        .prepare(
          "SELECT event, count(*) AS n FROM events WHERE event IN ('delivery.found', 'delivery.absent') GROUP BY event",
        )
        .all();
      const deliveries = db
        .prepare("SELECT count(*) AS n FROM actors WHERE actor_kind = 'delivery'")
        .get() as { n: number };
      return { resumedAtRestart: resumed.slice(1), recovery, deliveryActors: deliveries.n };
    } finally {
      db.close();
    }
  };

  const deliveriesOf = async (b: GatewayProcess) => {
    const status = await b.cli(['status', '--json']);
    expect(status.code, status.stderr).toBe(0);
    return (JSON.parse(status.stdout) as { deliveries: Record<string, number> }).deliveries;
  };

  it(`${streamed} messages A → main on B, B killed -9 ${kills} times: each drained once, in send order`, async () => {
    const started = Date.now();
    const { a, b, source, target, address } = await setUp((b) =>
      register(b, ['--kind', 'main', '--name', 'inbox']),
    );

    const progress = { sent: 0 };
    const received: Drained[] = [];
    let drainErrors = 0;
    const receiving = (async () => {
      let client: Client | undefined;
      const deadline = Date.now() + 150_000;
      while (received.length < streamed && Date.now() < deadline) {
        try {
          client ??= await connectMcp(b.mcpUrl, target.token);
          const result = await callTool(client, 'bridge_drain', { max: 500 }, 10_000);
          if (result.isError) throw new Error(JSON.stringify(result.content));
          const messages = (result.structuredContent as { messages: Drained[] }).messages;
          received.push(...messages);
          if (messages.length === 0) await sleep(20);
        } catch {
          drainErrors++;
          await client?.close().catch(() => {});
          client = undefined;
          await sleep(100);
        }
      }
      // Anything beyond `streamed` (a duplicate) would be handed over now.
      await sleep(1_000);
      try {
        client ??= await connectMcp(b.mcpUrl, target.token);
        const result = await callTool(client, 'bridge_drain', { max: 500 }, 10_000);
        received.push(
          ...((result.structuredContent as { messages?: Drained[] } | undefined)?.messages ?? []),
        );
      } finally {
        await client?.close().catch(() => {});
      }
    })();

    const [sender, killer] = await Promise.all([
      send(a, source.token, address, streamed, progress),
      kill(b, () => received.length < streamed, [1_000, 3_000], [2_000, 5_000]),
      receiving,
    ]);

    const seqs = received.map((m) => Number(/^seq-(\d+)$/.exec(m.text)?.[1]));
    const dupes = seqs.length - new Set(seqs).size;
    const missing = streamed - new Set(seqs).size;
    const recovery = recoveryOf(b);
    console.log(
      JSON.stringify({
        test: 'drained',
        messages: streamed,
        seconds: Math.round((Date.now() - started) / 100) / 10,
        ...killer,
        senderRetries: sender.retries,
        idempotentRepeats: sender.duplicates,
        firstSendErrors: sender.errors,
        drainErrors,
        ...recovery,
      }),
    );
    expect({ count: seqs.length, dupes, missing }).toEqual({ count: streamed, dupes: 0, missing: 0 });
    expect(seqs).toEqual(Array.from({ length: streamed }, (_, i) => i + 1));
    expect(received.every((m) => m.from.name === 'source' && m.from.host === a.hostId)).toBe(true);
    expect(killer.kills).toBe(kills);
    expect(await deliveriesOf(b)).toEqual({ acked: streamed });
    expect(await queueDepth(`agent.${target.gid}.inbox`)).toBe(0);
  });

  it(`${typed} messages A → worker in a tmux pane on B, B killed -9 ${kills} times: each typed once, in order`, async () => {
    const started = Date.now();
    const out = join(dir, 'pane.txt');
    const pane = await tmux.newPane(`cat >> ${out}`);
    const { a, b, source, target, address } = await setUp((b) =>
      register(b, ['--kind', 'worker', '--name', 'worker', '--tmux', pane, '--tmux-socket', tmux.socket]),
    );

    const progress = { sent: 0 };
    let lines: string[] = [];
    const typedLines = () => {
      try {
        lines = readFileSync(out, 'utf8')
          .split('\n')
          .filter((l) => l.length > 0);
      } catch {
        lines = [];
      }
      return lines;
    };
    const [sender, killer] = await Promise.all([
      send(a, source.token, address, typed, progress),
      kill(b, () => typedLines().length < typed, [500, 2_000], [1_000, 2_500]),
    ]);

    const deadline = Date.now() + 60_000;
    while (typedLines().length < typed && Date.now() < deadline) await sleep(100);
    await sleep(1_000); // anything extra (a duplicate) would be typed now
    typedLines();
    const seqs = lines.map((line) => Number(/\] seq-(\d+)$/.exec(line)?.[1]));
    const dupes = seqs.length - new Set(seqs).size;
    const missing = typed - new Set(seqs).size;
    const recovery = recoveryOf(b);
    console.log(
      JSON.stringify({
        test: 'typed',
        messages: typed,
        seconds: Math.round((Date.now() - started) / 100) / 10,
        ...killer,
        senderRetries: sender.retries,
        idempotentRepeats: sender.duplicates,
        firstSendErrors: sender.errors,
        ...recovery,
      }),
    );
    expect({ count: seqs.length, dupes, missing }).toEqual({ count: typed, dupes: 0, missing: 0 });
    expect(seqs).toEqual(Array.from({ length: typed }, (_, i) => i + 1));
    expect(lines.every((line) => line.startsWith(`[bridge SEND from source@${a.hostId} msg `))).toBe(true);
    expect(killer.kills).toBe(kills);
    expect(await deliveriesOf(b)).toEqual({ acked: typed });
    expect(await queueDepth(`agent.${target.gid}.inbox`)).toBe(0);
  });
});
