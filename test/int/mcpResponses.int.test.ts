import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/loadConfig.js';
import { type Daemon, startDaemon } from '../../src/daemon/startDaemon.js';
import { silentLogger } from '../../src/log/logger.js';
import { callTool, connectMcp, initializeBody } from '../support/mcpClient.js';

const accept = 'application/json, text/event-stream';

/**
 * `mcp.responses`: a tool call's result as one JSON body (`json`, the default) or as an event
 * stream (`sse`), read off the wire; and either way the SDK client's calls, the parked drain and
 * the nudges on the session's GET stream work as before.
 */
describe('mcp.responses: how a tool result comes back', () => {
  let home: string | undefined;
  let daemon: Daemon | undefined;

  afterEach(async () => {
    await daemon?.stop();
    if (home) rmSync(home, { recursive: true, force: true });
    daemon = undefined;
    home = undefined;
  });

  async function start(responses?: 'json' | 'sse'): Promise<{ a: string; b: string }> {
    home = mkdtempSync(join(tmpdir(), 'bridge-mcpresponses-'));
    // A first nudge soon, so that the test hears one.
    const file = join(home, 'config.json');
    writeFileSync(
      file,
      JSON.stringify({ remind: { firstMs: 200 }, ...(responses ? { mcp: { responses } } : {}) }),
    );
    const { config } = loadConfig({
      file,
      env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: 'responses', BRIDGE_MCP_PORT: '0' },
    });
    daemon = await startDaemon({ config, logger: silentLogger() });
    const a = (await daemon.gateway.services.registrations.register({ kind: 'main', name: 'a' })).token;
    const b = (await daemon.gateway.services.registrations.register({ kind: 'main', name: 'b' })).token;
    return { a, b };
  }

  /** A raw initialize then a bridge_roster call; the call's content type and body. */
  async function rawToolCall(token: string): Promise<{ type: string | null; body: string }> {
    const url = daemon!.mcpUrl;
    const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept };
    const init = await fetch(url, { method: 'POST', headers, body: initializeBody });
    await init.text();
    const session = init.headers.get('mcp-session-id') as string;
    const call = await fetch(url, {
      method: 'POST',
      headers: { ...headers, 'mcp-session-id': session, 'mcp-protocol-version': '2025-06-18' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 2,
        method: 'tools/call',
        params: { name: 'bridge_roster', arguments: {} },
      }),
    });
    return { type: call.headers.get('content-type'), body: await call.text() };
  }

  it('by default a tool result is one application/json body', async () => {
    const { a } = await start();
    const { type, body } = await rawToolCall(a);
    expect(type).toMatch(/^application\/json/);
    const reply = JSON.parse(body) as { id: number; result: { structuredContent: { entities: unknown[] } } };
    expect(reply.id).toBe(2);
    expect(reply.result.structuredContent.entities.length).toBe(2);
  });

  it('with mcp.responses "sse" it is an event stream carrying the same JSON-RPC answer', async () => {
    const { a } = await start('sse');
    const { type, body } = await rawToolCall(a);
    expect(type).toMatch(/^text\/event-stream/);
    const data = body
      .split('\n')
      .filter((line) => line.startsWith('data: '))
      .map((line) => JSON.parse(line.slice('data: '.length)) as { id?: number });
    expect(data.find((message) => message.id === 2)).toBeDefined();
  });

  it.each(['json', 'sse'] as const)(
    'with %s, a parked drain returns the message sent meanwhile, and the nudge comes on the GET stream',
    async (responses) => {
      const { a, b } = await start(responses);
      const sender = await connectMcp(daemon!.mcpUrl, a);
      const receiver = await connectMcp(daemon!.mcpUrl, b);
      const nudges: unknown[] = [];
      receiver.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => {
        nudges.push(notification.params.data);
      });
      try {
        const drained = callTool(receiver, 'bridge_drain', { wait_ms: 10_000 });
        await new Promise((resolve) => setTimeout(resolve, 100));
        await callTool(sender, 'bridge_send', { to: 'b', text: `hello over ${responses}` });
        const { messages } = (await drained).structuredContent as { messages: Array<{ text: string }> };
        expect(messages.map((message) => message.text)).toEqual([`hello over ${responses}`]);
        await callTool(sender, 'bridge_send', { to: 'b', text: 'held, so nudged' });
        const deadline = Date.now() + 10_000;
        while (nudges.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
        expect(nudges[0]).toMatchObject({ type: 'nudge' });
      } finally {
        await sender.close();
        await receiver.close();
      }
    },
  );
});
