import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentHostHello } from '../../src/panes/agentHostInjector.js';
import { type AgentHome, prepareAgentHome, runTmux } from '../support/agentTuis.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { type FakeModelApi, startFakeModelApi } from '../support/fakeModelApi.js';
import { brokerEnv, removeDeadLettersOf } from '../support/federation.js';
import { cliPath, GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp, type Registered } from '../support/mcpClient.js';
import { waitFor } from '../support/waitFor.js';

interface Sent {
  msgId: string;
  stage: string | null;
}

/**
 * A worker that takes its prompts over its agent's own protocol (issue 33): Gemini CLI from the
 * npm registry as `gemini --acp`, run by `agentbridge agent-host` in a real tmux pane (the pane
 * mirrors the session), registered with `--agent-socket` on gateway B; a main on gateway A (a
 * separate process, federated through the broker) sends over MCP with the official SDK client.
 * The fake model API records what reached the model.
 */
describe('an ACP worker (Gemini CLI over ACP behind an agent host) on another host', () => {
  let dir: string;
  let tmuxSocket: string;
  let agentSocket: string;
  let api: FakeModelApi;
  let home: AgentHome;
  let a: GatewayProcess;
  let b: GatewayProcess;
  let lead: Client;
  const queues: string[] = [];
  const marker = () => join(dir, 'acp-PWNED');

  const send = async (text: string, extra: Record<string, unknown> = {}): Promise<Sent> => {
    const result = await callTool(lead, 'bridge_send', { to: `gemini@${b.hostId}`, text, ...extra }, 180_000);
    expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
    return result.structuredContent as unknown as Sent;
  };
  const status = async (msgId: string) => {
    const result = await callTool(lead, 'bridge_status', { msg_id: msgId });
    expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
    return result.structuredContent as { stage: string | null };
  };
  const promptsWith = (msgId: string): string[] => api.prompts().filter((p) => p.includes(msgId));
  /** The delivery's steps on B and how B recorded its submission. */
  const deliveryOnB = (msgId: string) => {
    const db = new Database(join(b.home, 'events.db'), { readonly: true });
    try {
      const rows = db
        .prepare(
          "SELECT to_state, data FROM events WHERE msg_id = ? AND actor_kind = 'delivery' ORDER BY seq",
        )
        .all(msgId) as Array<{ to_state: string; data: string | null }>;
      return { trail: rows.map((r) => r.to_state), events: rows.map((r) => r.data ?? '').join('\n') };
    } finally {
      db.close();
    }
  };
  const mirror = () => runTmux(tmuxSocket, ['capture-pane', '-p', '-J', '-t', 'acp', '-S', '-200']);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'bridge-acp-'));
    tmuxSocket = join(dir, 'tmux.sock');
    agentSocket = join(dir, 'gemini.sock');
    api = await startFakeModelApi({
      command: (prompt) => (/run the command (\w+)/.test(prompt) ? `touch ${marker()}` : undefined),
      replyDelayMs: (prompt) => (prompt.includes('take your time') ? 4_000 : 0),
    });
    home = await prepareAgentHome('gemini', { apiUrl: api.url });
    const federated = (prefix: string) =>
      new GatewayProcess({
        hostId: uniqueHostId(prefix),
        env: { ...brokerEnv },
        config: { broker: { heartbeatMs: 300 } },
      });
    a = federated('acp-a');
    b = federated('acp-b');
    // The host in a pane of its own, with the agent's whole environment and nothing else.
    const env = Object.entries(home.env).map(([key, value]) => `${key}=${value}`);
    const command = [
      'env',
      '-i',
      ...env,
      process.execPath,
      cliPath,
      'agent-host',
      '--socket',
      agentSocket,
      '--cwd',
      home.cwd,
      '--',
      home.bin,
      '--acp',
    ];
    await Promise.all([
      runTmux(tmuxSocket, ['new-session', '-d', '-s', 'acp', '-x', '200', '-y', '50', ...command]),
      a.start(),
      b.start(),
    ]);
    await waitFor(
      'the agent host to answer',
      async () => (await agentHostHello(agentSocket).catch(() => undefined)) ?? undefined,
      90_000,
    );
    const worker = JSON.parse(
      (
        await b.cli([
          'register',
          '--kind',
          'worker',
          '--name',
          'gemini',
          '--agent-socket',
          agentSocket,
          '--json',
        ])
      ).stdout,
    ) as Registered;
    queues.push(`agent.${worker.gid}.inbox`);
    const main = JSON.parse(
      (await a.cli(['register', '--kind', 'main', '--name', 'lead', '--json'])).stdout,
    ) as Registered;
    queues.push(`agent.${main.gid}.inbox`);
    lead = await connectMcp(a.mcpUrl, main.token);
    await a.waitForInRoster('gemini', b.hostId);
  }, 180_000);

  afterAll(async () => {
    await lead?.close().catch(() => undefined);
    if (tmuxSocket) await runTmux(tmuxSocket, ['kill-server']).catch(() => undefined);
    await home?.remove();
    await a?.dispose();
    await b?.dispose();
    await api?.close();
    await deleteQueues(queues);
    await removeDeadLettersOf([a?.hostId, b?.hostId].filter((h): h is string => h !== undefined));
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('a message from a main on A reaches the model exactly once; A records submitted, B says the agent acknowledged it over ACP; the mirror pane shows prompt and reply', async () => {
    const sent = await send('say hello over acp', { wait_for: 'submitted' });
    expect(sent.stage, JSON.stringify(deliveryOnB(sent.msgId))).toBe('submitted');
    await waitFor('the model to get it', () => (promptsWith(sent.msgId).length > 0 ? true : undefined));
    await sleep(1_000); // a second hand-over would reach the model now
    expect(promptsWith(sent.msgId)).toHaveLength(1);
    expect(promptsWith(sent.msgId)[0]).toContain('say hello over acp');
    expect((await status(sent.msgId)).stage).toBe('submitted');
    const { trail, events } = deliveryOnB(sent.msgId);
    expect(trail).toEqual(['pending', 'injecting', 'typed', 'submitted', 'acked']);
    expect(events).toContain('acknowledged the prompt (ACP)');
    const pane = await waitFor('the mirror to show the reply', async () => {
      const screen = await mirror();
      return screen.includes(`▶ [bridge SEND from lead@${a.hostId} msg ${sent.msgId}] say hello over acp`) &&
        screen.includes('◀ ')
        ? screen
        : undefined;
    });
    expect(pane).toContain('over ACP, session');
  });

  it('a message for an agent in a turn is held until the turn ends, then taken once', async () => {
    // The model holds its answer to this one for 4 s: the agent is in its turn meanwhile.
    const long = await send('take your time with this one', { wait_for: 'queued' });
    await waitFor('the model to get the long one', () =>
      promptsWith(long.msgId).length > 0 ? true : undefined,
    );
    const held = await send('after the long one', { wait_for: 'queued' });
    await sleep(1_500);
    expect((await status(held.msgId)).stage).toBe('queued');
    expect(promptsWith(held.msgId)).toHaveLength(0);
    await waitFor(
      'the held message to be submitted',
      async () => ((await status(held.msgId)).stage === 'submitted' ? true : undefined),
      30_000,
    );
    await waitFor('the model to get it', () => (promptsWith(held.msgId).length > 0 ? true : undefined));
    await sleep(1_000);
    expect(promptsWith(held.msgId)).toHaveLength(1);
    expect(promptsWith(long.msgId)).toHaveLength(1);
  });

  it('a permission request is the owner’s: nothing answers it, the command does not run, and messages sent meanwhile are held', async () => {
    const asking = await send('please run the command now', { wait_for: 'submitted' });
    expect(asking.stage).toBe('submitted');
    await waitFor('the mirror to show the permission request', async () =>
      (await mirror()).includes('asks for a permission') ? true : undefined,
    );
    const held = await send('a message while the permission is asked', { wait_for: 'queued' });
    await sleep(3_000);
    expect(existsSync(marker())).toBe(false);
    expect((await status(held.msgId)).stage).toBe('queued');
    expect(promptsWith(held.msgId)).toHaveLength(0);
    expect(deliveryOnB(held.msgId).events).toContain('asks for a permission');
  });
});
