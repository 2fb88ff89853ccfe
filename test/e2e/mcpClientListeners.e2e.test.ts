import { getEventListeners } from 'node:events';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';

/**
 * The SDK's Streamable HTTP client transport hands one AbortSignal to every request it makes;
 * the tests' MCP client must not leave a listener on it per call (a CI run printed ~950
 * `MaxListenersExceededWarning: … 1501 abort listeners added to [AbortSignal]` lines from the
 * test worker, whose long streams make thousands of calls on one client).
 */
describe('the test support’s MCP client over many calls', () => {
  let gateway: GatewayProcess;
  let client: Client | undefined;

  beforeAll(async () => {
    gateway = new GatewayProcess();
    await gateway.start();
  });

  afterAll(async () => {
    await client?.close();
    await gateway?.dispose();
  });

  it('300 tool calls on one client leave no abort listener per call on its transport’s signal or a long-lived call signal (MaxListenersExceededWarning)', async () => {
    const registered = await gateway.cli(['register', '--kind', 'main', '--name', 'many-calls', '--json']);
    expect(registered.code, registered.stderr || registered.stdout).toBe(0);
    client = await connectMcp(gateway.mcpUrl, (JSON.parse(registered.stdout) as { token: string }).token);
    // The signal the transport passes to each fetch (SDK 1.32: private, aborted on close).
    const signal = (client.transport as unknown as { _abortController?: AbortController })._abortController
      ?.signal;
    expect(signal, 'the SDK transport’s shared signal (renamed in this SDK version?)').toBeInstanceOf(
      AbortSignal,
    );
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    // A signal alive as long as the client, given to every call (the chaos suite's "connection
    // lost"): the SDK adds a listener to a call's signal and never removes it.
    const lost = new AbortController();
    let most = 0;
    let mostOnLost = 0;
    try {
      // A listener left per call shows from the 11th (Node's MaxListeners default is 10).
      for (let i = 0; i < 300; i++) {
        const result = await callTool(client, 'bridge_drain', {}, 60_000, lost.signal);
        expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
        most = Math.max(most, getEventListeners(signal as AbortSignal, 'abort').length);
        mostOnLost = Math.max(mostOnLost, getEventListeners(lost.signal, 'abort').length);
      }
    } finally {
      process.off('warning', onWarning);
    }
    // The standalone GET stream holds one link while it is open; each call's goes with its response.
    expect(most, 'abort listeners on the transport’s signal, at most, after a call').toBeLessThanOrEqual(2);
    expect(mostOnLost, 'abort listeners on the calls’ long-lived signal, at most, after a call').toBe(0);
    expect(warnings.filter((w) => w.startsWith('MaxListenersExceededWarning'))).toEqual([]);
  });
});
