import { randomInt } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { type Entity, registerOn, type Stream, StreamRun, tmuxWorkerArgs } from '../support/chaosStreams.js';
import { brokerEnv, removeDeadLettersOf, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { startTmuxServer, type TmuxTestServer } from '../support/tmux.js';

/** Kill rounds; a nightly run sets e.g. CHAOS_ROUNDS=50. */
const rounds = Math.max(1, Math.floor(Number(process.env.CHAOS_ROUNDS ?? 3)) || 3);
/** The seed of every random choice the test makes; printed, and CHAOS_SEED replays it. */
const seed = process.env.CHAOS_SEED === undefined ? randomInt(2 ** 31) : Number(process.env.CHAOS_SEED) >>> 0;
/** Most messages a stream has confirmed and not yet seen delivered: bounds the final drain. */
const window = Number(process.env.CHAOS_WINDOW ?? 100);
/** Pause between two sends of one stream, leaving CPU for restarts on this 2-core machine. */
const paceMs = Number(process.env.CHAOS_PACE_MS ?? 5);

/** mulberry32: small, seedable, good enough to pick moments and victims. */
function seededRandom(state: number): () => number {
  let a = state >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

type GatewayName = 'A' | 'B' | 'C';
const gatewayNames: readonly GatewayName[] = ['A', 'B', 'C'];

interface Kill {
  round: number;
  victim: GatewayName;
  killedAt: number;
  restartAt: number;
  healthyMs: number;
  rosterMs: number;
  firstDeliveryMs: number;
}

/**
 * Issue 7: SIGKILL of sending and receiving gateways at random moments during multi-gateway
 * streams, many rounds. Three gateway daemons (A, B, C; separate OS processes federated
 * through the real broker) carry six streams at once:
 *
 *   sa@A → wc@C, sb@B → wc@C   a worker in a real tmux pane (`cat >> file`), cross-host
 *   sa@A → mb@B, sb@B → mc@C   mains that drain, cross-host
 *   sb@B → ma@A                a main that drains, cross-host
 *   sa@A → ma@A                the same-host pair (never touches the broker)
 *
 * Senders are mains driven over MCP, one call at a time per stream, each message under an
 * idempotency key and retried on every failure (tool error, timeout, connection lost; the MCP
 * client reconnected when its gateway died), as an agent would. Each round SIGKILLs one
 * gateway picked at random (sender side, receiver side or both) after a random delay, keeps
 * it down for a random outage and restarts it on the same home; the round ends when it is
 * healthy, every roster has converged again and a delivery through it has happened.
 *
 * At the end, with everything drained: every confirmed message (bridge_send returned its
 * msgId) arrived, under that msgId; first arrivals per stream are in send order (R-DL4); a
 * main saw a msgId again only when its gateway was killed between the two drains (docs/delivery.md "How
 * delivery works": the hand-over window); the pane shows a message twice only when C's
 * recovery looked for it after a kill and did not find it (R-DL5's `delivery.located` absent); no
 * dead letter of this test, and every one in `bridge.dlq` has a reason; every gateway's
 * deliveries ended `acked`. The randomness is seeded: the seed is printed, CHAOS_SEED replays
 * the same victims, delays and outages (the interleaving with the streams still varies).
 */
describe('SIGKILL of sending and receiving gateways at random moments, many rounds', () => {
  let tmux: TmuxTestServer | undefined;
  let dir: string;
  const gateways = new Map<GatewayName, GatewayProcess>();
  const queues: string[] = [];
  const gatewayOf = (name: GatewayName): GatewayProcess => gateways.get(name) as GatewayProcess;
  // The streams' loops run in the background: afterAll stops them too when the test fails.
  const run = new StreamRun<GatewayName>({
    mcpUrlOf: (name) => gatewayOf(name).mcpUrl,
    window,
    paceMs,
  });

  beforeAll(async () => {
    tmux = await startTmuxServer();
    dir = mkdtempSync(join(tmpdir(), 'bridge-killrounds-'));
  });

  afterAll(async () => {
    await run.close();
    for (const gateway of gateways.values()) await gateway.dispose().catch(() => {});
    await tmux?.kill().catch(() => {});
    await deleteQueues(queues).catch(() => {});
    await removeDeadLettersOf([...gateways.values()].map((g) => g.hostId)).catch(() => {});
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it(`${rounds} rounds of SIGKILL on A, B or C during six streams: nothing confirmed lost, no duplicate outside the documented windows, FIFO per stream`, {
    timeout: Math.max(300_000, rounds * 25_000 + 120_000),
  }, async () => {
    const testStarted = Date.now();
    const random = seededRandom(seed);
    const between = (min: number, max: number) => min + random() * (max - min);
    // The whole kill schedule comes from the seed before anything runs.
    const schedule = Array.from({ length: rounds }, (_, i) => ({
      round: i + 1,
      victim: gatewayNames[Math.floor(random() * gatewayNames.length)] as GatewayName,
      delayMs: Math.round(between(300, 2_000)),
      outageMs: Math.round(between(50, 800)),
    }));
    console.log(JSON.stringify({ test: 'killRounds', seed, rounds, schedule }));

    // --- three gateways, six entities ---------------------------------------------------
    for (const name of gatewayNames) {
      const gateway = new GatewayProcess({
        hostId: uniqueHostId(`kr${name.toLowerCase()}`),
        env: { ...brokerEnv },
        config: {
          // Remote roster entries outlive a peer's restart (30 beats), so a send to a host that
          // is down is still addressed by name and waits in the broker's durable inbox.
          broker: { heartbeatMs: 1_000, presenceTtlBeats: 30, retryBaseMs: 200, retryMaxMs: 1_000 },
          limits: { maxDrain: 500 },
          // WAL: a commit survives the death of the process under NORMAL as under FULL (only
          // power loss tells them apart), at half the cost of a send on this machine.
          store: { synchronous: process.env.CHAOS_SYNC ?? 'NORMAL' },
        },
      });
      gateways.set(name, gateway);
      queues.push(`control.${gateway.hostId}`);
    }
    await Promise.all(gatewayNames.map((name) => gatewayOf(name).start()));

    const out = join(dir, 'pane.txt');
    const pane = await (tmux as TmuxTestServer).newPane(`cat >> ${out}`);
    const register = async (on: GatewayName, args: string[]): Promise<Entity<GatewayName>> => {
      const registered = await registerOn(gatewayOf(on), on, args);
      queues.push(`agent.${registered.gid}.inbox`);
      return registered;
    };
    const main = (on: GatewayName, name: string) => register(on, ['--kind', 'main', '--name', name]);
    const [sa, ma, sb, mb, wc, mc] = await Promise.all([
      main('A', 'sa'),
      main('A', 'ma'),
      main('B', 'sb'),
      main('B', 'mb'),
      register('C', tmuxWorkerArgs('wc', pane, (tmux as TmuxTestServer).socket)),
      main('C', 'mc'),
    ]);
    const entities = [sa, ma, sb, mb, wc, mc];
    const drainers = [ma, mb, mc];
    const rosterProbes: Record<GatewayName, Entity<GatewayName>> = { A: ma, B: mb, C: mc };

    /** Every gateway's roster lists all six entities, none `unknown`. */
    const rosterConverged = () =>
      run.rostersConverged(
        rosterProbes,
        entities.map((e) => e.gid),
      );
    await waitFor('every roster listing all six entities', async () =>
      (await rosterConverged()) ? true : undefined,
    );

    const stream = (id: string, sender: Entity<GatewayName>, recipient: Entity<GatewayName>) =>
      run.stream(id, sender, recipient);
    const streams = [
      stream('A>wc', sa, wc),
      stream('B>wc', sb, wc),
      stream('A>mb', sa, mb),
      stream('B>mc', sb, mc),
      stream('B>ma', sb, ma),
      stream('A>ma', sa, ma),
    ];
    const { arrivals } = run;

    // --- receivers: the pane on C, three mains draining; the senders ----------------------
    run.startReceiving([{ worker: wc, file: out }], drainers);
    run.startSending();

    // --- the kill rounds --------------------------------------------------------------
    /** A delivery through `victim` after `since`: to an entity on it, or sent by one after `since`. */
    const deliveredThrough = (victim: GatewayName, since: number): number | undefined => {
      for (let i = arrivals.length - 1; i >= 0; i--) {
        const { stream: s, arrival } = arrivals[i] as (typeof arrivals)[number];
        if (arrival.at <= since) break;
        if (s.recipient.on === victim) return arrival.at;
        if (s.sender.on === victim && (s.confirmedAt[arrival.seq - 1] ?? 0) > since) return arrival.at;
      }
      return undefined;
    };
    const kills: Kill[] = [];
    await sleep(500); // the streams get going
    for (const { round, victim, delayMs, outageMs } of schedule) {
      await sleep(delayMs);
      const gateway = gatewayOf(victim);
      const killedAt = Date.now();
      await gateway.kill9();
      await sleep(outageMs);
      const restartAt = Date.now();
      await gateway.start(); // throws when it is not healthy within 20 s
      const healthyAt = Date.now();
      await waitFor(
        `round ${round}: every roster converged after ${victim}'s restart (seed ${seed})`,
        async () => ((await rosterConverged()) ? true : undefined),
        20_000,
      );
      const rosterAt = Date.now();
      const firstAt = await waitFor(
        `round ${round}: a delivery through ${victim} after its restart (seed ${seed})`,
        () => deliveredThrough(victim, restartAt),
        20_000,
      );
      kills.push({
        round,
        victim,
        killedAt,
        restartAt,
        healthyMs: healthyAt - restartAt,
        rosterMs: rosterAt - restartAt,
        firstDeliveryMs: firstAt - restartAt,
      });
      console.log(
        JSON.stringify({
          round,
          victim,
          killedAt: new Date(killedAt).toISOString(),
          outageMs,
          healthyMs: healthyAt - restartAt,
          rosterMs: rosterAt - restartAt,
          firstDeliveryMs: firstAt - restartAt,
          confirmed: streams.reduce((n, s) => n + s.confirmed.length, 0),
          delivered: streams.reduce((n, s) => n + s.firstSeen.size, 0),
        }),
      );
    }

    // --- stop sending, drain everything -------------------------------------------------
    await run.stopSending(30_000);
    await run.drainAll();

    // Deliveries end `acked` once the last hand-over's answer is out: give them a moment.
    type StatusView = {
      deliveries: Record<string, number>;
      deadLetters: Record<string, number>;
      broker: { inboxes: Record<string, number | undefined> } | null;
    };
    const statusOf = async (name: GatewayName): Promise<StatusView> => {
      return (await gatewayOf(name).status()) as StatusView;
    };
    let statuses: Record<GatewayName, StatusView> = {} as Record<GatewayName, StatusView>;
    const settled = Date.now() + 10_000;
    for (;;) {
      statuses = Object.fromEntries(
        await Promise.all(gatewayNames.map(async (name) => [name, await statusOf(name)] as const)),
      ) as Record<GatewayName, StatusView>;
      const open = gatewayNames.some((name) =>
        Object.keys(statuses[name].deliveries).some((state) => state !== 'acked'),
      );
      if (!open || Date.now() > settled) break;
      await sleep(500);
    }
    const healthyAtEnd = await Promise.all(gatewayNames.map((name) => gatewayOf(name).healthy()));
    const rosterAtEnd = await rosterConverged();

    // --- what happened ----------------------------------------------------------------
    const hostOf = (name: GatewayName) => gatewayOf(name).hostId;
    const ourHosts = gatewayNames.map(hostOf);
    const ourGids = new Set(entities.map((e) => e.gid));
    const ourMsgIds = new Set(streams.flatMap((s) => s.confirmed));
    const dlq = await gatewayOf('A').cli(['dlq', 'list', '--json', '--max', '10000']);
    expect(dlq.code, dlq.stderr || dlq.stdout).toBe(0);
    const letters = JSON.parse(dlq.stdout) as Array<{
      msgId?: string;
      reason?: string;
      routingKey?: string;
      host?: string;
    }>;
    const withoutReason = letters.filter((l) => typeof l.reason !== 'string' || l.reason.length === 0);
    const ourLetters = letters.filter(
      (l) =>
        (l.host !== undefined && ourHosts.includes(l.host)) ||
        (l.routingKey !== undefined && ourGids.has(l.routingKey)) ||
        (l.msgId !== undefined && ourMsgIds.has(l.msgId)),
    );

    /** Per msgId: R-DL5 recoveries on the gateway that owns the delivery. */
    const recoveryEvents = (name: GatewayName) => {
      const db = new Database(join(gatewayOf(name).home, 'events.db'), { readonly: true });
      try {
        const rows = db
          .prepare(
            "SELECT msg_id AS msgId, json_extract(data, '$.where') AS found, count(*) AS n FROM event_log WHERE event = 'delivery.located' GROUP BY msg_id, found",
          )
          .all() as Array<{ msgId: string; found: string; n: number }>;
        const absent = new Map<string, number>();
        let found = 0;
        let absentTotal = 0;
        for (const row of rows) {
          if (row.found === 'absent') {
            absent.set(row.msgId, row.n);
            absentTotal += row.n;
          } else found += row.n;
        }
        return { absent, found, absentTotal };
      } finally {
        db.close();
      }
    };
    const recoveries = Object.fromEntries(gatewayNames.map((name) => [name, recoveryEvents(name)])) as Record<
      GatewayName,
      ReturnType<typeof recoveryEvents>
    >;
    const killsOf = (name: GatewayName) => kills.filter((k) => k.victim === name);

    let paneRepeats = 0;
    let handoverRepeats = 0;
    const { lost, wrongMsgId, outOfOrder, unexplainedRepeats } = run.findings((s, first, again) => {
      if (s.recipient.kind === 'worker') {
        // R-DL5: typed again only when recovery did not find it in the pane after a kill.
        const explained = Math.min(again.length, recoveries[s.recipient.on].absent.get(first.msgId) ?? 0);
        paneRepeats += explained;
        return explained;
      }
      // The hand-over window: the main's gateway died between handing it over and recording the
      // ack, so the next drain offers it again under the same msgId.
      const from = first.drain?.startedAt ?? first.at;
      const explained = again.filter((repeat) => {
        const to = repeat.drain?.startedAt ?? repeat.at;
        return killsOf(s.recipient.on).some((k) => k.killedAt >= from && k.killedAt <= to);
      }).length;
      handoverRepeats += explained;
      return explained;
    });

    const confirmedCount = streams.reduce((n, s) => n + s.confirmed.length, 0);
    const deliveredCount = streams.reduce((n, s) => n + s.firstSeen.size, 0);
    const summary = {
      test: 'killRounds',
      seed,
      rounds,
      seconds: Math.round((Date.now() - testStarted) / 100) / 10,
      killsPerGateway: Object.fromEntries(gatewayNames.map((name) => [name, killsOf(name).length])),
      messages: {
        sendCalls: streams.reduce((n, s) => n + s.calls, 0),
        confirmed: confirmedCount,
        delivered: deliveredCount,
        lost: lost.length,
        unconfirmed: streams.filter((s) => s.unconfirmed !== undefined).length,
        idempotentRepeats: streams.reduce((n, s) => n + s.idempotentRepeats, 0),
      },
      duplicates: {
        paneCrashWindow: paneRepeats,
        handover: handoverRepeats,
        unexplained: unexplainedRepeats.length,
        differentMsgId: wrongMsgId.length,
      },
      outOfOrder: outOfOrder.length,
      recovery: {
        maxHealthyMs: Math.max(0, ...kills.map((k) => k.healthyMs)),
        maxRosterMs: Math.max(0, ...kills.map((k) => k.rosterMs)),
        maxFirstDeliveryMs: Math.max(0, ...kills.map((k) => k.firstDeliveryMs)),
        paneFoundAbsent: Object.fromEntries(
          gatewayNames.map((name) => [
            name,
            { found: recoveries[name].found, absent: recoveries[name].absentTotal },
          ]),
        ),
      },
      streams: run.summary(),
      drainErrors: run.drainErrors,
      connectionsLost: run.connectionsLost,
      foreign: run.foreign,
      deadLetters: { inQueue: letters.length, withoutReason: withoutReason.length, ours: ourLetters.length },
      deliveries: Object.fromEntries(gatewayNames.map((name) => [name, statuses[name].deliveries])),
    };
    console.log(JSON.stringify(summary));

    const violations =
      lost.length +
      wrongMsgId.length +
      outOfOrder.length +
      unexplainedRepeats.length +
      withoutReason.length +
      ourLetters.length;
    if (violations > 0) {
      // Evidence for a bug report: the offending messages, the kills, and a copy of every
      // gateway's event log and output, which afterAll would otherwise delete.
      const keep = join(tmpdir(), `bridge-killrounds-seed-${seed}-${Date.now()}`);
      mkdirSync(keep, { recursive: true });
      for (const name of gatewayNames) {
        const gateway = gatewayOf(name);
        for (const file of ['events.db', 'events.db-wal', 'events.db-shm']) {
          const from = join(gateway.home, file);
          if (existsSync(from)) copyFileSync(from, join(keep, `${name}-${gateway.hostId}-${file}`));
        }
        writeFileSync(join(keep, `${name}-${gateway.hostId}.log`), gateway.log);
      }
      copyFileSync(out, join(keep, 'pane.txt'));
      const eventsOf = (name: GatewayName, msgId: string) => {
        const db = new Database(join(gatewayOf(name).home, 'events.db'), { readonly: true });
        try {
          return db
            .prepare(
              'SELECT seq, hlc, actor_kind AS kind, event, from_state AS "from", to_state AS "to", data FROM event_log WHERE msg_id = ? ORDER BY hlc',
            )
            .all(msgId)
            .map((row) => {
              const e = row as { hlc: string };
              return { ...e, at: new Date(Number(e.hlc.slice(0, 15))).toISOString() };
            });
        } finally {
          db.close();
        }
      };
      const evidence = [...lost, ...unexplainedRepeats].slice(0, 10).map((v) => {
        const s = run.byStream(v.stream) as Stream<GatewayName>;
        const msgId = v.msgId as string;
        return {
          ...v,
          sender: { on: s.sender.on, events: eventsOf(s.sender.on, msgId) },
          recipient:
            s.sender.on === s.recipient.on
              ? undefined
              : { on: s.recipient.on, events: eventsOf(s.recipient.on, msgId) },
        };
      });
      console.log(
        JSON.stringify(
          {
            seed,
            kept: keep,
            hosts: Object.fromEntries(gatewayNames.map((name) => [name, hostOf(name)])),
            kills: kills.map((k) => ({
              ...k,
              killedAt: new Date(k.killedAt).toISOString(),
              restartAt: new Date(k.restartAt).toISOString(),
            })),
            lost: lost.slice(0, 20),
            wrongMsgId: wrongMsgId.slice(0, 20),
            outOfOrder: outOfOrder.slice(0, 20),
            unexplainedRepeats: unexplainedRepeats.slice(0, 20),
            lettersWithoutReason: withoutReason.slice(0, 5),
            ourLetters: ourLetters.slice(0, 5),
            evidence,
          },
          null,
          1,
        ),
      );
    }

    const context = `seed ${seed} (CHAOS_SEED=${seed} replays the schedule)`;
    expect(kills.length, context).toBe(rounds);
    expect(lost, `confirmed and never delivered; ${context}`).toEqual([]);
    expect(wrongMsgId, `delivered under another msgId than bridge_send returned; ${context}`).toEqual([]);
    expect(outOfOrder, `first arrivals out of send order (R-DL4); ${context}`).toEqual([]);
    expect(unexplainedRepeats, `repeats outside the documented windows; ${context}`).toEqual([]);
    expect(withoutReason, `dead letters without a reason; ${context}`).toEqual([]);
    expect(ourLetters, `dead letters of this test; ${context}`).toEqual([]);
    expect(
      streams.filter((s) => s.unconfirmed !== undefined).map((s) => s.id),
      context,
    ).toEqual([]);
    for (const name of gatewayNames) {
      // One delivery actor per message to an entity on this gateway, each ended `acked`.
      const expected = streams
        .filter((s) => s.recipient.on === name)
        .reduce((n, s) => n + s.firstSeen.size, 0);
      const deliveries = statuses[name].deliveries;
      if (run.foreign === 0)
        expect(deliveries, `${name}'s deliveries at the end; ${context}`).toEqual({ acked: expected });
      else expect(Object.keys(deliveries), `${name}'s deliveries at the end; ${context}`).toEqual(['acked']);
      expect(statuses[name].deadLetters, `${name}'s dead letters; ${context}`).toEqual({});
      expect(statuses[name].broker?.inboxes, `${name}'s inboxes left in the broker; ${context}`).toEqual(
        Object.fromEntries(entities.filter((e) => e.on === name).map((e) => [e.name, 0])),
      );
    }
    expect(healthyAtEnd, context).toEqual([true, true, true]);
    expect(rosterAtEnd, `rosters converged at the end; ${context}`).toBe(true);
    // The streams really ran through the rounds.
    for (const s of streams) expect(s.confirmed.length, `${s.id}; ${context}`).toBeGreaterThan(rounds);
  });
});
