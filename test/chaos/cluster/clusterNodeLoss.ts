import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import amqp from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlLockName } from '../../../src/federation/topology.js';
import { adminRoutes } from '../../../src/interfaces/adminProtocol.js';
import { uniqueHostId } from '../../support/broker.js';
import {
  type Entity,
  errorCounts,
  registerOn,
  type Stream,
  StreamRun,
  tmuxWorkerArgs,
} from '../../support/chaosStreams.js';
import type { TestCluster } from '../../support/cluster.js';
import { waitFor } from '../../support/federation.js';
import { GatewayProcess } from '../../support/GatewayProcess.js';
import { callTool, connectMcp } from '../../support/mcpClient.js';
import { startTmuxServer, type TmuxTestServer } from '../../support/tmux.js';

type GatewayName = 'A' | 'B' | 'C';
const gatewayNames: readonly GatewayName[] = ['A', 'B', 'C'];
/** The test's broker.confirmTimeoutMs: how long a send waits for a confirm the cluster holds. */
const confirmTimeoutMs = 2_000;

interface StatusView {
  broker: { state: string; node: string | null; unconfirmed: string[] } | null;
  deliveries: Record<string, number>;
  deadLetters: Record<string, number>;
}

/** A gateway's "broker connected" log line: when, and to which node. */
interface Connected {
  at: number;
  node: string;
}

const redacted = (uri: string) => uri.replace(/:guest@/, ':***@');

/**
 * Issue 15's node loss under load: three gateway daemons (A, B, C; separate OS processes) on a
 * real 3-node RabbitMQ cluster (tools/cluster.mjs) with quorum inboxes, under steady streams:
 *
 *   sa@A → wc@C, sb@B → wc@C   a worker in a real tmux pane, cross-host
 *   sb@B → mc@C                a main that drains, cross-host
 *   sc@C → mc@C, sa@A → ma@A   same-host pairs, on the receiving gateway and on a sender's
 *
 * Then kill -9 of the node C is connected to (C moves to another node and delivers again),
 * later of the node it moved to (the cluster has lost its majority: the last node takes
 * connections and holds every quorum-queue message unconfirmed, so cross-host sends must fail
 * fast with BROKER_UNAVAILABLE while same-host traffic flows), then both nodes come back.
 * Nothing confirmed is lost, nothing arrives twice (a node's loss is not a gateway's: no
 * hand-over window applies), first arrivals per stream keep send order, recovery needs no
 * action; a second gateway started on a copy of C's home is refused before, during and after.
 * The summary line (CLUSTER_LOSS_SUMMARY) gives the figures.
 */
