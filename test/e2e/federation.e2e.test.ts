import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { brokerEnv, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';
import { startStandInAgent, startTmuxServer, type TmuxTestServer } from '../support/tmux.js';

interface Registered {
  gid: string;
  token: string;
  name: string;
  host: string;
}
interface Message {
  msgId: string;
  kind: string;
  text: string;
  inReplyTo?: string;
  from: { name: string; host: string };
}

const suffix = Math.random().toString(36).slice(2, 7);
const heartbeatMs = 300;

/** U1, U5, U6, U7 and U8 across three gateway processes on the real broker. */
describe('three federated gateways', () => {
  const gateways: GatewayProcess[] = [];
  const clients: Client[] = [];
  let tmux: TmuxTestServer;
  let alpha: GatewayProcess;
  let beta: GatewayProcess;
  let gamma: GatewayProcess;
  const ids: Record<string, Registered> = {};
  const mcp: Record<string, Client> = {};

  const gateway = (name: string) => {
    const g = new GatewayProcess({
      hostId: `${name}-${suffix}`,
      env: { ...brokerEnv },
      config: { broker: { heartbeatMs } },
    });
    gateways.push(g);
    return g;
  };
  const register = async (g: GatewayProcess, args: string[]): Promise<Registered> => {
    const result = await g.cli(['register', ...args, '--json']);
    expect(result.code, result.stderr || result.stdout).toBe(0);
    const registered = JSON.parse(result.stdout) as Registered;
    ids[registered.name] = registered;
    return registered;
  };
  const worker = async (g: GatewayProcess, name: string, groups: string[] = []) => {
    const pane = await tmux.newPane('sleep 600');
    const reg = await register(g, [
      '--kind',
      'worker',
      '--name',
      name,
      '--tmux',
      pane,
      '--tmux-socket',
      tmux.socket,
      ...groups.flatMap((group) => ['--group', group]),
    ]);
    await startStandInAgent(tmux, pane, g.mcpUrl, reg.token);
    return pane;
  };
  const drain = async (name: string): Promise<Message[]> => {
    const result = await callTool(mcp[name] as Client, 'bridge_drain', {});
    return (result.structuredContent as { messages: Message[] }).messages;
  };
  const drainUntil = (name: string, count = 1) => {
    const got: Message[] = [];
    return waitFor(`${count} message(s) for ${name}`, async () => {
      got.push(...(await drain(name)));
      return got.length >= count ? got : undefined;
    });
  };
  const rosterNames = async (g: GatewayProcess) => {
    return (await g.roster()).map((e) => `${e.name}@${e.host}`);
  };

  let panes: Record<string, string> = {};

  beforeAll(async () => {
    tmux = await startTmuxServer();
    alpha = gateway('alpha');
    beta = gateway('beta');
    gamma = gateway('gamma');
    await Promise.all(gateways.map((g) => g.start()));
    await register(alpha, ['--kind', 'orchestrator', '--name', 'orch']);
    await register(alpha, ['--kind', 'main', '--name', 'mainA']);
    await register(beta, ['--kind', 'main', '--name', 'mainB']);
    await register(gamma, ['--kind', 'main', '--name', 'mainC']);
    panes = { wB: await worker(beta, 'wB'), wC: await worker(gamma, 'wC', ['qa']) };
    for (const name of ['orch', 'mainA', 'mainB', 'mainC']) {
      const g = name === 'mainB' ? beta : name === 'mainC' ? gamma : alpha;
      const client = await connectMcp(g.mcpUrl, (ids[name] as Registered).token);
      clients.push(client);
      mcp[name] = client;
    }
  });

  afterAll(async () => {
    for (const c of clients) await c.close().catch(() => {});
    for (const g of gateways) await g.dispose();
    await tmux?.kill();
  });

  it('U5: the roster converges on every gateway to the union of all entities', async () => {
    const everyone = ['orch', 'mainA', 'mainB', 'mainC', 'wB', 'wC'].map((n) => {
      const host =
        n === 'mainB' || n === 'wB' ? beta.hostId : n === 'mainC' || n === 'wC' ? gamma.hostId : alpha.hostId;
      return `${n}@${host}`;
    });
    for (const g of [alpha, beta, gamma]) {
      await waitFor(`the full roster on ${g.hostId}`, async () => {
        const names = await rosterNames(g);
        return everyone.every((n) => names.includes(n)) ? names : undefined;
      });
    }
  });

  it('U1: a main sends a task to a worker on another host; the open send returns its reply', async () => {
    const result = await callTool(mcp.mainA as Client, 'bridge_send', {
      to: `wB@${beta.hostId}`,
      text: 'port the parser',
      wait_ms: 20_000,
    });
    expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
    const sent = result.structuredContent as { msgId: string; to: { host: string }; reply: Message };
    expect(sent.to.host).toBe(beta.hostId);
    expect(sent.reply).toMatchObject({
      text: 'done: port the parser',
      from: { name: 'wB', host: beta.hostId },
    });
    expect(await tmux.capture(panes.wB as string)).toContain(`msg ${sent.msgId}] port the parser`);
  });

  it('U6: two mains on different hosts message each other; the reply joins the trace', async () => {
    const sent = await callTool(mcp.mainA as Client, 'bridge_send', { to: 'mainB', text: 'can you review?' });
    const { msgId, traceId } = sent.structuredContent as { msgId: string; traceId: string };
    const [got] = await drainUntil('mainB');
    expect(got).toMatchObject({
      msgId,
      kind: 'SEND',
      text: 'can you review?',
      from: { name: 'mainA', host: alpha.hostId },
    });
    const reply = await callTool(mcp.mainB as Client, 'bridge_reply', {
      to: `mainA@${alpha.hostId}`,
      text: 'yes, after lunch',
      in_reply_to: msgId,
    });
    expect((reply.structuredContent as { traceId: string }).traceId).toBe(traceId);
    const [back] = await drainUntil('mainA');
    expect(back).toMatchObject({
      kind: 'REPLY',
      text: 'yes, after lunch',
      inReplyTo: msgId,
      from: { name: 'mainB' },
    });
  });

  it('U7: an orchestrator drives mains on two other hosts', async () => {
    const asks = ['mainB', 'mainC'].map((name) =>
      callTool(mcp.orch as Client, 'bridge_send', { to: name, text: `status of ${name}?`, wait_ms: 20_000 }),
    );
    for (const name of ['mainB', 'mainC']) {
      const [task] = await drainUntil(name);
      expect(task?.text).toBe(`status of ${name}?`);
      await callTool(mcp[name] as Client, 'bridge_reply', {
        to: 'orch',
        text: `${name}: green`,
        in_reply_to: task?.msgId,
      });
    }
    const replies = await Promise.all(asks);
    expect(replies.map((r) => (r.structuredContent as { reply: Message }).reply.text)).toEqual([
      'mainB: green',
      'mainC: green',
    ]);
  });

  it('U8: a broadcast is published once and every bound inbox gets a copy; a group gets only its own', async () => {
    const all = await callTool(mcp.mainA as Client, 'bridge_broadcast', { text: 'freeze merges' });
    expect(all.isError, JSON.stringify(all.content)).toBeFalsy();
    const { msgId } = all.structuredContent as { msgId: string; key: string };
    for (const name of ['orch', 'mainB', 'mainC']) {
      const [copy] = await drainUntil(name);
      expect(copy).toMatchObject({
        msgId,
        kind: 'BROADCAST',
        text: 'freeze merges',
        from: { name: 'mainA' },
      });
    }
    expect(await drain('mainA')).toEqual([]); // the sender gets no copy of its own
    for (const pane of [panes.wB, panes.wC] as string[]) {
      await waitFor('the broadcast in a worker pane', async () =>
        (await tmux.capture(pane)).includes(`msg ${msgId}] freeze merges`) ? true : undefined,
      );
    }

    const qa = await callTool(mcp.mainA as Client, 'bridge_broadcast', { text: 'qa only', group: 'qa' });
    const qaId = (qa.structuredContent as { msgId: string; key: string }).msgId;
    expect((qa.structuredContent as { key: string }).key).toBe('broadcast.qa');
    await waitFor('the group broadcast in wC', async () =>
      (await tmux.capture(panes.wC as string)).includes(`msg ${qaId}] qa only`) ? true : undefined,
    );
    await sleep(500);
    expect(await tmux.capture(panes.wB as string)).not.toContain(qaId);
    expect(await drain('mainB')).toEqual([]);

    const nobody = await callTool(mcp.mainA as Client, 'bridge_broadcast', {
      text: 'anyone?',
      group: `nogroup${suffix}`,
    });
    expect(nobody.isError).toBe(true);
  });

  it('a late joiner gets broadcasts from its bind on', async () => {
    const before = await callTool(mcp.mainA as Client, 'bridge_broadcast', { text: 'before you came' });
    expect(before.isError).toBeFalsy();
    const late = await register(beta, ['--kind', 'main', '--name', 'late']);
    const client = await connectMcp(beta.mcpUrl, late.token);
    clients.push(client);
    mcp.late = client;
    const after = await callTool(mcp.mainA as Client, 'bridge_broadcast', { text: 'after you came' });
    const afterId = (after.structuredContent as { msgId: string }).msgId;
    const got = await drainUntil('late');
    expect(got.map((m) => m.msgId)).toEqual([afterId]);
    for (const name of ['orch', 'mainB', 'mainC']) await drainUntil(name, 2);
  });

  it('unknown remote recipients get a clear error', async () => {
    const byName = await callTool(mcp.mainA as Client, 'bridge_send', {
      to: `ghost@${beta.hostId}`,
      text: 'hi',
    });
    expect(byName.isError).toBe(true);
    expect((byName.content as Array<{ text: string }>)[0]?.text).toMatch(/^UNKNOWN_RECIPIENT: .*roster/);
    const byGid = await callTool(mcp.mainA as Client, 'bridge_send', {
      to: '00000000-0000-4000-8000-000000000000',
      text: 'hi',
    });
    expect(byGid.isError).toBe(true);
    expect((byGid.content as Array<{ text: string }>)[0]?.text).toMatch(
      /^UNKNOWN_RECIPIENT: .*in no host's roster here/,
    );
  });

  it('U5: a killed gateway’s entities expire from the other rosters', async () => {
    await gamma.kill9();
    for (const g of [alpha, beta]) {
      await waitFor(
        `gamma to expire on ${g.hostId}`,
        async () => {
          const names = await rosterNames(g);
          return names.some((n) => n.endsWith(`@${gamma.hostId}`)) ? undefined : names;
        },
        10_000,
      );
    }
  });
});
