import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/loadConfig.js';
import { type Daemon, startDaemon } from '../../src/daemon/startDaemon.js';
import type { BrokerActor } from '../../src/federation/BrokerActor.js';
import { controlSpec, inboxName, rosterQueueName } from '../../src/federation/topology.js';
import { silentLogger } from '../../src/log/logger.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { brokerEnv, waitFor } from '../support/federation.js';
import { consumerCounts } from '../support/rabbit.js';

/** The gateway's broker actor (the federation keeps it to itself; this test drives it directly). */
function brokerOf(daemon: Daemon): BrokerActor {
  return (daemon.gateway as unknown as { federation: { broker: BrokerActor } }).federation.broker;
}

/**
 * Review finding: pausing and resuming an inbox consumer (what a full local inbox does) raced.
 * A pause that came while a consume was being set up was lost, so the broker kept delivering to a
 * full inbox, and a pause then a resume could start a second consume. Switches now run one at a
 * time, each to the latest wish: after any burst, the broker sees the consumer the last call asked for.
 */
describe.each(['classic', 'quorum'] as const)(
  'pausing and resuming a %s inbox consumer in bursts',
  (mode) => {
    let home: string;
    let daemon: Daemon;
    let queue: string;
    const hostId = uniqueHostId(`switch-${mode}`);

    beforeAll(async () => {
      home = mkdtempSync(join(tmpdir(), 'bridge-switch-'));
      const { config } = loadConfig({
        env: {
          BRIDGE_HOME: home,
          BRIDGE_HOST_ID: hostId,
          ...brokerEnv,
          BRIDGE_MCP_PORT: '0',
        },
      });
      config.broker.queueMode = mode;
      daemon = await startDaemon({ config, logger: silentLogger() });
      const lead = await daemon.gateway.services.registrations.register({ kind: 'main', name: 'lead' });
      queue = inboxName(lead.gid);
      await waitFor('the inbox consumed', async () =>
        (await consumerCounts([queue])).get(queue) === 1 ? true : undefined,
      );
    });

    afterAll(async () => {
      await daemon?.stop();
      await deleteQueues([queue, controlSpec(hostId).name, rosterQueueName(hostId)]);
      rmSync(home, { recursive: true, force: true });
    });

    const settled = async (want: number) => {
      await waitFor(`${want} consumer(s) on the inbox`, async () =>
        (await consumerCounts([queue])).get(queue) === want ? true : undefined,
      );
      // And it stays so: no switch still on its way changes it.
      await sleep(500);
      expect((await consumerCounts([queue])).get(queue)).toBe(want);
    };

    it('ends paused after a burst that ends with a pause, and consuming once after one that ends with a resume', async () => {
      const broker = brokerOf(daemon);
      for (let round = 0; round < 3; round++) {
        const calls: Promise<void>[] = [];
        for (let i = 0; i < 20; i++) calls.push(broker.setPaused(queue, i % 2 === 0));
        calls.push(broker.setPaused(queue, true));
        await Promise.all(calls);
        await settled(0);
        expect(broker.consuming(queue)).toBe(false);
        const resumes: Promise<void>[] = [];
        for (let i = 0; i < 20; i++) resumes.push(broker.setPaused(queue, i % 2 === 1));
        resumes.push(broker.setPaused(queue, false));
        await Promise.all(resumes);
        await settled(1);
        expect(broker.consuming(queue)).toBe(true);
      }
      expect(broker.connected).toBe(true);
    });
  },
);
