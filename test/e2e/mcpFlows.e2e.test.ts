import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeHerdr, startFakeHerdr } from '../support/fakeHerdr.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';
import { startStandInAgent, startTmuxServer, type TmuxTestServer } from '../support/tmux.js';
import { waitFor } from '../support/waitFor.js';

interface Registered {
  gid: string;
  token: string;
  name: string;
  host: string;
  kind: string;
}

describe('single-host flows through MCP (gateway, tmux and clients as separate processes)', () => {
  let gateway: GatewayProcess;
  let tmux: TmuxTestServer;
  let herdr: FakeHerdr;
  const clients: Client[] = [];

  const register = async (args: string[]): Promise<Registered> => {
    const result = await gateway.cli(['register', ...args, '--json']);
    expect(result.code, result.stderr || result.stdout).toBe(0);
    return JSON.parse(result.stdout) as Registered;
  };
  const client = async (token: string): Promise<Client> => {
    const c = await connectMcp(gateway.mcpUrl, token);
    clients.push(c);
    return c;
  };

  beforeAll(async () => {
    tmux = await startTmuxServer();
    herdr = await startFakeHerdr();
    gateway = new GatewayProcess({ config: { herdr: { socketPath: herdr.socketPath } } });
    await gateway.start();
  });

  afterAll(async () => {
    for (const c of clients) await c.close().catch(() => {});
    await gateway?.dispose();
    await tmux?.kill();
    await herdr?.close();
  });

  it('a main sends a task to a worker in a tmux pane; its open send returns the worker’s reply', async () => {
    const pane = await tmux.newPane('sleep 600');
    const worker = await register([
      '--kind',
      'worker',
      '--name',
      'coder',
      '--tmux',
      pane,
      '--tmux-socket',
      tmux.socket,
    ]);
    await startStandInAgent(tmux, pane, gateway.mcpUrl, worker.token);

    const main = await register(['--kind', 'main', '--name', 'lead']);
    const lead = await client(main.token);
    const result = await callTool(lead, 'bridge_send', {
      to: 'coder',
      text: 'refactor the parser',
      wait_ms: 30_000,
    });
    expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
    const sent = result.structuredContent as {
      msgId: string;
      reply: { text: string; from: { name: string } };
    };
    expect(sent.reply.text).toBe('done: refactor the parser');
    expect(sent.reply.from.name).toBe('coder');
    expect(await tmux.capture(pane)).toContain(`msg ${sent.msgId}] refactor the parser`);

    // A second main without an open send pulls the reply with bridge_drain.
    const second = await register(['--kind', 'main', '--name', 'reviewer']);
    const reviewer = await client(second.token);
    const queued = await callTool(reviewer, 'bridge_send', {
      to: `coder@${gateway.hostId}`,
      text: 'review PR 7',
    });
    expect(queued.isError).toBeFalsy();
    const queuedId = (queued.structuredContent as { msgId: string }).msgId;
    const drained = await waitFor('the reply in reviewer’s inbox', async () => {
      const r = await callTool(reviewer, 'bridge_drain', {});
      const messages = (r.structuredContent as { messages: Array<{ text: string; inReplyTo?: string }> })
        .messages;
      return messages.length > 0 ? messages : undefined;
    });
    expect(drained).toHaveLength(1);
    expect(drained[0]).toMatchObject({ text: 'done: review PR 7', inReplyTo: queuedId });
    // Handed over once: a second drain is empty.
    const again = await callTool(reviewer, 'bridge_drain', {});
    expect((again.structuredContent as { messages: unknown[] }).messages).toEqual([]);

    const roster = await callTool(lead, 'bridge_roster', {});
    const names = (roster.structuredContent as { entities: Array<{ name: string }> }).entities.map(
      (e) => e.name,
    );
    expect(names).toEqual(expect.arrayContaining(['coder', 'lead', 'reviewer']));
  });

  it('bridge_drain with wait_ms is a long poll: it returns a message the moment it is held; a call its client gave up takes nothing', async () => {
    const [poller, sender] = [
      await register(['--kind', 'main', '--name', 'poller']),
      await register(['--kind', 'main', '--name', 'pinger']),
    ];
    const [pollerClient, senderClient] = [await client(poller.token), await client(sender.token)];
    const messagesOf = (r: { structuredContent?: Record<string, unknown> }) =>
      (r.structuredContent as { messages: Array<{ text: string }> }).messages.map((m) => m.text);

    // Parked with nothing held; the send 300 ms later ends it, long before its 30 s wait.
    const started = Date.now();
    const parked = callTool(pollerClient, 'bridge_drain', { wait_ms: 30_000 });
    await sleep(300);
    await callTool(senderClient, 'bridge_send', { to: 'poller', text: 'ping 1' });
    expect(messagesOf(await parked)).toEqual(['ping 1']);
    expect(Date.now() - started).toBeLessThan(10_000);

    // With nothing arriving it returns empty once its wait is over.
    const waited = Date.now();
    expect(messagesOf(await callTool(pollerClient, 'bridge_drain', { wait_ms: 400 }))).toEqual([]);
    expect(Date.now() - waited).toBeGreaterThanOrEqual(350);

    // A parked call the client gives up (its request cancelled): the message sent after that
    // is not handed to the dead call, it waits for the next drain.
    const giveUp = new AbortController();
    const abandoned = callTool(pollerClient, 'bridge_drain', { wait_ms: 30_000 }, 60_000, giveUp.signal);
    await sleep(300);
    giveUp.abort();
    await expect(abandoned).rejects.toThrow();
    await sleep(300);
    await callTool(senderClient, 'bridge_send', { to: 'poller', text: 'ping 2' });
    expect(messagesOf(await callTool(pollerClient, 'bridge_drain', { wait_ms: 30_000 }))).toEqual(['ping 2']);

    // The CLI's drain has it too, over the admin socket.
    const cliDrain = gateway.cli(['drain', '--wait', '30000', '--json'], { BRIDGE_TOKEN: poller.token });
    await sleep(500);
    await callTool(senderClient, 'bridge_send', { to: 'poller', text: 'ping 3' });
    const printed = await cliDrain;
    expect(printed.code, printed.stderr || printed.stdout).toBe(0);
    expect((JSON.parse(printed.stdout) as Array<{ text: string }>).map((m) => m.text)).toEqual(['ping 3']);
  });

  it('holds a message for a herdr pane while its agent is working and types it when it turns idle', async () => {
    herdr.addPane('w9-1', { status: 'working' });
    // A pane herdr does not have is refused at registration, with herdr's reason.
    const unknown = await gateway.cli([
      'register',
      '--kind',
      'worker',
      '--name',
      'nope',
      '--herdr-pane',
      'w9-404',
    ]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/PANE_UNAVAILABLE: herdr has no pane w9-404 .*register the agent again/);
    await register(['--kind', 'worker', '--name', 'herdr-worker', '--herdr-pane', 'w9-1']);
    const main = await register(['--kind', 'main', '--name', 'herdr-lead']);
    const lead = await client(main.token);

    await waitFor('the worker to read as busy', async () => {
      const roster = await callTool(lead, 'bridge_roster', {});
      const entities = (roster.structuredContent as { entities: Array<{ name: string; status: string }> })
        .entities;
      return entities.find((e) => e.name === 'herdr-worker' && e.status === 'active.busy');
    });
    const sent = await callTool(lead, 'bridge_send', { to: 'herdr-worker', text: 'run the tests' });
    expect(sent.isError).toBeFalsy();
    const msgId = (sent.structuredContent as { msgId: string }).msgId;

    await sleep(1_000);
    expect(herdr.typed('w9-1')).toEqual([]); // never typed into a working agent (R-DL2)

    herdr.setStatus('w9-1', 'blocked');
    await sleep(500);
    expect(herdr.typed('w9-1')).toEqual([]); // nor into an approval prompt

    herdr.setStatus('w9-1', 'idle');
    // herdr's agent.prompt types it and presses Enter itself, after its pause: submitted.
    await waitFor('the message submitted into the herdr pane', async () => {
      const status = await callTool(lead, 'bridge_status', { msg_id: msgId });
      return (status.structuredContent as { stage: string | null }).stage === 'submitted' ? true : undefined;
    });
    const typed = herdr.inputs('w9-1');
    expect(typed).toHaveLength(1);
    expect(typed[0]?.method).toBe('agent.prompt');
    expect(typed[0]?.text).toContain(`msg ${msgId}] run the tests`);
    await waitFor('herdr to press Enter', () => (typed[0]?.keys.includes('Enter') ? true : undefined));
    expect(typed[0]?.keys).toEqual(['Enter']);
  });
});
