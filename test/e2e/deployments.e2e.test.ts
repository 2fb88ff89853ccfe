import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inboxName } from '../../src/federation/topology.js';
import {
  brokerEnv,
  brokerUri,
  dlqUntilSeen,
  removeDeadLettersOf,
  testDeployment,
  waitFor,
} from '../support/federation.js';
import { GatewayProcess, repoRoot, runCli } from '../support/GatewayProcess.js';
import { addVhost, deleteVhost } from '../support/rabbit.js';
import { announcePresence, fakePeer } from '../support/signedPeer.js';

interface Registered {
  gid: string;
  token: string;
  name: string;
}
interface Letter {
  msgId: string;
  routingKey: string;
  reason: string;
}

const suffix = Math.random().toString(36).slice(2, 7);
const heartbeatMs = 300;

/**
 * Two deployments (two teams' gateways, each its own trust circle) on one broker and one vhost,
 * as two users of one RabbitMQ would run them: neither hears the other's broadcasts or
 * announcements, so neither dead-letters nor logs anything of the other's.
 */
describe('two deployments on one broker', () => {
  const other = `${testDeployment}-b`;
  let alpha: GatewayProcess;
  let beta: GatewayProcess;
  let gamma: GatewayProcess;
  const mains: Record<string, Registered> = {};

  const register = async (g: GatewayProcess, name: string): Promise<Registered> => {
    const result = await g.cli(['register', '--kind', 'main', '--name', name, '--json']);
    expect(result.code, result.stderr || result.stdout).toBe(0);
    const registered = JSON.parse(result.stdout) as Registered;
    mains[name] = registered;
    return registered;
  };
  const drain = async (g: GatewayProcess, name: string, waitMs: number): Promise<string[]> => {
    const r = await g.cli(['drain', '--wait', String(waitMs), '--json'], {
      BRIDGE_TOKEN: mains[name]?.token,
    });
    expect(r.code, r.stderr || r.stdout).toBe(0);
    return (JSON.parse(r.stdout) as Array<{ text: string }>).map((m) => m.text);
  };
  const roster = async (g: GatewayProcess): Promise<string[]> => {
    return (await g.roster()).map((e) => e.host);
  };

  beforeAll(async () => {
    const config = { broker: { heartbeatMs } };
    alpha = new GatewayProcess({ hostId: `alpha-${suffix}`, env: { ...brokerEnv }, config });
    beta = new GatewayProcess({ hostId: `beta-${suffix}`, env: { ...brokerEnv }, config });
    gamma = new GatewayProcess({
      hostId: `gamma-${suffix}`,
      env: { ...brokerEnv, BRIDGE_DEPLOYMENT: other },
      config,
      trustCircle: false,
    });
    await Promise.all([alpha.start(), beta.start(), gamma.start()]);
    await Promise.all([register(alpha, 'lead'), register(beta, 'peer'), register(gamma, 'stranger')]);
  });

  afterAll(async () => {
    await Promise.all([alpha?.dispose(), beta?.dispose(), gamma?.dispose()]);
    await removeDeadLettersOf([`alpha-${suffix}`, `beta-${suffix}`, `gamma-${suffix}`]);
  });

  it("a broadcast reaches its own deployment's inboxes and none of the other's, which dead-letters nothing", async () => {
    await waitFor('beta in alpha’s roster', async () =>
      (await roster(alpha)).includes(beta.hostId) ? true : undefined,
    );
    const sent = await alpha.cli(['broadcast', `hello ${suffix}`, '--json'], {
      BRIDGE_TOKEN: mains.lead?.token,
    });
    expect(sent.code, sent.stderr || sent.stdout).toBe(0);
    const broadcast = JSON.parse(sent.stdout) as { msgId: string; partial: boolean };
    expect(broadcast.partial).toBe(false);

    const got: string[] = [];
    await waitFor('the broadcast at beta', async () => {
      got.push(...(await drain(beta, 'peer', 500)));
      return got.includes(`hello ${suffix}`) ? true : undefined;
    });
    // gamma's main hears nothing: not the broadcast, nor any other test file's.
    expect(await drain(gamma, 'stranger', 2_000)).toEqual([]);

    // Nothing of gamma's inbox in bridge.dlq (a letter another reader holds is out of sight for a
    // moment, so read it until one read has seen alpha's own refusals or several reads are done).
    let reads = 0;
    const letters = await dlqUntilSeen(
      'three reads of bridge.dlq',
      async () => {
        reads += 1;
        const r = await alpha.cli(['dlq', 'list', '--max', '10000', '--json']);
        expect(r.code, r.stderr || r.stdout).toBe(0);
        return JSON.parse(r.stdout) as Letter[];
      },
      () => reads >= 3,
    );
    expect(letters.filter((l) => l.routingKey === mains.stranger?.gid)).toEqual([]);
    expect(letters.filter((l) => l.msgId === broadcast.msgId)).toEqual([]);
  });

  it("neither roster shows the other's hosts, and neither logs the other's announcements", async () => {
    await sleep(4 * heartbeatMs);
    expect(await roster(gamma)).not.toContain(alpha.hostId);
    expect(await roster(gamma)).not.toContain(beta.hostId);
    expect(await roster(alpha)).not.toContain(gamma.hostId);
    for (const g of [alpha, beta, gamma]) {
      expect(g.log.split('\n').filter((l) => l.includes('ignored a PRESENCE announcement'))).toEqual([]);
    }
  });
});

