import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import amqp from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/loadConfig.js';
import type { EntityActor } from '../../../src/deliver/EntityActor.js';
import { setupSharedTopology } from '../../../src/federation/sharedTopology.js';
import { quorumArguments } from '../../../src/federation/topology.js';
import { Gateway } from '../../../src/gateway/Gateway.js';
import { silentLogger } from '../../../src/log/logger.js';
import { initKeys } from '../../../src/security/keys.js';
import { addTrust } from '../../../src/security/TrustStore.js';
import { uniqueHostId } from '../../support/broker.js';
import type { TestCluster } from '../../support/cluster.js';
import { testDeployment, waitFor } from '../../support/federation.js';

const run = promisify(execFile);

/** The files under `dir` whose bytes hold `marker` (grep, binary files included). */
async function filesHolding(dir: string, marker: string): Promise<string[]> {
  try {
    const { stdout } = await run('grep', ['-rlaF', marker, dir], { maxBuffer: 1 << 24 });
    return stdout.split('\n').filter(Boolean);
  } catch (err) {
    if ((err as { code?: number }).code === 1) return [];
    throw err;
  }
}

/**
 * Issue 34 on the 3-node cluster with quorum inboxes: two gateways (in this process, their
 * default security.encryption) send a SEND, a BROADCAST and an ASK with its ANSWER, each with a
 * marker in its text. Each arrives intact; the quorum queues' logs on the three nodes' disks hold
 * no marker, while a marker published in clear to a quorum queue of the test's own is found on
 * every node (the grep would see a leak).
 */
export function sealedQuorumSuite(sharedCluster: () => TestCluster): void {
  describe('sealed messages on a three-node cluster with quorum inboxes', () => {
    const marker = `QMARK${randomUUID().replaceAll('-', '')}`;
    const homes: string[] = [];
    const gateways: Gateway[] = [];
    let a: Gateway;
    let b: Gateway;
    let mainA: EntityActor;
    let mainB: EntityActor;

    const gateway = (hostId: string, home: string, uris: readonly string[]): Gateway => {
      const { config } = loadConfig({
        env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: hostId, BRIDGE_MCP_PORT: '0' },
      });
      const made = new Gateway({
        config: {
          ...config,
          broker: {
            ...config.broker,
            uris: [...uris],
            deployment: testDeployment,
            queueMode: 'quorum',
            heartbeatMs: 300,
          },
        },
        logger: silentLogger(),
        createInjector: () => {
          throw new Error('no panes here');
        },
      });
      gateways.push(made);
      return made;
    };

    beforeAll(async () => {
      const cluster = sharedCluster();
      await setupSharedTopology({ uri: cluster.uris[0] as string, queueMode: 'quorum' });
      const hosts = [uniqueHostId('sealqA'), uniqueHostId('sealqB')];
      for (const _ of hosts) homes.push(mkdtempSync(join(tmpdir(), 'bridge-sealq-')));
      const keys = homes.map((home) => initKeys(home).trustString);
      addTrust(homes[0] as string, hosts[1] as string, keys[1] as string);
      addTrust(homes[1] as string, hosts[0] as string, keys[0] as string);
      a = gateway(hosts[0] as string, homes[0] as string, cluster.uris);
      b = gateway(hosts[1] as string, homes[1] as string, [...cluster.uris].reverse());
      await Promise.all([a.start(), b.start()]);
      const ra = await a.services.registrations.register({ kind: 'main', name: 'qmainA' });
      const rb = await b.services.registrations.register({ kind: 'main', name: 'qmainB' });
      mainA = a.directory.authenticate(ra.token) as EntityActor;
      mainB = b.directory.authenticate(rb.token) as EntityActor;
      await waitFor(
        'each in the other’s roster',
        () =>
          a.services.status.roster().some((e) => e.gid === mainB.gid) &&
          b.services.status.roster().some((e) => e.gid === mainA.gid)
            ? true
            : undefined,
        30_000,
      );
    }, 120_000);

    afterAll(async () => {
      for (const g of gateways) await g.stop().catch(() => {});
      for (const home of homes) rmSync(home, { recursive: true, force: true });
    });

    it('SEND, BROADCAST, ASK and ANSWER arrive intact; no node’s quorum log holds their text', async () => {
      const to = `qmainB@${b.host}`;
      await a.services.sends.send(mainA, { kind: 'SEND', to, text: `send ${marker}` });
      await a.services.router.broadcast(mainA, { text: `broadcast ${marker}` });
      const asking = a.services.asks.ask(mainA, { to, question: `ask ${marker}`, timeoutMs: 30_000 });
      const got: Array<{ kind: string; text: string; msgId: string }> = [];
      await waitFor(
        'the three at B',
        async () => {
          const handover = await b.services.drains.drain(mainB);
          handover.confirm();
          got.push(...handover.envelopes);
          return got.length >= 3 ? true : undefined;
        },
        30_000,
      );
      expect(got.map((m) => [m.kind, m.text]).sort()).toEqual(
        [
          ['ASK', `ask ${marker}`],
          ['BROADCAST', `broadcast ${marker}`],
          ['SEND', `send ${marker}`],
        ].sort(),
      );
      const ask = got.find((m) => m.kind === 'ASK');
      await b.services.asks.answer(mainB, ask?.msgId as string, `answer ${marker}`);
      expect(JSON.stringify(await asking)).toContain(`answer ${marker}`);

      // A quorum queue of the test's own, with a marker in clear: on every node's disk.
      const cluster = sharedCluster();
      const clear = `QCLEAR${randomUUID().replaceAll('-', '')}`;
      const queue = `test.sealq.${randomUUID()}`;
      const connection = await amqp.connect(cluster.uris[0] as string);
      try {
        const channel = await connection.createConfirmChannel();
        await channel.assertQueue(queue, { durable: true, arguments: quorumArguments });
        await new Promise<void>((resolve, reject) =>
          channel.sendToQueue(queue, Buffer.from(clear), { persistent: true }, (err) =>
            err ? reject(err) : resolve(),
          ),
        );
        await waitFor('the clear marker on every node', async () =>
          (await filesHolding(cluster.dir, clear)).length >= cluster.uris.length ? true : undefined,
        );
        expect(await filesHolding(cluster.dir, marker)).toEqual([]);
        await channel.deleteQueue(queue);
      } finally {
        await connection.close();
      }
    }, 120_000);
  });
}
