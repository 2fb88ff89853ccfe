import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, GatewayProcess, runCli } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';

function errorText(result: { content?: unknown }): string {
  const content = result.content as Array<{ text?: string }> | undefined;
  return content?.map((c) => c.text ?? '').join('\n') ?? '';
}

describe('bad input gets a clear error and loses nothing', () => {
  let gateway: GatewayProcess;
  let main: Client;
  let inboxToken: string;
  let acceptedMsgId: string;

  beforeAll(async () => {
    // herdr's socket is a path where nothing answers, whatever runs on this machine.
    gateway = new GatewayProcess({
      config: { limits: { maxTextBytes: 1024 }, herdr: { socketPath: '/tmp/bridge-no-herdr-here.sock' } },
    });
    await gateway.start();
    const mainReg = JSON.parse(
      (await gateway.cli(['register', '--kind', 'main', '--name', 'boss', '--json'])).stdout,
    );
    const inboxReg = JSON.parse(
      (await gateway.cli(['register', '--kind', 'main', '--name', 'inbox', '--json'])).stdout,
    );
    inboxToken = inboxReg.token;
    main = await connectMcp(gateway.mcpUrl, mainReg.token);
    // Accepted before any bad input: it must still be there at the end.
    const sent = await callTool(main, 'bridge_send', { to: 'inbox', text: 'keep me' });
    acceptedMsgId = (sent.structuredContent as { msgId: string }).msgId;
  });

  afterAll(async () => {
    await main?.close().catch(() => {});
    await gateway?.dispose();
  });

  it('refuses a wrong bearer token with 401 and says what to send', async () => {
    await expect(connectMcp(gateway.mcpUrl, 'brt_not-a-token')).rejects.toThrow(
      /UNAUTHORIZED: .*Authorization: Bearer/,
    );
    const res = await fetch(gateway.mcpUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: '{}',
    });
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
  });

  it('names an unknown recipient and points at the roster', async () => {
    const result = await callTool(main, 'bridge_send', { to: 'nobody', text: 'hi' });
    expect(result.isError).toBe(true);
    expect(errorText(result)).toMatch(/^UNKNOWN_RECIPIENT: unknown recipient "nobody".*bridge_roster/);
    expect(result.structuredContent).toMatchObject({ error: { code: 'UNKNOWN_RECIPIENT' } });
  });

  it('refuses oversized text with the size, the limit and the config key', async () => {
    const result = await callTool(main, 'bridge_send', { to: 'inbox', text: 'x'.repeat(2000) });
    expect(result.isError).toBe(true);
    expect(errorText(result)).toMatch(
      /^TEXT_TOO_LARGE: text is 2000 bytes; the limit is 1024 \(limits\.maxTextBytes\)/,
    );
  });

  it('refuses malformed tool arguments naming the field', async () => {
    const missing = await callTool(main, 'bridge_send', { to: 'inbox' });
    expect(missing.isError).toBe(true);
    expect(errorText(missing)).toMatch(/Input validation error.*text/s);
    const wrongType = await callTool(main, 'bridge_send', { to: 'inbox', text: 'x', wait_ms: 'soon' });
    expect(wrongType.isError).toBe(true);
    expect(errorText(wrongType)).toMatch(/Input validation error.*wait_ms/s);
    const badReply = await callTool(main, 'bridge_reply', {
      to: 'inbox',
      text: 'x',
      in_reply_to: 'not-a-uuid',
    });
    expect(errorText(badReply)).toMatch(/Input validation error.*in_reply_to/s);
  });

  it('refuses a spawn on another host without a broker, a spawn naming a command, and an unknown profile', async () => {
    const remote = await callTool(main, 'bridge_spawn', { host: 'h', profile: 'p', brief: 'b' });
    expect(remote.isError).toBe(true);
    expect(errorText(remote)).toMatch(/^NOT_AVAILABLE: h is another host and this gateway runs single-host/);
    const smuggled = await callTool(main, 'bridge_spawn', {
      host: 'h',
      profile: 'p',
      brief: 'b',
      command: 'sh',
    });
    expect(errorText(smuggled)).toMatch(/^SPAWN_REFUSED: bridge_spawn takes a profile name, not command/);
    const status = await gateway.cli(['status', '--json']);
    const host = (JSON.parse(status.stdout) as { host: string }).host;
    const unknown = await callTool(main, 'bridge_spawn', { host, profile: 'nope', brief: 'b' });
    expect(errorText(unknown)).toMatch(/^UNKNOWN_PROFILE: .* has no profile "nope"/);
  });

  it('refuses a request body that is not JSON', async () => {
    const res = await fetch(gateway.mcpUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${inboxToken}` },
      body: '{nope',
    });
    expect(res.status).toBe(400);
    expect(await res.text()).toMatch(/BAD_REQUEST: request body is not JSON/);
  });

  it('gives CLI errors that say what to do', async () => {
    const unknown = await gateway.cli(['frobnicate']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/unknown command "frobnicate"; see `agentbridge help`/);
    const noKind = await gateway.cli(['register', '--name', 'x']);
    expect(noKind.stderr).toMatch(/register needs --kind/);
    const badKind = await gateway.cli(['register', '--kind', 'robot', '--name', 'x']);
    expect(badKind.stderr).toMatch(/BAD_REQUEST: bad request: kind/);
    const noPane = await gateway.cli([
      'register',
      '--kind',
      'worker',
      '--name',
      'w',
      '--tmux',
      '%999',
      '--tmux-socket',
      '/tmp/no-such-tmux.sock',
    ]);
    expect(noPane.code).toBe(1);
    expect(noPane.stderr).toMatch(/PANE_UNAVAILABLE: tmux pane %999 not found/);
    // No herdr: refused at once, not a worker whose messages wait behind a roster that reads busy.
    const noHerdr = await gateway.cli([
      'register',
      '--kind',
      'worker',
      '--name',
      'hw',
      '--herdr-pane',
      'w1-1',
    ]);
    expect(noHerdr.code).toBe(1);
    expect(noHerdr.stderr).toMatch(
      /PANE_UNAVAILABLE: herdr does not answer at \/tmp\/bridge-no-herdr-here\.sock .*: start herdr, or give the gateway herdr's socket/,
    );
    expect(await gateway.roster()).not.toContainEqual(expect.objectContaining({ name: 'hw' }));
    const taken = await gateway.cli(['register', '--kind', 'main', '--name', 'boss']);
    expect(taken.stderr).toMatch(/NAME_TAKEN: an entity named "boss" is already registered/);
    const noToken = await gateway.cli(['send', 'inbox', 'hello'], { BRIDGE_TOKEN: '' });
    expect(noToken.stderr).toMatch(/UNAUTHORIZED: no identity: set BRIDGE_TOKEN/);
    const badToken = await gateway.cli(['send', 'inbox', 'hello', '--token', 'brt_wrong']);
    expect(badToken.stderr).toMatch(/UNAUTHORIZED: unknown token/);
  });

  it('keeps running and has lost nothing that was accepted', async () => {
    expect(await gateway.healthy()).toBe(true);
    const drained = await gateway.cli(['drain', '--json'], { BRIDGE_TOKEN: inboxToken });
    const messages = JSON.parse(drained.stdout) as Array<{ msgId: string; text: string }>;
    expect(messages).toEqual([expect.objectContaining({ msgId: acceptedMsgId, text: 'keep me' })]);
  });
});

describe('bad configuration', () => {
  it('names the bad key and exits non-zero', async () => {
    const home = mkdtempSync(join(tmpdir(), 'bridge-badcfg-'));
    try {
      const file = join(home, 'bridge.json');
      writeFileSync(file, JSON.stringify({ mcp: { port: 'seven' }, brokr: {} }));
      const result = await runCli(['start', '--config', file], { BRIDGE_HOME: home });
      expect(result.code).toBe(2);
      expect(result.stderr).toMatch(
        /BAD_CONFIG: bad configuration in config file .*bridge\.json.*mcp\.port: .*expected number/,
      );
      expect(result.stderr).toMatch(/unknown key brokr/);
      const badEnv = await runCli(['start'], { BRIDGE_HOME: home, BRIDGE_MCP_PORT: 'abc' });
      expect(badEnv.stderr).toMatch(/BAD_CONFIG: BRIDGE_MCP_PORT=abc is not a whole number/);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('refuses a second gateway on the same home and on a taken port, clearly', async () => {
    const first = new GatewayProcess();
    await first.start();
    try {
      const sameHome = await runCli(['start'], {
        ...first.cliEnv(),
        BRIDGE_MCP_PORT: String(await freePort()),
      });
      expect(sameHome.code).not.toBe(0);
      expect(sameHome.stderr).toMatch(/another gateway is running with this home/);
      const other = mkdtempSync(join(tmpdir(), 'bridge-port-'));
      const samePort = await runCli(['start'], { BRIDGE_HOME: other, BRIDGE_MCP_PORT: String(first.port) });
      expect(samePort.stderr).toMatch(/MCP port \d+ on 127\.0\.0\.1 is in use/);
      rmSync(other, { recursive: true, force: true });
      expect(await first.healthy()).toBe(true);
    } finally {
      await first.dispose();
    }
  });
});