export function clusterNodeLossSuite(sharedCluster: () => TestCluster): void {
  describe('broker nodes killed under a steady cross-host stream, quorum inboxes', () => {
    let cluster: TestCluster | undefined;
    let tmux: TmuxTestServer | undefined;
    let dir: string;
    const gateways = new Map<GatewayName, GatewayProcess>();
    const extra: GatewayProcess[] = [];
    const gatewayOf = (name: GatewayName): GatewayProcess => gateways.get(name) as GatewayProcess;
    const run = new StreamRun<GatewayName>({
      mcpUrlOf: (name) => gatewayOf(name).mcpUrl,
      window: 50,
      paceMs: 20,
      // While the cluster has no majority every cross-host send fails: no need to hammer it.
      retryPauseMs: (code) => (code === 'BROKER_UNAVAILABLE' ? 200 : 50),
    });
    const figures: Record<string, unknown> = {};

    beforeAll(async () => {
      cluster = sharedCluster();
      tmux = await startTmuxServer();
      dir = mkdtempSync(join(tmpdir(), 'bridge-nodeloss-'));
    }, 180_000);

    afterAll(async () => {
      await run.close();
      for (const gateway of [...extra, ...gateways.values()]) await gateway.dispose().catch(() => {});
      await tmux?.kill().catch(() => {});
      if (dir) rmSync(dir, { recursive: true, force: true });
      console.log(`CLUSTER_LOSS_SUMMARY ${JSON.stringify(figures)}`);
    }, 120_000);

    const statusOf = async (name: GatewayName): Promise<StatusView> =>
      (await gatewayOf(name).admin(adminRoutes.status)) as StatusView;

    /**
     * The first time at or after `since` the gateway logged that it is connected (its consumers
     * open), to a node other than `not`: the daemon's own clock, on this machine.
     */
    const connectedAfter = (name: GatewayName, since: number, not?: string): Connected | undefined => {
      for (const line of gatewayOf(name).log.split('\n')) {
        if (!line.includes('"msg":"broker connected;')) continue;
        const entry = JSON.parse(line) as { time: string; node: string };
        const at = Date.parse(entry.time);
        if (at >= since && entry.node !== not) return { at, node: entry.node };
      }
      return undefined;
    };

    /** When C got a cross-host message sent (confirmed) after `since`. */
    const crossHostArrivalAfter = (since: number): number | undefined =>
      run.arrivals.find(
        ({ stream, arrival }) =>
          stream.recipient.on === 'C' &&
          stream.sender.on !== 'C' &&
          arrival.at >= since &&
          (stream.confirmedAt[arrival.seq - 1] ?? 0) > since,
      )?.arrival.at;

    /** Whether the exclusive lock queue `name` exists and is held, asked of the node at `uri`. */
    const lockHeld = async (uri: string, name: string): Promise<boolean> => {
      const connection = await amqp.connect(uri);
      connection.on('error', () => {
        // A refused passive declare closes the channel, not the connection.
      });
      try {
        const channel = await connection.createChannel();
        channel.on('error', () => {
          // 405 or 404 close the channel: the answer is in the rejection below.
        });
        return await channel.checkQueue(name).then(
          () => false,
          (err: { code?: number }) => err.code === 405,
        );
      } finally {
        await connection.close().catch(() => {});
      }
    };

    /**
     * A second gateway on a copy of C's home, as an operator who started C twice would have: it
     * must stop at once with the broker's refusal and C keeps consuming. Resolves to how long
     * the refusal took.
     */
    let copyOfC: string | undefined;
    const secondGatewayRefused = async (uris: readonly string[], moment: string): Promise<number> => {
      const c = gatewayOf('C');
      const twin = new GatewayProcess({
        hostId: c.hostId,
        trustCircle: false,
        env: { BRIDGE_BROKER_URI: uris.join(',') },
      });
      extra.push(twin);
      // C's config (quorum mode) and event log come with the copy of its home.
      cpSync(copyOfC as string, twin.home, { recursive: true });
      const started = Date.now();
      // Refused in its first attempt it exits before it is healthy; else soon after.
      await twin.start().catch(() => undefined);
      const code = await twin.exited(30_000);
      const ms = Date.now() - started;
      // 1: refused while starting (`agentbridge start` fails); 70: refused later (fatal).
      expect([1, 70], `${moment}: the second gateway's exit\n${twin.log}`).toContain(code);
      expect(twin.log, moment).toMatch(
        /CONSUMER_REFUSED: the broker refused to let this gateway consume .*RESOURCE-LOCKED.*Another gateway already consumes this (inbox|queue)/,
      );
      expect(c.log, `${moment}: C was never refused`).not.toMatch(/agentbridge: fatal/);
      return ms;
    };

    it('kill -9 of the receiver’s node, then of a second one (majority lost), then both back: nothing lost, no repeat, order kept, fast failures meanwhile', {
      timeout: 420_000,
    }, async () => {
      const testStarted = Date.now();
      const uris = (cluster as TestCluster).uris;
      // --- three gateways on the cluster, seven entities ---------------------------------
      for (const name of gatewayNames) {
        gateways.set(
          name,
          new GatewayProcess({
            hostId: uniqueHostId(`nl${name.toLowerCase()}`),
            env: { BRIDGE_BROKER_URI: uris.join(',') },
            config: {
              broker: {
                queueMode: 'quorum',
                heartbeatMs: 1_000,
                presenceTtlBeats: 30,
                retryBaseMs: 200,
                retryMaxMs: 1_000,
                confirmTimeoutMs,
              },
              limits: { maxDrain: 500 },
              store: { synchronous: 'NORMAL' },
            },
          }),
        );
      }
      // As an operator sets up the cluster once: bridge.dlq as a quorum queue.
      const setup = await gatewayOf('A').cli(['broker', 'setup']);
      expect(setup.code, setup.stderr || setup.stdout).toBe(0);
      await Promise.all(gatewayNames.map((name) => gatewayOf(name).start()));

      const out = join(dir, 'pane.txt');
      const pane = await (tmux as TmuxTestServer).newPane(`cat >> ${out}`);
      const main = (on: GatewayName, name: string) =>
        registerOn(gatewayOf(on), on, ['--kind', 'main', '--name', name]);
      const [sa, ma, pa, sb, sc, mc, wc] = await Promise.all([
        main('A', 'sa'),
        main('A', 'ma'),
        main('A', 'pa'),
        main('B', 'sb'),
        main('C', 'sc'),
        main('C', 'mc'),
        registerOn(gatewayOf('C'), 'C', tmuxWorkerArgs('wc', pane, (tmux as TmuxTestServer).socket)),
      ]);
      const entities: Entity<GatewayName>[] = [sa, ma, pa, sb, sc, mc, wc];
      // The second gateway's home: C's, copied while C is stopped (a consistent event log).
      const c = gatewayOf('C');
      expect(await c.stop()).toBe(0);
      copyOfC = join(dir, 'copy-of-c');
      cpSync(c.home, copyOfC, { recursive: true });
      await c.start();
      const probes: Record<GatewayName, Entity<GatewayName>> = { A: ma, B: sb, C: mc };
      await waitFor(
        'every roster listing all seven entities',
        async () =>
          (await run.rostersConverged(
            probes,
            entities.map((e) => e.gid),
          ))
            ? true
            : undefined,
        30_000,
      );

      const streams: Stream<GatewayName>[] = [
        run.stream('A>wc', sa, wc),
        run.stream('B>wc', sb, wc),
        run.stream('B>mc', sb, mc),
        run.stream('C>mc', sc, mc),
        run.stream('A>ma', sa, ma),
      ];
      const crossHost = streams.filter((s) => s.sender.on !== s.recipient.on);
      const sameHost = streams.filter((s) => s.sender.on === s.recipient.on);
      run.startReceiving([{ worker: wc, file: out }], [mc, ma]);
      run.startSending();
      await waitFor(
        'every stream delivering',
        () => (streams.every((s) => s.firstSeen.size >= 5) ? true : undefined),
        30_000,
      );
      await sleep(2_000);
      figures.secondGatewayRefusedMs = [await secondGatewayRefused(uris, 'before any kill')];

      // --- kill 1: the node the receiving gateway is on -----------------------------------
      const nodeIndex = (node: string | null) => uris.findIndex((uri) => redacted(uri) === node) + 1;
      const first = (await statusOf('C')).broker?.node ?? null;
      const firstKilled = nodeIndex(first);
      expect(firstKilled, `C is on one of the cluster's nodes (${first})`).toBeGreaterThan(0);
      const kill1 = Date.now();
      await (cluster as TestCluster).kill(firstKilled);
      const moved = await waitFor(
        'C connected to another node',
        () => connectedAfter('C', kill1, first as string),
        60_000,
      );
      figures.reconnectMs = moved.at - kill1;
      figures.firstDeliveryAfterKill1Ms =
        (await waitFor(
          'a cross-host delivery to C after kill 1',
          () => crossHostArrivalAfter(kill1),
          60_000,
        )) - kill1;
      for (const name of gatewayNames)
        await waitFor(
          `${name} connected after kill 1`,
          async () => ((await statusOf(name)).broker?.state === 'connected' ? true : undefined),
          60_000,
        );
      const live1 = uris.filter((_, i) => i + 1 !== firstKilled);
      (figures.secondGatewayRefusedMs as number[]).push(await secondGatewayRefused(live1, 'after kill 1'));
      await sleep(2_000);

      // --- kill 2: the node C moved to. One node of three left: no majority ---------------
      const second = (await statusOf('C')).broker?.node ?? null;
      const secondKilled = nodeIndex(second);
      expect(secondKilled).toBeGreaterThan(0);
      expect(secondKilled).not.toBe(firstKilled);
      const last = uris.find((_, i) => i + 1 !== firstKilled && i + 1 !== secondKilled) as string;
      const kill2 = Date.now();
      await (cluster as TestCluster).kill(secondKilled);
      // C takes its locks on the last node (and then waits there: its quorum consumers open only
      // once the cluster has its majority again).
      await waitFor(
        'C holding its control lock on the last node',
        async () => ((await lockHeld(last, controlLockName(c.hostId))) ? true : undefined),
        30_000,
      );
      figures.lockRetakenMs = Date.now() - kill2;
      // Long enough for every cross-host stream to have met the confirm timeout at least once.
      await sleep(confirmTimeoutMs + 2_000);
      const probeClient = await connectMcp(gatewayOf('A').mcpUrl, pa.token);
      const probeAt = Date.now();
      const probe = await callTool(
        probeClient,
        'bridge_send',
        { to: `wc@${wc.host}`, text: 'probe' },
        15_000,
      );
      const probeMs = Date.now() - probeAt;
      await probeClient.close();
      expect(probe.isError, JSON.stringify(probe.structuredContent ?? probe.content)).toBe(true);
      expect((probe.content as Array<{ text: string }>)[0]?.text).toMatch(/BROKER_UNAVAILABLE/);
      (figures.secondGatewayRefusedMs as number[]).push(await secondGatewayRefused([last], 'majority lost'));
      const lossSeen = Date.now();
      await sleep(2_000);
      const restoreAt = Date.now();
      // Same-host traffic kept flowing while no cross-host send could be confirmed.
      const sameHostDuringLoss = Object.fromEntries(
        sameHost.map((s) => [s.id, run.arrivedBetween(s, kill2 + 1_000, restoreAt)]),
      );
      const unavailableCalls = crossHost.flatMap((s) =>
        s.failed.filter((f) => f.code === 'BROKER_UNAVAILABLE' && f.at >= kill2 && f.at < restoreAt),
      );
      const slowest = Math.max(0, ...unavailableCalls.map((f) => f.ms));
      const sortedMs = unavailableCalls.map((f) => f.ms).sort((a, b) => a - b);
      figures.majorityLost = {
        probeMs,
        unavailableCalls: unavailableCalls.length,
        medianFailMs: sortedMs[Math.floor(sortedMs.length / 2)] ?? null,
        slowestFailMs: slowest,
        sameHostDelivered: sameHostDuringLoss,
        otherErrors: Object.fromEntries(crossHost.map((s) => [s.id, errorCounts(s)])),
        windowMs: restoreAt - kill2,
        checkedForMs: restoreAt - lossSeen,
      };

      // --- both nodes back --------------------------------------------------------------
      // Measured from the moment the restart begins: the node is back in the cluster before
      // startNode has seen it say so.
      figures.majorityBackMs = await (cluster as TestCluster).startNode(secondKilled);
      const recovered = await waitFor('C consuming again', () => connectedAfter('C', restoreAt), 120_000);
      figures.recoveredAfterRestartMs = recovered.at - restoreAt;
      const firstAfter = await waitFor(
        'a cross-host delivery to C after the majority is back',
        // A message confirmed in the instant of the kill may arrive before: what counts is after.
        () => crossHostArrivalAfter(restoreAt),
        60_000,
      );
      figures.firstDeliveryAfterKill2Ms = firstAfter - kill2;
      figures.firstDeliveryAfterRestartMs = firstAfter - restoreAt;
      figures.rejoinMs = await (cluster as TestCluster).startNode(firstKilled);
      for (const name of gatewayNames)
        await waitFor(
          `${name} connected at the end`,
          async () => ((await statusOf(name)).broker?.state === 'connected' ? true : undefined),
          60_000,
        );
      (figures.secondGatewayRefusedMs as number[]).push(await secondGatewayRefused(uris, 'all nodes back'));
      await sleep(2_000);

      // --- stop, drain, judge -------------------------------------------------------------
      await run.stopSending(30_000);
      await run.drainAll();
      const statuses = {} as Record<GatewayName, StatusView>;
      const settled = Date.now() + 10_000;
      for (;;) {
        for (const name of gatewayNames) statuses[name] = await statusOf(name);
        const open = gatewayNames.some(
          (name) =>
            Object.keys(statuses[name].deliveries).some((state) => state !== 'acked') ||
            (statuses[name].broker?.unconfirmed.length ?? 0) > 0,
        );
        if (!open || Date.now() > settled) break;
        await sleep(500);
      }
      const dlq = await gatewayOf('A').cli(['dlq', 'list', '--json', '--max', '1000']);
      expect(dlq.code, dlq.stderr || dlq.stdout).toBe(0);
      const letters = JSON.parse(dlq.stdout) as Array<{ reason?: string; msgId?: string }>;
      const { lost, wrongMsgId, outOfOrder, unexplainedRepeats } = run.findings();
      figures.seconds = Math.round((Date.now() - testStarted) / 100) / 10;
      figures.messages = {
        confirmed: streams.reduce((n, s) => n + s.confirmed.length, 0),
        delivered: streams.reduce((n, s) => n + s.firstSeen.size, 0),
        lost: lost.length,
        repeats: unexplainedRepeats.length,
        differentMsgId: wrongMsgId.length,
        outOfOrder: outOfOrder.length,
        idempotentRepeats: streams.reduce((n, s) => n + s.idempotentRepeats, 0),
      };
      figures.streams = run.summary();
      figures.deadLetters = letters.length;

      expect(lost, 'confirmed and never delivered').toEqual([]);
      expect(wrongMsgId, 'delivered under another msgId than bridge_send returned').toEqual([]);
      expect(outOfOrder, 'first arrivals out of send order (R-DL4)').toEqual([]);
      expect(unexplainedRepeats, 'arrived twice: a node loss opens no repeat window').toEqual([]);
      expect(streams.filter((s) => s.unconfirmed !== undefined).map((s) => s.id)).toEqual([]);
      expect(letters, 'dead letters on the cluster').toEqual([]);
      for (const name of gatewayNames) {
        expect(Object.keys(statuses[name].deliveries), `${name}'s deliveries at the end`).toEqual(
          name === 'B' ? [] : ['acked'], // B's one entity only sends
        );
        expect(statuses[name].broker?.unconfirmed, `${name}: every late confirm came`).toEqual([]);
        expect(await gatewayOf(name).healthy(), `${name} healthy`).toBe(true);
        expect(gatewayOf(name).log, `${name} never fatal`).not.toMatch(/agentbridge: fatal/);
      }
      // Majority lost: the send that meets a held confirm gives up after confirmTimeoutMs, and the
      // ones after it fail at once; none waits for the MCP call's own timeout.
      expect(
        unavailableCalls.length,
        'cross-host sends failed as BROKER_UNAVAILABLE meanwhile',
      ).toBeGreaterThan(0);
      expect(slowest, 'no failing send waited much past the confirm timeout').toBeLessThan(
        confirmTimeoutMs + 3_000,
      );
      expect(probeMs, 'a send to a recipient already stuck fails at once').toBeLessThan(1_500);
      for (const s of sameHost)
        expect(sameHostDuringLoss[s.id], `${s.id} flowed without a majority`).toBeGreaterThan(0);
      expect(
        figures.reconnectMs as number,
        'C moved to another node without waiting out a backoff',
      ).toBeLessThan(10_000);
      for (const s of streams) expect(s.confirmed.length, s.id).toBeGreaterThan(20);
    });
  });
}