/**
 * Two trust circles in two vhosts of one broker, as docs/operating.md sets them up: `broker
 * setup` declares the shared exchanges and a `bridge.dlq` in the vhost of its URI, and a
 * gateway's URI names its vhost. The same deployment id on both sides: the vhost alone keeps
 * them apart.
 */
describe('two deployments in two vhosts of one broker', () => {
  const vhosts = [`bridge-test-${suffix}-a`, `bridge-test-${suffix}-b`];
  const uriOf = (vhost: string) => `${brokerUri.replace(/\/$/, '')}/${encodeURIComponent(vhost)}`;
  let gateways: GatewayProcess[] = [];
  const tokens: Record<string, string> = {};

  beforeAll(async () => {
    for (const vhost of vhosts) {
      await addVhost(vhost);
      const setup = await runCli(['broker', 'setup', '--json'], { BRIDGE_BROKER_URI: uriOf(vhost) });
      expect(setup.code, setup.stderr || setup.stdout).toBe(0);
    }
    const config = { broker: { heartbeatMs } };
    gateways = [
      new GatewayProcess({
        hostId: `va1-${suffix}`,
        env: { ...brokerEnv, BRIDGE_BROKER_URI: uriOf(vhosts[0] as string) },
        config,
      }),
      new GatewayProcess({
        hostId: `va2-${suffix}`,
        env: { ...brokerEnv, BRIDGE_BROKER_URI: uriOf(vhosts[0] as string) },
        config,
      }),
      new GatewayProcess({
        hostId: `vb1-${suffix}`,
        env: { ...brokerEnv, BRIDGE_BROKER_URI: uriOf(vhosts[1] as string) },
        config,
      }),
    ];
    await Promise.all(gateways.map((g) => g.start()));
    for (const [g, name] of gateways.map((g, i) => [g, ['a1', 'a2', 'b1'][i] as string] as const)) {
      const r = await g.cli(['register', '--kind', 'main', '--name', name, '--json']);
      expect(r.code, r.stderr || r.stdout).toBe(0);
      tokens[name] = (JSON.parse(r.stdout) as Registered).token;
    }
  }, 120_000);

  afterAll(async () => {
    await Promise.all(gateways.map((g) => g.dispose()));
    for (const vhost of vhosts) await deleteVhost(vhost);
  }, 120_000);

  it("a broadcast reaches its vhost's inboxes only; the other vhost's roster and DLQ stay empty of it", async () => {
    const [a1, a2, b1] = gateways as [GatewayProcess, GatewayProcess, GatewayProcess];
    await waitFor('a2 in a1’s roster', async () => {
      const hosts = ((await a1.roster()) as Array<{ host: string }>).map((e) => e.host);
      return hosts.includes(a2.hostId) ? true : undefined;
    });
    const sent = await a1.cli(['broadcast', `vhost hello ${suffix}`, '--json'], { BRIDGE_TOKEN: tokens.a1 });
    expect(sent.code, sent.stderr || sent.stdout).toBe(0);
    const drainOf = async (g: GatewayProcess, name: string, waitMs: number) =>
      (
        JSON.parse(
          (await g.cli(['drain', '--wait', String(waitMs), '--json'], { BRIDGE_TOKEN: tokens[name] })).stdout,
        ) as Array<{ text: string }>
      ).map((m) => m.text);
    const got: string[] = [];
    await waitFor('the broadcast at a2', async () => {
      got.push(...(await drainOf(a2, 'a2', 500)));
      return got.includes(`vhost hello ${suffix}`) ? true : undefined;
    });
    expect(await drainOf(b1, 'b1', 2_000)).toEqual([]);
    const bHosts = ((await b1.roster()) as Array<{ host: string }>).map((e) => e.host);
    expect(bHosts).not.toContain(a1.hostId);
    expect(bHosts).not.toContain(a2.hostId);
    // b's vhost has a bridge.dlq of its own, and nothing of a's traffic is in it.
    const letters = await b1.cli(['dlq', 'list', '--json']);
    expect(letters.code, letters.stderr || letters.stdout).toBe(0);
    expect(JSON.parse(letters.stdout)).toEqual([]);
  });
});

