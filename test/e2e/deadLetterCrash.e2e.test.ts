import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlSpec, inboxName } from '../../src/federation/topology.js';
import { parseTrustString } from '../../src/security/publicKey.js';
import { verify } from '../../src/security/signature.js';
import { SignatureHeader } from '../../src/wire/signatureHeaders.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { brokerEnv, removeDeadLettersOf, takeDeadLetters, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';
import { TcpForwarder } from '../support/netns.js';

interface Registered {
  gid: string;
  token: string;
}

/**
 * Issue 34, item 4: a cross-host message dead-lettered while its gateway cannot reach the broker
 * is kept in the event log's outbox, not in memory: B, cut off from the broker (its connection
 * goes through a forwarder the test closes), dead-letters a message from A (its recipient
 * deregistered), is SIGKILLed, and publishes the letter to bridge.dlq after its restart: A's
 * sealed, signed original, which still verifies as A's.
 */
describe('a dead letter made while the broker is away survives a SIGKILL', () => {
  const queues: string[] = [];
  let forwarder: TcpForwarder;
  let port: number;
  let a: GatewayProcess;
  let b: GatewayProcess;
  let mcpA: Client;

  const register = async (g: GatewayProcess, name: string): Promise<Registered> => {
    const registered = await g.register('main', name);
    queues.push(inboxName(registered.gid));
    return registered;
  };

  const brokerState = async (g: GatewayProcess): Promise<string> => {
    return ((await g.status()) as { broker: { state: string } }).broker.state;
  };

  beforeAll(async () => {
    forwarder = await TcpForwarder.start('127.0.0.1', 0, '127.0.0.1', 5672);
    port = forwarder.port;
    a = new GatewayProcess({ hostId: uniqueHostId('dlcA'), env: { ...brokerEnv } });
    b = new GatewayProcess({
      hostId: uniqueHostId('dlcB'),
      env: { ...brokerEnv, BRIDGE_BROKER_URI: `amqp://guest:guest@127.0.0.1:${port}` },
      config: { broker: { retryBaseMs: 100, retryMaxMs: 500 } },
    });
    await Promise.all([a.start(), b.start()]);
    queues.push(controlSpec(a.hostId).name, controlSpec(b.hostId).name);
    const mainA = await register(a, 'mainA');
    await register(b, 'mainB');
    mcpA = await connectMcp(a.mcpUrl, mainA.token);
    await a.waitForInRoster('mainB', b.hostId);
  }, 60_000);

  afterAll(async () => {
    await mcpA?.close().catch(() => {});
    for (const g of [a, b]) await g?.dispose();
    await forwarder?.close();
    await deleteQueues(queues);
    await removeDeadLettersOf([a.hostId, b.hostId]);
  });

  it('B publishes it after its restart: A’s original bytes, sealed, verifying as A’s', async () => {
    const sent = await callTool(mcpA, 'bridge_send', {
      to: `mainB@${b.hostId}`,
      text: 'kept through a crash',
      wait_for: 'queued',
    });
    expect(sent.isError, JSON.stringify(sent.content)).toBeFalsy();
    const msgId = (sent.structuredContent as { msgId: string }).msgId;

    await forwarder.close();
    await waitFor('B cut off from the broker', async () =>
      (await brokerState(b)) === 'connected' ? undefined : true,
    );
    const gone = await b.cli(['deregister', 'mainB']);
    expect(gone.code, gone.stderr).toBe(0);
    await waitFor('B dead-lettered it', () =>
      b.log.includes('message dead-lettered; its body is kept for the operator') ? true : undefined,
    );
    await b.kill9();

    forwarder = await TcpForwarder.start('127.0.0.1', port, '127.0.0.1', 5672);
    await b.start();
    const [letter] = await waitFor(
      'the letter in bridge.dlq',
      async () => {
        const letters = await takeDeadLetters(
          (headers, id) => id === msgId && headers['x-bridge-host'] === b.hostId,
        );
        return letters.length > 0 ? letters : undefined;
      },
      30_000,
    );
    expect(letter?.headers['x-bridge-reason']).toBe('recipient-gone');
    expect(letter?.headers[SignatureHeader.signer]).toBe(a.hostId);
    const signingKey = parseTrustString(a.publicKey).find((key) => key.startsWith('ed25519:')) as string;
    expect(
      verify(letter?.content as Buffer, String(letter?.headers[SignatureHeader.signature]), [signingKey]),
    ).toBe(true);
    expect(letter?.content.includes('kept through a crash')).toBe(false);
    expect(JSON.parse(String(letter?.content))).toMatchObject({ v: '2.0', msgId });
  }, 90_000);
});
