import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Exchange, rosterKey } from '../../src/federation/topology.js';
import { brokerEnv, brokerUri, testDeployment, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { publishConfirmed } from '../support/signedPeer.js';

const suffix = Math.random().toString(36).slice(2, 7);
const heartbeatMs = 300;
const presenceTtlBeats = 2;
/** Wide enough that every playback in the first case is judged by the stamp memory, not by age. */
const maxClockSkewMs = 60_000;
/** The restarted gateway's window, so the same copy is already too old for it. */
const restartSkewMs = 1_000;

interface Captured {
  content: Buffer;
  headers: Record<string, string>;
  stampedAt: number;
}

/**
 * Issue: a replayed PRESENCE resurrects a dead host. Someone with read access to the broker
 * keeps one PRESENCE of beta; after beta stops and expires from alpha's roster, the same bytes
 * published again (signature and all) must not bring beta's entities back, neither while
 * alpha still remembers beta's last stamp nor, after alpha restarted, once the copy is older
 * than its TTL plus the allowed skew.
 */
describe('a replayed PRESENCE does not resurrect a dead host', () => {
  let alpha: GatewayProcess;
  let beta: GatewayProcess;
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  let captured: Captured | undefined;
  /** The eavesdropper keeps beta's newest PRESENCE until beta stops. */
  let capturing = true;

  const rosterNames = async (g: GatewayProcess): Promise<string[]> => {
    return (await g.roster()).map((e) => `${e.name}@${e.host}`);
  };
  const mainB = () => `mainB@${beta.hostId}`;
  const replay = async (copy: Captured) =>
    publishConfirmed(
      channel,
      Exchange.roster,
      rosterKey(testDeployment, beta.hostId),
      copy.content,
      copy.headers,
      `presence/replay/${Math.random()}`,
    );
  const ignoredFor = (g: GatewayProcess, reason: string): number =>
    g.log
      .split('\n')
      .filter((l) => l.includes('ignored a PRESENCE announcement') && l.includes(`"reason":"${reason}"`))
      .filter((l) => l.includes(`roster.${beta.hostId}`)).length;

  /** How often alpha took beta into its roster (a resurrection is a join after the expiry). */
  const joinsOfBeta = (g: GatewayProcess): number =>
    g.log
      .split('\n')
      .filter((l) => l.includes('host joined the roster') && l.includes(`"peer":"${beta.hostId}"`)).length;

  beforeAll(async () => {
    // Every refusal logged (not once a window): the test counts them.
    const config = {
      broker: { heartbeatMs, presenceTtlBeats },
      security: { maxClockSkewMs },
      log: { repeatWindowMs: 0 },
    };
    alpha = new GatewayProcess({ hostId: `alpha-${suffix}`, env: { ...brokerEnv }, config });
    beta = new GatewayProcess({ hostId: `beta-${suffix}`, env: { ...brokerEnv }, config });
    await Promise.all([alpha.start(), beta.start()]);
    connection = await amqp.connect(brokerUri);
    channel = await connection.createConfirmChannel();
    // What an eavesdropper with read access does: a queue of its own on the roster exchange.
    const { queue } = await channel.assertQueue('', { exclusive: true, autoDelete: true });
    await channel.bindQueue(queue, Exchange.roster, rosterKey(testDeployment, beta.hostId));
    await channel.consume(queue, (message) => {
      if (!message || !capturing || !message.content.toString().includes('"mainB"')) return;
      captured = {
        content: message.content,
        headers: Object.fromEntries(
          Object.entries(message.properties.headers ?? {}).map(([k, v]) => [k, String(v)]),
        ),
        stampedAt: Date.now(),
      };
    });
    const registered = await beta.cli(['register', '--kind', 'main', '--name', 'mainB', '--json']);
    expect(registered.code, registered.stderr || registered.stdout).toBe(0);
    await waitFor('beta’s presence captured', async () => captured);
    await waitFor('mainB@beta in alpha’s roster', async () =>
      (await rosterNames(alpha)).includes(mainB()) ? true : undefined,
    );
  });

  afterAll(async () => {
    await connection?.close().catch(() => {});
    await alpha?.dispose();
    await beta?.dispose();
  });

  it('after beta stopped and expired, its captured PRESENCE played back is refused as replayed', async () => {
    await beta.stop();
    capturing = false;
    await waitFor('beta expired from alpha’s roster', async () =>
      (await rosterNames(alpha)).includes(mainB()) ? undefined : true,
    );
    const joined = joinsOfBeta(alpha);
    const copy = captured as Captured;
    for (let round = 0; round < 4; round++) {
      await replay(copy);
      await sleep(heartbeatMs);
      expect(await rosterNames(alpha)).not.toContain(mainB());
    }
    await waitFor('the replays logged as refused', async () =>
      ignoredFor(alpha, 'replayed') >= 4 ? true : undefined,
    );
    expect(joinsOfBeta(alpha)).toBe(joined);
    const send = await alpha.cli(['send', mainB(), 'are you there?', '--json']);
    expect(send.stdout).not.toMatch(/"status":\s*"sent"/);
  });

  it('a gateway that restarted (and forgot beta) refuses the same copy once it is older than TTL plus skew', async () => {
    await alpha.stop();
    writeFileSync(
      join(alpha.home, 'config.json'),
      JSON.stringify({
        broker: { heartbeatMs, presenceTtlBeats },
        security: { maxClockSkewMs: restartSkewMs },
      }),
    );
    await alpha.start();
    const copy = captured as Captured;
    const oldEnough = copy.stampedAt + heartbeatMs * presenceTtlBeats + restartSkewMs + 500;
    await sleep(Math.max(0, oldEnough - Date.now()));
    await replay(copy);
    const joined = joinsOfBeta(alpha);
    await waitFor('the stale copy logged as refused', async () =>
      ignoredFor(alpha, 'stale') >= 1 ? true : undefined,
    );
    expect(await rosterNames(alpha)).not.toContain(mainB());
    expect(joinsOfBeta(alpha)).toBe(joined);
  });
});