/**
 * Untrusted hosts inside the deployment (a peer not yet trusted, a misconfigured one) announce
 * every heartbeat. Ten minutes of four of them at the default 5 s heartbeat is 480 announcements:
 * the gateway ignores and counts each, and writes one line per host.
 */
describe('untrusted hosts announcing every heartbeat', () => {
  let gateway: GatewayProcess;
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  const strangers = [0, 1, 2, 3].map((i) => fakePeer(`untrusted${i}`));

  beforeAll(async () => {
    gateway = new GatewayProcess({ hostId: `watch-${suffix}`, env: { ...brokerEnv } });
    await gateway.start();
    connection = await amqp.connect(brokerUri);
    channel = await connection.createConfirmChannel();
  });

  afterAll(async () => {
    await connection?.close().catch(() => {});
    await gateway?.dispose();
  });

  it('480 announcements of 4 untrusted hosts: 4 log lines, all 480 counted', async () => {
    for (let beat = 0; beat < 120; beat++) {
      await Promise.all(strangers.map((peer) => announcePresence(channel, peer, [])));
    }
    const counted = async () => {
      const metrics = await (await fetch(`http://127.0.0.1:${gateway.port}/metrics`)).text();
      return Number(/bridge_presence_ignored_total\{reason="bad-signature"\} (\d+)/.exec(metrics)?.[1] ?? 0);
    };
    await waitFor('all 480 counted', async () => ((await counted()) >= 480 ? true : undefined));
    const lines = gateway.log.split('\n').filter((l) => l.includes('ignored a PRESENCE announcement'));
    expect(lines).toHaveLength(4);
    for (const peer of strangers)
      expect(lines.filter((l) => l.includes(`roster.${peer.host}`))).toHaveLength(1);
  });
});

/**
 * `npm run demo` on a broker where another deployment's hosts are called alpha and beta (the
 * demo's own names): the demo picks host ids and a deployment of its own, and removes only what
 * it made. Both run in a vhost of this test's own, so the real names alpha and beta are safe to
 * use; the demo is pointed at it with BRIDGE_DEMO_BROKER_URI.
 */
