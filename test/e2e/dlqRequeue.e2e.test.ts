import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlSpec, inboxName } from '../../src/federation/topology.js';
import type { RequeueResult } from '../../src/wire/deadLetterView.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { brokerEnv, brokerUri, dlqUntilSeen, removeDeadLettersOf, waitFor } from '../support/federation.js';
import { type CliResult, cliPath, GatewayProcess } from '../support/GatewayProcess.js';
import { sendEnvelope } from '../support/sendEnvelope.js';
import { publishConfirmed } from '../support/signedPeer.js';

/** Runs the CLI against `gateway`, killed after `ms` (a requeue that never ends must not hang the test). */
function cliWithin(gateway: GatewayProcess, args: string[], ms: number): Promise<CliResult & { ms: number }> {
  const started = Date.now();
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [cliPath, ...args],
      { env: { ...process.env, ...gateway.cliEnv() }, timeout: ms },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
        resolve({ code, stdout, stderr, ms: Date.now() - started });
      },
    );
  });
}

/**
 * Issue 13 item 4: `agentbridge dlq requeue` looped forever on a dead letter that is refused again on
 * arrival (bad-signature): it went back to bridge.dlq and the loop took it again (6,546 refusals
 * in 20 s, the CLI hanging). A requeue is one pass over what the DLQ held when it started, and a
 * letter refused for its signature (or as rejected) stays in the DLQ unless forced.
 */
describe('agentbridge dlq requeue of a letter refused again on arrival', () => {
  let gateway: GatewayProcess;
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  let targetGid: string;
  const msgId = randomUUID();

  /**
   * How often the gateway has refused this letter on arrival (its log line names the msgId). Not
   * its bad-signature metric: other tests' gateways on the shared broker broadcast to every main,
   * and the gateway refuses those as bad-signature too.
   */
  const badSignatureRefusals = async (): Promise<number> =>
    gateway.log
      .split('\n')
      .filter((line) => line.includes(msgId) && line.includes('refused a message from the broker')).length;

  /** How many copies of the letter bridge.dlq holds (read without consuming: the channel's close puts them back). */
  const copiesInDlq = async (): Promise<number> => {
    const peek = await connection.createChannel();
    let copies = 0;
    for (;;) {
      const message = await peek.get('bridge.dlq', { noAck: false });
      if (message === false) break;
      if (message.properties.messageId === msgId) copies++;
    }
    await peek.close();
    return copies;
  };

  /** Whether a `dlq requeue --json` saw the letter: requeued it or left it, with a reason. */
  const seenBy = (stdout: string): boolean => {
    const { requeued, skipped } = JSON.parse(stdout) as RequeueResult;
    return requeued + Object.values(skipped).reduce((sum, n) => sum + n, 0) > 0;
  };

  /**
   * The letter is in bridge.dlq exactly once. A count of 0 is a reader beside this test holding
   * it (see dlqUntilSeen), and is read again; more than one copy fails at once.
   */
  const oneCopyInDlq = async (): Promise<void> => {
    const copies = await dlqUntilSeen('the letter in bridge.dlq', copiesInDlq, (n) => n > 0);
    expect(copies).toBe(1);
  };

  beforeAll(async () => {
    gateway = new GatewayProcess({
      hostId: uniqueHostId('dlqloop'),
      env: { ...brokerEnv },
      config: { broker: { heartbeatMs: 300 } },
    });
    await gateway.start();
    const registered = await gateway.cli(['register', '--kind', 'main', '--name', 'target', '--json']);
    expect(registered.code, registered.stderr || registered.stdout).toBe(0);
    targetGid = (JSON.parse(registered.stdout) as { gid: string }).gid;
    connection = await amqp.connect(brokerUri);
    channel = await connection.createConfirmChannel();
    // An unsigned SEND straight into the target's inbox: refused as bad-signature, dead-lettered.
    const forger = {
      gid: randomUUID(),
      name: 'forger',
      host: uniqueHostId('nowhere'),
      kind: 'main',
    } as const;
    const envelope = sendEnvelope(forger, targetGid, { msgId, text: 'unsigned' });
    await publishConfirmed(
      channel,
      'bridge.msg',
      targetGid,
      Buffer.from(JSON.stringify(envelope)),
      {},
      msgId,
    );
    await waitFor('the unsigned letter refused', async () =>
      (await badSignatureRefusals()) === 1 ? true : undefined,
    );
    await oneCopyInDlq();
  });

  afterAll(async () => {
    await channel?.close().catch(() => {});
    await connection?.close().catch(() => {});
    await gateway?.dispose();
    await deleteQueues([inboxName(targetGid), controlSpec(gateway.hostId).name]);
    await removeDeadLettersOf([gateway.hostId]);
  });

  it('without --force: returns at once, leaves the letter in the DLQ once, says how many were skipped and how to force', async () => {
    const json = await dlqUntilSeen(
      'a requeue that sees the letter',
      () => cliWithin(gateway, ['dlq', 'requeue', msgId, '--json'], 15_000),
      (r) => r.code !== 0 || seenBy(r.stdout),
    );
    expect(json.code, `${json.stderr} after ${json.ms} ms`).toBe(0);
    expect(json.ms).toBeLessThan(10_000);
    expect(JSON.parse(json.stdout)).toEqual({ requeued: 0, skipped: { 'bad-signature': 1 } });

    // By msgId, not --all: the shared broker's DLQ holds other tests' letters too.
    const human = await dlqUntilSeen(
      'a requeue that sees the letter',
      () => cliWithin(gateway, ['dlq', 'requeue', msgId], 15_000),
      (r) => r.code !== 0 || !/none with msgId/.test(r.stdout),
    );
    expect(human.code, human.stderr || human.stdout).toBe(0);
    expect(human.stdout).toMatch(/requeued 0 dead letters/);
    expect(human.stdout).toMatch(/left 1 in bridge\.dlq: 1 bad-signature/);
    expect(human.stdout).toMatch(/--force/);

    await sleep(1500); // a requeued copy would have been refused by now
    expect(await badSignatureRefusals()).toBe(1);
    await oneCopyInDlq();
  });

  it('with --force: requeued once, refused once more, back in the DLQ once (one pass)', async () => {
    const forced = await dlqUntilSeen(
      'a forced requeue that sees the letter',
      () => cliWithin(gateway, ['dlq', 'requeue', msgId, '--force', '--json'], 15_000),
      (r) => r.code !== 0 || seenBy(r.stdout),
    );
    expect(forced.code, `${forced.stderr} after ${forced.ms} ms`).toBe(0);
    expect(forced.ms).toBeLessThan(10_000);
    expect(JSON.parse(forced.stdout)).toEqual({ requeued: 1, skipped: {} });
    await waitFor('the forced letter refused again', async () =>
      (await badSignatureRefusals()) === 2 ? true : undefined,
    );
    await sleep(1500); // a second pass would have taken it again by now
    expect(await badSignatureRefusals()).toBe(2);
    await oneCopyInDlq();
  });
});
