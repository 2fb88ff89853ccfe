import { randomUUID } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { controlSpec, inboxName } from '../../src/federation/topology.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { brokerEnv, removeDeadLettersOf, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';

const streamed = Number(process.env.BRIDGE_ROTATION_MESSAGES ?? 2_000);
const heartbeatMs = 300;
// The overlap keys retire waits out is heartbeatMs × presenceTtlBeats: 6 s, so that the retire
// right after the rotation is refused however long a CLI process takes to start on a busy
// machine (at 3 beats, 0.9 s, it was not always: a CLI start under load takes longer).
const presenceTtlBeats = 20;

interface Registered {
  gid: string;
  token: string;
}

interface Drained {
  msgId: string;
  text: string;
}

/**
 * Issue 34, item 5: a gateway rotates its sealing key under a stream of messages sealed to it,
 * then retires the old key after the overlap; nothing is lost or doubled. Letters held for it in
 * the broker, sealed to the old key while it was down, open after the rotation; a dead letter
 * sealed to the old key is listed and requeued (and judged again on its merits, not refused as
 * unopenable). Peers learn the new key from its PRESENCE: no `trust add` on A.
 */
describe('sealing key rotation under a stream', () => {
  const queues: string[] = [];
  let a: GatewayProcess;
  let b: GatewayProcess;
  let mainA: Registered;
  let mainB: Registered;
  let mcpA: Client;
  let mcpB: Client;

  const register = async (g: GatewayProcess, name: string): Promise<Registered> => {
    const registered = await g.register('main', name);
    queues.push(inboxName(registered.gid));
    return registered;
  };

  const send = async (text: string): Promise<string> => {
    const result = await callTool(mcpA, 'bridge_send', { to: `mainB@${b.hostId}`, text });
    expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
    return (result.structuredContent as { msgId: string }).msgId;
  };

  const drainOnce = async (): Promise<Drained[]> => {
    const result = await callTool(mcpB, 'bridge_drain', { max: 500 });
    return (result.structuredContent as { messages: Drained[] }).messages;
  };

  const keys = async (args: string[]) => {
    const result = await b.cli(['keys', ...args, '--json']);
    return { code: result.code, out: result.stdout, err: result.stderr };
  };

  /** B's refusals of messages from the broker, by reason (none expected in the stream). */
  const refusals = () =>
    b.log
      .split('\n')
      .filter((line) => line.includes('refused a message from the broker'))
      .map((line) => (JSON.parse(line) as { reason: string }).reason);

  beforeAll(async () => {
    const config = { broker: { heartbeatMs, presenceTtlBeats } };
    a = new GatewayProcess({ hostId: uniqueHostId('rotA'), env: { ...brokerEnv }, config });
    b = new GatewayProcess({ hostId: uniqueHostId('rotB'), env: { ...brokerEnv }, config });
    await Promise.all([a.start(), b.start()]);
    queues.push(controlSpec(a.hostId).name, controlSpec(b.hostId).name);
    mainA = await register(a, 'mainA');
    mainB = await register(b, 'mainB');
    mcpA = await connectMcp(a.mcpUrl, mainA.token);
    mcpB = await connectMcp(b.mcpUrl, mainB.token);
    await a.waitForInRoster('mainB', b.hostId);
  }, 120_000);

  afterAll(async () => {
    for (const c of [mcpA, mcpB]) await c?.close().catch(() => {});
    for (const g of [a, b]) await g?.dispose();
    await deleteQueues(queues);
    await removeDeadLettersOf([a.hostId, b.hostId]);
  });

  it(`${streamed} messages while B rotates, then retires the old key: 0 lost, 0 doubled, texts intact`, async () => {
    const sent = new Map<string, string>();
    const received = new Map<string, string>();
    let doubled = 0;
    let draining = true;
    let stopped = false;
    const drainer = (async () => {
      while (!stopped && (draining || received.size < sent.size)) {
        for (const m of await drainOnce()) {
          if (received.has(m.msgId)) doubled++;
          received.set(m.msgId, m.text);
        }
      }
    })();
    let rotatedAt = -1;
    let retiredAt = -1;
    let old = '';
    // The drain loop ends with the test, however it ends.
    onTestFinished(() => {
      draining = false;
      stopped = true;
    });
    // Eight sends in flight at a time; the rotation and the retire come between two batches.
    const inFlight = 8;
    for (let i = 0; i < streamed; i += inFlight) {
      const texts = Array.from(
        { length: Math.min(inFlight, streamed - i) },
        (_, j) => `stream ${i + j} ${randomUUID()}`,
      );
      const ids = await Promise.all(texts.map((text) => send(text)));
      for (const [j, id] of ids.entries()) sent.set(id, texts[j] as string);
      if (i === Math.floor(streamed / 4 / inFlight) * inFlight) {
        const rotated = await keys(['rotate']);
        expect(rotated.code, rotated.err).toBe(0);
        old = (JSON.parse(rotated.out) as { previousSealingKeyId: string }).previousSealingKeyId;
        rotatedAt = i;
        // Refused within the overlap: peers may still seal to the old key.
        const early = await keys(['retire', old]);
        expect(early.code).not.toBe(0);
        expect(early.out + early.err).toMatch(/PRESENCE/);
      }
      if (i === Math.floor((streamed * 3) / 4 / inFlight) * inFlight) {
        const retired = await waitFor(
          'the retire taken after the overlap',
          async () => {
            const result = await keys(['retire', old]);
            return result.code === 0 ? result : undefined;
          },
          20_000,
        );
        expect(JSON.parse(retired.out)).toMatchObject({ retired: [old] });
        retiredAt = i;
      }
    }
    draining = false;
    await waitFor('every message drained', () => (received.size >= sent.size ? true : undefined), 60_000);
    await drainer;
    expect(rotatedAt).toBeGreaterThan(0);
    expect(retiredAt).toBeGreaterThan(rotatedAt);
    expect([...sent.keys()].filter((id) => !received.has(id))).toEqual([]);
    expect(doubled).toBe(0);
    expect([...sent].filter(([id, text]) => received.get(id) !== text)).toEqual([]);
    expect(refusals()).toEqual([]);
  }, 300_000);

  it('letters held while B was down, sealed to its old key, open after a rotation; a dead letter sealed to it is listed, opened and requeued', async () => {
    // A dead letter sealed to B's key of now: an ask that expires unanswered on B.
    const asked = await callTool(mcpA, 'bridge_ask', {
      to: `mainB@${b.hostId}`,
      question: 'expires sealed to the old key',
      timeout_ms: 1_000,
    });
    const askId = (asked.structuredContent as { error: { details: { askId: string } } }).error.details.askId;
    const letterOf = async () => {
      const list = await b.cli(['dlq', 'list', '--json']);
      const letters = JSON.parse(list.stdout) as Array<{
        msgId: string;
        reason: string;
        body: string;
        sealed?: { opened: boolean; why?: string };
      }>;
      return letters.find((l) => l.msgId === askId);
    };
    await waitFor('its dead letter listed', async () =>
      (await letterOf())?.reason === 'expired' ? true : undefined,
    );
    // B down: what A sends waits in B's inbox, sealed to B's key of now.
    await b.stop();
    const held: Array<[string, string]> = [];
    for (let i = 0; i < 20; i++) held.push([await send(`held ${i}`), `held ${i}`]);
    const rotated = await keys(['rotate']);
    expect(rotated.code, rotated.err).toBe(0);
    await b.start();
    mcpB = await connectMcp(b.mcpUrl, mainB.token);
    const got = new Map<string, string>();
    await waitFor('the held letters', async () => {
      for (const m of await drainOnce()) got.set(m.msgId, m.text);
      return held.every(([id]) => got.has(id)) ? true : undefined;
    });
    expect(held.filter(([id, text]) => got.get(id) !== text)).toEqual([]);
    // The dead letter sealed to the old key: listed, and opened with the key B still keeps.
    const opened = await waitFor('the letter listed again', letterOf);
    expect(opened.sealed).toMatchObject({ opened: true });
    expect(opened.body).toContain('expires sealed to the old key');
    // Retired: still listed (its readable fields), its text no longer opens here; requeued all
    // the same, and refused again for what it is.
    const retired = await keys(['retire', '--force']);
    expect(retired.code, retired.err).toBe(0);
    const closed = await waitFor('the letter listed after the retire', async () => {
      const letter = await letterOf();
      return letter?.sealed?.opened === false ? letter : undefined;
    });
    expect(closed.sealed?.why).toMatch(/unknown-sealing-key/);
    expect(closed.body).not.toContain('expires sealed to the old key');
    const requeued = await b.cli(['dlq', 'requeue', askId, '--json']);
    expect(requeued.code, requeued.stderr).toBe(0);
    expect(JSON.parse(requeued.stdout)).toMatchObject({ requeued: 1 });
  }, 120_000);
});