describe('npm run demo beside a deployment whose hosts are alpha and beta', () => {
  const vhost = `bridge-test-${suffix}-demo`;
  const uri = `${brokerUri.replace(/\/$/, '')}/${encodeURIComponent(vhost)}`;
  let alpha: GatewayProcess;
  let beta: GatewayProcess;
  let connection: ChannelModel;
  const tokens: Record<string, string> = {};
  const gids: Record<string, string> = {};

  /** Each of the team's queues: how many messages wait in it and how many consumers it has. */
  const teamQueues = async (): Promise<Record<string, string>> => {
    const names = ['control.alpha', 'control.beta', inboxName(gids.ops ?? ''), inboxName(gids.peer ?? '')];
    const seen: Record<string, string> = {};
    for (const name of names) {
      // A passive check on a channel of its own: a missing queue closes the channel.
      const channel = await connection.createChannel();
      const q = await channel.checkQueue(name).catch((err: Error) => err);
      seen[name] =
        q instanceof Error
          ? `missing: ${q.message}`
          : `${q.messageCount} waiting, ${q.consumerCount} consumers`;
      await channel.close().catch(() => undefined);
    }
    return seen;
  };

  beforeAll(async () => {
    await addVhost(vhost);
    const setup = await runCli(['broker', 'setup', '--json'], { BRIDGE_BROKER_URI: uri });
    expect(setup.code, setup.stderr || setup.stdout).toBe(0);
    const env = { ...brokerEnv, BRIDGE_BROKER_URI: uri, BRIDGE_DEPLOYMENT: 'team' };
    const config = { broker: { heartbeatMs } };
    alpha = new GatewayProcess({ hostId: 'alpha', env, config });
    beta = new GatewayProcess({ hostId: 'beta', env, config });
    await Promise.all([alpha.start(), beta.start()]);
    for (const [g, name] of [
      [alpha, 'ops'],
      [beta, 'peer'],
    ] as const) {
      const r = await g.cli(['register', '--kind', 'main', '--name', name, '--json']);
      expect(r.code, r.stderr || r.stdout).toBe(0);
      const registered = JSON.parse(r.stdout) as Registered;
      tokens[name] = registered.token;
      gids[name] = registered.gid;
    }
    connection = await amqp.connect(uri);
  }, 120_000);

  afterAll(async () => {
    await connection?.close().catch(() => undefined);
    await Promise.all([alpha?.dispose(), beta?.dispose()]);
    await deleteVhost(vhost);
  }, 120_000);

  it("runs to the end and leaves the team's queues, inboxes, roster and dead letters as they were", async () => {
    await waitFor('peer@beta in alpha’s roster', async () =>
      (await alpha.cli(['roster', '--json'])).stdout.includes('"peer"') ? true : undefined,
    );
    // A message held in the team's broker: peer's inbox on beta keeps it until peer drains.
    const held = await alpha.cli(['send', 'peer@beta', `held ${suffix}`, '--json'], {
      BRIDGE_TOKEN: tokens.ops,
    });
    expect(held.code, held.stderr || held.stdout).toBe(0);
    const before = await teamQueues();
    expect(Object.values(before).filter((q) => q.startsWith('missing'))).toEqual([]);

    const demo = await new Promise<{ code: number | null; out: string }>((resolve) => {
      execFile(
        process.execPath,
        [join(repoRoot, 'tools', 'demo.mjs')],
        { env: { ...process.env, BRIDGE_DEMO_BROKER_URI: uri }, timeout: 120_000 },
        (err, stdout, stderr) =>
          resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out: `${stdout}${stderr}` }),
      );
    });
    expect(demo.code, demo.out).toBe(0);
    expect(demo.out).toMatch(/reply on the open send, from coder@beta-\w+/);

    expect(await teamQueues()).toEqual(before);
    // The demo's broadcast reached neither of the team's mains; the held message is still there.
    const drained = async (g: GatewayProcess, name: string) =>
      (
        JSON.parse(
          (await g.cli(['drain', '--wait', '1000', '--json'], { BRIDGE_TOKEN: tokens[name] })).stdout,
        ) as Array<{ text: string }>
      ).map((m) => m.text);
    expect(await drained(alpha, 'ops')).toEqual([]);
    expect(await drained(beta, 'peer')).toEqual([`held ${suffix}`]);
    // Neither roster shows the demo's hosts, and the vhost's dead letters hold nothing of the team's.
    for (const g of [alpha, beta]) {
      const hosts = ((await g.roster()) as Array<{ host: string }>).map((e) => e.host);
      expect(hosts.filter((h) => h !== 'alpha' && h !== 'beta')).toEqual([]);
    }
    const letters = await alpha.cli(['dlq', 'list', '--json']);
    expect(letters.code, letters.stderr || letters.stdout).toBe(0);
    expect(JSON.parse(letters.stdout)).toEqual([]);
    expect(await alpha.healthy()).toBe(true);
    expect(await beta.healthy()).toBe(true);
  });
});
