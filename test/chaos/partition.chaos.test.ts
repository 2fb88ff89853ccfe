import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { brokerEnv, removeDeadLettersOf, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';
import { NetNamespace, type TcpForwarder } from '../support/netns.js';

/**
 * AMQP heartbeat (seconds) the gateways ask of the broker (`broker.heartbeatSeconds`; the
 * default is 5): a silent partition is noticed after about two missed beats. 1 s keeps the test
 * short; PARTITION_AMQP_HEARTBEAT=5 runs it with the default.
 */
const amqpHeartbeatS = Number(process.env.PARTITION_AMQP_HEARTBEAT ?? '1');
/** How long the link stays cut once B has noticed: remote sends keep failing fast meanwhile. */
const holdCutMs = 2_000;
/** The gap between two sends of one loop (an agent's pace, not a benchmark). */
const paceMs = 30;

interface Entity {
  gid: string;
  token: string;
  name: string;
}
interface Message {
  msgId: string;
  text: string;
}
type Phase = 'before' | 'cut' | 'after';

/** One sender→recipient stream: every message is retried under its key until it is confirmed. */
interface Stream {
  sent: number;
  confirmed: string[];
  /** Sends confirmed, by the phase their (last) attempt started in. */
  confirmedIn: Record<Phase, number>;
  /** Attempts that failed, and how. */
  failures: number;
  errors: Set<string>;
  /** Failures of attempts started after B noticed the partition (and before it was back). */
  failedFast: number;
  fastFailureMs: number[];
  /** Attempts started before B noticed that failed once it did (their confirm never came). */
  failedBlind: number;
  slowestBlindFailureMs: number;
  /** Failures after B was connected again (there should be none). */
  failedAfterRecovery: number;
  delivered: string[];
}

const newStream = (): Stream => ({
  sent: 0,
  confirmed: [],
  confirmedIn: { before: 0, cut: 0, after: 0 },
  failures: 0,
  errors: new Set(),
  failedFast: 0,
  fastFailureMs: [],
  failedBlind: 0,
  slowestBlindFailureMs: 0,
  failedAfterRecovery: 0,
  delivered: [],
});

/**
 * A network partition between one host and the broker, under traffic. Gateway A runs in the
 * root namespace; gateway B runs in a network namespace of its own and reaches the broker
 * (which listens on 127.0.0.1 only) over a veth link through a TCP forwarder in this process.
 * The link is cut silently (no RST, no error: packets just stop) while A's main streams to
 * B's main, B's main streams to A's main and to a main on its own host; then it comes back.
 *
 * What is asserted: same-host traffic on B never stops (R-H5); B notices the dead link through
 * AMQP heartbeats and its remote sends then fail fast with BROKER_UNAVAILABLE (sends begun in
 * the blind window before it noticed fail the same way once it does); A's sends to B never
 * fail (A's own link is fine, so the broker confirms them into B's durable inbox) and wait
 * there; both gateways recover by themselves; and every confirmed message, retried under its
 * idempotency key as an agent would, is drained exactly once and in send order.
 */
describe('network partition between a host and the broker', () => {
  const suffix = Math.random().toString(36).slice(2, 7);
  let ns: NetNamespace | undefined;
  let forwarder: TcpForwarder | undefined;
  const gateways: GatewayProcess[] = [];
  const clients: Client[] = [];
  const queues: string[] = [];
  let alpha: GatewayProcess;
  let beta: GatewayProcess;
  const entity: Record<'mainA' | 'mainB' | 'nearB', Entity> = {} as never;

  const config = {
    broker: { heartbeatMs: 300, heartbeatSeconds: amqpHeartbeatS, retryBaseMs: 200, retryMaxMs: 1_000 },
  };

  const register = async (g: GatewayProcess, name: string): Promise<Entity> => {
    const r = await g.cli(['register', '--kind', 'main', '--name', name, '--json']);
    expect(r.code, r.stderr || r.stdout).toBe(0);
    const e = JSON.parse(r.stdout) as Entity;
    queues.push(`agent.${e.gid}.inbox`);
    return e;
  };
  const status = async (g: GatewayProcess) => {
    return (await g.status()) as { broker: { state: string } };
  };
  const roster = async (g: GatewayProcess) =>
    (await g.roster()) as Array<{
      gid: string;
      status: string;
      host: string;
    }>;
  /** B's broker link as its metrics say (HTTP, fast enough to time the recovery finely). */
  const betaConnected = async (): Promise<boolean> => {
    const res = await fetch(`http://${beta.mcpHost}:${beta.port}/metrics`);
    return /^bridge_broker_connected 1$/m.test(await res.text());
  };

  beforeAll(async () => {
    ns = await NetNamespace.create();
    forwarder = await ns.forward(5672);
    alpha = new GatewayProcess({
      hostId: uniqueHostId(`part-a-${suffix}`),
      env: { ...brokerEnv },
      config,
    });
    beta = new GatewayProcess({
      hostId: uniqueHostId(`part-b-${suffix}`),
      wrap: ns.wrap,
      mcpHost: ns.lan.nsAddr,
      env: {
        BRIDGE_BROKER_URI: `amqp://guest:guest@${ns.wan.hostAddr}:5672`,
      },
      config,
    });
    gateways.push(alpha, beta);
    queues.push(`control.${alpha.hostId}`, `control.${beta.hostId}`);
    await Promise.all([alpha.start(), beta.start()]);
    entity.mainA = await register(alpha, 'main-a');
    entity.mainB = await register(beta, 'main-b');
    entity.nearB = await register(beta, 'near-b');
    await waitFor('each host in the other’s roster', async () => {
      const [a, b] = await Promise.all([roster(alpha), roster(beta)]);
      return a.some((e) => e.gid === entity.mainB.gid) && b.some((e) => e.gid === entity.mainA.gid)
        ? true
        : undefined;
    });
  });

  afterAll(async () => {
    await ns?.restore().catch(() => {});
    for (const c of clients) await c.close().catch(() => {});
    for (const g of gateways) await g.dispose().catch(() => {});
    await ns?.destroy();
    await deleteQueues(queues).catch(() => {});
    await removeDeadLettersOf(gateways.map((g) => g.hostId)).catch(() => {});
  });

  it('keeps B’s local traffic flowing, fails its remote sends fast, and recovers without loss, duplicates or reordering', async () => {
    const netns = ns as NetNamespace;
    const connect = async (g: GatewayProcess, e: Entity) => {
      const c = await connectMcp(g.mcpUrl, e.token);
      clients.push(c);
      return c;
    };
    // Senders and recipients each have their own session, as separate agent turns would.
    const sendA = await connect(alpha, entity.mainA);
    const sendB = await connect(beta, entity.mainB);
    const drainA = await connect(alpha, entity.mainA);
    const drainB = await connect(beta, entity.mainB);
    const drainNear = await connect(beta, entity.nearB);

    let phase: Phase = 'before';
    let noticed = false; // B's broker state has left `connected`
    let back = false; // and is `connected` again
    let stopping = false;
    /** Set when the test fails midway: the loops end instead of retrying forever. */
    let halted = false;
    const loopErrors: unknown[] = [];
    const ab = newStream(); // main-a (A) → main-b (B), across the link
    const ba = newStream(); // main-b (B) → main-a (A), across the link
    const local = newStream(); // main-b → near-b, both on B: never touches the broker
    let localDuringCut = 0;
    const at: Partial<Record<'cut' | 'noticed' | 'linkUp' | 'connected', number>> = {};
    // Messages that crossed the restored link: A→B ones confirmed during the cut (they waited
    // in B's inbox), B→A ones sent after the link came back.
    const crossing = { ab: new Set<string>(), ba: new Set<string>() };
    const firstAcross = { ab: 0, ba: 0 };

    /** Streams `prefix-1, prefix-2, …` until told to stop; each send retried until confirmed. */
    const stream = (client: Client, to: string, prefix: string, s: Stream, crossed?: Set<string>) =>
      (async () => {
        for (let i = 1; (!stopping || i <= 20) && !halted; i++) {
          const text = `${prefix}-${i}`;
          s.sent = i;
          while (!halted) {
            const started = Date.now();
            const startedIn = phase;
            const blind = !noticed; // B does not know yet: its publish waits for a confirm
            const beforeBack = !back;
            const r = await callTool(client, 'bridge_send', { to, text, idempotency_key: text });
            if (!r.isError) {
              s.confirmed.push(text);
              s.confirmedIn[startedIn]++;
              if (s === local && phase === 'cut') localDuringCut++;
              if ((s === ab && startedIn === 'cut') || (s === ba && startedIn === 'after'))
                crossed?.add(text);
              break;
            }
            const took = Date.now() - started;
            const body = (r.content as Array<{ text: string }>)[0]?.text ?? '';
            s.failures++;
            s.errors.add(body.split(':')[0] as string);
            if (blind) {
              s.failedBlind++;
              s.slowestBlindFailureMs = Math.max(s.slowestBlindFailureMs, took);
            } else if (beforeBack) {
              s.failedFast++;
              s.fastFailureMs.push(took);
            } else s.failedAfterRecovery++;
            await sleep(100);
          }
          await sleep(paceMs);
        }
      })();

    /** Drains a recipient every 100 ms, as a main would. */
    let draining = true;
    const drainer = (client: Client, s: Stream, direction?: 'ab' | 'ba') =>
      (async () => {
        while (draining && !halted) {
          const r = await callTool(client, 'bridge_drain', { max: 100 });
          const texts = (r.structuredContent as { messages: Message[] }).messages.map((m) => m.text);
          s.delivered.push(...texts);
          if (direction && at.linkUp && !firstAcross[direction]) {
            if (texts.some((t) => crossing[direction].has(t))) firstAcross[direction] = Date.now();
          }
          await sleep(100);
        }
      })();

    // A loop that throws (an MCP transport error, say) stops the others and fails the test.
    const guard = (loop: Promise<void>) =>
      loop.catch((err: unknown) => {
        loopErrors.push(err);
        halted = true;
      });
    const loops = [
      stream(sendA, entity.mainB.gid, 'ab', ab, crossing.ab),
      stream(sendB, entity.mainA.gid, 'ba', ba, crossing.ba),
      stream(sendB, entity.nearB.gid, 'local', local),
    ].map(guard);
    const drainers = [drainer(drainB, ab, 'ab'), drainer(drainA, ba, 'ba'), drainer(drainNear, local)].map(
      guard,
    );
    /** waitFor, failing at once with a loop's error if one broke. */
    const until = <T>(what: string, probe: () => Promise<T | undefined> | T | undefined, ms?: number) =>
      waitFor(
        what,
        async () => {
          if (loopErrors.length > 0) throw loopErrors[0];
          return probe();
        },
        ms,
      );

    const duringCut = { betaState: '', alphaDroppedB: false, betaSeesAUnknown: false };
    try {
      await until('traffic in every stream', () =>
        [ab, ba, local].every((s) => s.confirmed.length >= 10) ? true : undefined,
      );
      try {
        phase = 'cut';
        await netns.cut();
        at.cut = Date.now();
        // B notices only when its AMQP heartbeats go unanswered: two to three intervals.
        await until(
          'B to notice the partition (its AMQP heartbeat timing out)',
          async () => ((await betaConnected()) ? undefined : true),
          5_000 + 4_000 * amqpHeartbeatS,
        );
        noticed = true;
        at.noticed = Date.now();
        const [betaStatus, a, b] = await Promise.all([
          status(beta),
          roster(alpha),
          roster(beta),
          sleep(holdCutMs), // the cut lasts: B's remote sends fail fast, its local ones flow
        ]);
        duringCut.betaState = betaStatus.broker.state;
        // A keeps hearing the broker, so B's silent presence expires there (soft state) ...
        duringCut.alphaDroppedB = !a.some((e) => e.gid === entity.mainB.gid);
        // ... while B, which hears nothing, keeps A's entries and reads them as unknown (R-H5).
        duringCut.betaSeesAUnknown = b.find((e) => e.gid === entity.mainA.gid)?.status === 'unknown';
      } finally {
        await netns.restore();
        at.linkUp = Date.now();
        phase = 'after';
      }
      await until('B connected again', async () => ((await betaConnected()) ? true : undefined), 45_000);
      back = true;
      at.connected = Date.now();
      await until(
        'both gateways report connected',
        async () => {
          const states = await Promise.all([alpha, beta].map(async (g) => (await status(g)).broker.state));
          return states.every((s) => s === 'connected') ? true : undefined;
        },
        15_000,
      );
      await until(
        'each host’s main back in the other’s roster, live',
        async () => {
          const [a, b] = await Promise.all([roster(alpha), roster(beta)]);
          const live = (r: typeof a, gid: string) => r.some((e) => e.gid === gid && e.status !== 'unknown');
          return live(a, entity.mainB.gid) && live(b, entity.mainA.gid) ? true : undefined;
        },
        15_000,
      );
      await until('traffic across the restored link, both ways', () =>
        firstAcross.ab && firstAcross.ba ? true : undefined,
      );
      stopping = true;
      await Promise.all(loops);
      expect(loopErrors).toEqual([]);

      // Everything confirmed arrives: drain until each recipient has it all, then a little longer
      // (a duplicate would come after).
      await until(
        'every confirmed message drained',
        () => ([ab, ba, local].every((s) => s.delivered.length >= s.confirmed.length) ? true : undefined),
        30_000,
      );
      await sleep(1_000);
      draining = false;
      await Promise.all(drainers);
      expect(loopErrors).toEqual([]);
    } finally {
      // On a failure midway, stop the loops (they would retry forever) before the clients close.
      halted = halted || draining;
      draining = false;
      await Promise.all([...loops, ...drainers]);
    }

    // Dead letters of this test's hosts (the DLQ is shared): each has a reason.
    const dlq = await alpha.cli(['dlq', 'list', '--json', '--max', '10000']);
    expect(dlq.code, dlq.stderr || dlq.stdout).toBe(0);
    const ours = (
      JSON.parse(dlq.stdout) as Array<{ reason: string; host: string; routingKey: string }>
    ).filter(
      (l) =>
        gateways.some((g) => g.hostId === l.host) ||
        Object.values(entity).some((e) => e.gid === l.routingKey),
    );

    const figures = (s: Stream) => {
      const delivered = new Set(s.delivered);
      return {
        sent: s.sent,
        confirmed: s.confirmed.length,
        confirmedByPhase: s.confirmedIn,
        delivered: s.delivered.length,
        lost: s.confirmed.filter((t) => !delivered.has(t)).length,
        duplicates: s.delivered.length - delivered.size,
        inOrder: JSON.stringify(s.delivered) === JSON.stringify(s.confirmed),
        failures: s.failures,
        failedFast: s.failedFast,
        medianFastFailureMs: [...s.fastFailureMs].sort((x, y) => x - y)[s.fastFailureMs.length >> 1] ?? null,
        slowestFastFailureMs: Math.max(0, ...s.fastFailureMs),
        failedBlind: s.failedBlind,
        slowestBlindFailureMs: s.slowestBlindFailureMs,
        failedAfterRecovery: s.failedAfterRecovery,
        errors: [...s.errors],
      };
    };
    const since = (from: number | undefined, to: number | undefined) =>
      from === undefined || !to ? null : to - from;
    const summary = {
      amqpHeartbeatS,
      aToB: figures(ab),
      bToA: figures(ba),
      localOnB: { ...figures(local), duringCut: localDuringCut },
      duringCut,
      cutToNoticedMs: since(at.cut, at.noticed),
      cutMs: since(at.cut, at.linkUp),
      recovery: {
        linkUpToConnectedMs: since(at.linkUp, at.connected),
        linkUpToFirstAcrossMs: {
          aToB: since(at.linkUp, firstAcross.ab),
          bToA: since(at.linkUp, firstAcross.ba),
        },
      },
      deadLetters: ours.length,
      brokerConnectionsForwarded: forwarder?.accepted,
    };
    console.log(`PARTITION_SUMMARY ${JSON.stringify(summary)}`);

    // Nothing confirmed lost, nothing twice, per-recipient order: the drains equal the sends.
    for (const s of [ab, ba, local]) expect(s.delivered).toEqual(s.confirmed);
    // Same-host traffic on B never stopped nor failed (R-H5).
    expect(localDuringCut).toBeGreaterThan(0);
    expect(local.failures).toBe(0);
    // A's own link was fine: its sends to B were confirmed throughout, into B's durable inbox.
    expect(ab.failures).toBe(0);
    expect(ab.confirmedIn.cut).toBeGreaterThan(0);
    // B's remote sends failed only with BROKER_UNAVAILABLE: at once while B knew the link was
    // down; those begun before it knew, once the heartbeat declared the link dead.
    expect([...ba.errors]).toEqual(['BROKER_UNAVAILABLE']);
    expect(ba.failedFast).toBeGreaterThan(0);
    expect(Math.max(...ba.fastFailureMs)).toBeLessThan(2_000); // a log write, not a broker wait
    expect(ba.slowestBlindFailureMs).toBeLessThan(4_000 * amqpHeartbeatS + 2_000);
    expect(ba.failedAfterRecovery).toBe(0);
    expect(duringCut.betaState).not.toBe('connected');
    expect(duringCut.betaSeesAUnknown).toBe(true);
    expect(duringCut.alphaDroppedB).toBe(true);
    // Every dead letter of this test's hosts (if any) says why.
    expect(ours.filter((l) => !l.reason)).toEqual([]);
  });
});
