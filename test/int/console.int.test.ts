import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callAdmin } from '../../src/cli/adminClient.js';
import { loadConfig } from '../../src/config/loadConfig.js';
import { type Daemon, startDaemon } from '../../src/daemon/startDaemon.js';
import { adminRoutes } from '../../src/interfaces/adminProtocol.js';
import type { ConsoleLogin } from '../../src/interfaces/consoleLogin.js';
import { silentLogger } from '../../src/log/logger.js';
import { WireKind } from '../../src/wire/envelope.js';
import { type ConsoleSession, consolePost, openConsoleSession } from '../support/consoleSession.js';

/**
 * The operator console's login and its live roster, on a real daemon in process: a one-time
 * code from the admin socket (what `agentbridge console` asks for) becomes an HttpOnly, SameSite=Strict
 * session cookie; without it, with a forged one, or from another Origin, nothing is served.
 */
describe('operator console: login, session, live roster', () => {
  let home: string;
  let daemon: Daemon;
  let base: string;

  beforeAll(async () => {
    home = mkdtempSync(join(tmpdir(), 'bridge-console-'));
    const { config } = loadConfig({
      env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: 'console', BRIDGE_MCP_PORT: '0' },
    });
    daemon = await startDaemon({ config, logger: silentLogger() });
    base = daemon.mcpUrl.replace(/\/mcp$/, '');
  });

  afterAll(async () => {
    await daemon?.stop();
    rmSync(home, { recursive: true, force: true });
  });

  const login = (name?: string) =>
    callAdmin(daemon.adminSocket, adminRoutes.consoleLogin, name ? { name } : {}) as Promise<ConsoleLogin>;

  /** Spends a login URL; the session cookie's `name=value`, and the Set-Cookie header. */
  async function sessionFrom(
    url: string,
  ): Promise<{ cookie: string; header: string; session: ConsoleSession }> {
    const session = await openConsoleSession(url);
    return { cookie: session.cookie, header: session.setCookie, session };
  }

  it('a login URL opens a session once: an HttpOnly, SameSite=Strict cookie for /ui', async () => {
    const { url, operator } = await login();
    expect(url.startsWith(`${base}/ui/login?code=`)).toBe(true);
    expect(operator).toMatchObject({ name: 'operator', host: 'console', kind: 'operator' });
    const { cookie, header } = await sessionFrom(url);
    expect(header).toMatch(/HttpOnly/);
    expect(header).toMatch(/SameSite=Strict/);
    expect(header).toMatch(/Path=\/ui/);

    const page = await fetch(`${base}/ui/`, { headers: { cookie } });
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toMatch(/default-src 'none'; script-src 'self'/);
    expect(await page.text()).toMatch(/<script type="module" src="\/ui\/app.js">/);
    const me = await (await fetch(`${base}/ui/api/me`, { headers: { cookie } })).json();
    expect(me).toMatchObject({ name: 'operator', kind: 'operator', host: 'console' });

    const again = await fetch(url, { redirect: 'manual' });
    expect(again.status).toBe(401);
    expect(await again.text()).toMatch(/unknown, used or expired.*agentbridge console/);
  });

  it('refuses a page without the cookie, with a forged one, and from another Origin', async () => {
    const none = await fetch(`${base}/ui/`);
    expect(none.status).toBe(401);
    expect(await none.text()).toMatch(/Run `agentbridge console`/);
    const forged = await fetch(`${base}/ui/api/roster`, { headers: { cookie: 'bridge_console=forged' } });
    expect(forged.status).toBe(401);

    const { cookie } = await sessionFrom((await login()).url);
    const elsewhere = await fetch(`${base}/ui/api/roster`, {
      headers: { cookie, origin: 'http://evil.example' },
    });
    expect(elsewhere.status).toBe(403);
    const noOrigin = await fetch(`${base}/ui/api/logout`, { method: 'POST', headers: { cookie } });
    expect(noOrigin.status).toBe(403);
    expect((await fetch(`${base}/ui/api/roster`, { headers: { cookie } })).status).toBe(200);
  });

  it('the live roster shows an entity registered after the page opened, without a reload; the other topics come on the same stream', async () => {
    const { cookie } = await sessionFrom((await login()).url);
    const controller = new AbortController();
    const res = await fetch(`${base}/ui/api/events`, { headers: { cookie }, signal: controller.signal });
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let buffered = '';
    /** The next event of `topic` on the stream; every topic's last data is kept in `latest`. */
    const latest = new Map<string, unknown>();
    const next = async <T>(topic: string): Promise<T> => {
      for (;;) {
        const end = buffered.indexOf('\n\n');
        if (end >= 0) {
          const event = buffered.slice(0, end);
          buffered = buffered.slice(end + 2);
          const data = /^event: (.*)\ndata: (.*)$/m.exec(event);
          if (!data) continue;
          latest.set(data[1] as string, JSON.parse(data[2] as string));
          if (data[1] === topic) return latest.get(topic) as T;
          continue;
        }
        const { value, done } = await reader.read();
        if (done) throw new Error('the event stream ended');
        buffered += decoder.decode(value, { stream: true });
      }
    };
    type Roster = Array<{ name: string; kind: string; status: string; lastActiveAt?: number }>;
    try {
      const first = await next<Roster>('roster');
      expect(first.map((entry) => entry.name)).toContain('operator');
      await daemon.gateway.services.registrations.register({ kind: 'worker', name: 'late-worker' });
      const second = await next<Roster>('roster');
      expect(second.find((entry) => entry.name === 'late-worker')).toMatchObject({ kind: 'worker' });
      // A main that is sent a message was active then.
      const busy = await daemon.gateway.services.registrations.register({ kind: 'main', name: 'busy-main' });
      const before = Date.now();
      await daemon.gateway.services.sends.send(daemon.gateway.directory.authenticate(busy.token)!, {
        kind: WireKind.send,
        to: 'busy-main',
        text: 'to myself',
      });
      let entry: Roster[number] | undefined;
      while (entry?.lastActiveAt === undefined) {
        entry = (await next<Roster>('roster')).find((candidate) => candidate.name === 'busy-main');
      }
      expect(entry.lastActiveAt).toBeGreaterThanOrEqual(before);
      // The page's other sections: its figures, flows, asks, and the dead letters (none single-host: why).
      for (const topic of ['overview', 'dlq', 'asks', 'flows']) if (!latest.has(topic)) await next(topic);
      expect(latest.get('overview')).toMatchObject({ mode: 'single-host' });
      expect(latest.get('dlq')).toMatchObject({ error: { message: expect.stringMatching(/broker/) } });
      expect(latest.get('asks')).toEqual([]);
      expect(Array.isArray(latest.get('flows'))).toBe(true);
    } finally {
      controller.abort();
    }
  });

  it('logging out ends the session; a name that is not an operator is refused', async () => {
    const { cookie } = await sessionFrom((await login()).url);
    const out = await fetch(`${base}/ui/api/logout`, {
      method: 'POST',
      headers: { cookie, origin: base },
    });
    expect(out.status).toBe(200);
    expect(out.headers.get('set-cookie')).toMatch(/Max-Age=0/);
    expect((await fetch(`${base}/ui/api/me`, { headers: { cookie } })).status).toBe(401);

    await daemon.gateway.services.registrations.register({ kind: 'main', name: 'boss' });
    await expect(login('boss')).rejects.toThrow(/NAME_TAKEN|not an operator/);
  });

  it("a deregistered operator's session is over", async () => {
    const { url } = await login('night-shift');
    const { cookie } = await sessionFrom(url);
    expect((await fetch(`${base}/ui/api/me`, { headers: { cookie } })).status).toBe(200);
    await daemon.gateway.services.registrations.deregister('night-shift');
    expect((await fetch(`${base}/ui/api/me`, { headers: { cookie } })).status).toBe(401);
  });

  describe('actions, as the operator, through the gateway API', () => {
    it('sends to a main as the operator: held for it, from the operator, its stage readable', async () => {
      const inbox = await daemon.gateway.services.registrations.register({ kind: 'main', name: 'reader' });
      const { cookie, session } = await sessionFrom((await login('sender-ops')).url);
      const res = await consolePost(session, '/ui/api/send', { to: 'reader', text: 'from the console' });
      expect(res.status).toBe(200);
      const sent = (await res.json()) as { msgId: string; traceId: string; to: { name: string } };
      expect(sent.to.name).toBe('reader');
      expect(sent.traceId).toMatch(/^[0-9a-f-]{36}$/);

      const reader = daemon.gateway.directory.authenticate(inbox.token)!;
      const handover = await daemon.gateway.services.drains.drain(reader);
      handover.confirm();
      expect(handover.envelopes.map((e) => [e.text, e.from.name, e.from.kind])).toEqual([
        ['from the console', 'sender-ops', 'operator'],
      ]);
      const status = await (
        await fetch(`${base}/ui/api/message?msgId=${sent.msgId}`, { headers: { cookie } })
      ).json();
      expect(status).toMatchObject({ msgId: sent.msgId, traceId: sent.traceId });

      // The reader's latest deliveries: this one, acked, from the operator, and no text.
      await daemon.gateway.store.batch.flush();
      const detail = (await (
        await fetch(`${base}/ui/api/entity?gid=${inbox.gid}`, { headers: { cookie } })
      ).json()) as { local: boolean; deliveries: Array<Record<string, unknown>> };
      const me = (await (await fetch(`${base}/ui/api/me`, { headers: { cookie } })).json()) as {
        gid: string;
      };
      expect(detail.local).toBe(true);
      expect(detail.deliveries).toEqual([
        expect.objectContaining({ msgId: sent.msgId, kind: 'SEND', sender: me.gid, state: 'acked' }),
      ]);
      expect(JSON.stringify(detail)).not.toContain('from the console');
      const nobody = await fetch(`${base}/ui/api/entity?gid=00000000-0000-4000-8000-000000000000`, {
        headers: { cookie },
      });
      expect(((await nobody.json()) as { error: { code: string } }).error.code).toBe('UNKNOWN_RECIPIENT');
    });

    it('refuses bad input with the code and what to do, and reports what is not available here', async () => {
      const { cookie, session } = await sessionFrom((await login()).url);
      const empty = await consolePost(session, '/ui/api/send', { to: 'reader' });
      expect(empty.status).toBe(400);
      expect(((await empty.json()) as { error: { code: string; message: string } }).error).toMatchObject({
        code: 'BAD_REQUEST',
        message: expect.stringMatching(/text/),
      });
      const nobody = await consolePost(session, '/ui/api/send', { to: 'nobody-here', text: 'hello' });
      expect(((await nobody.json()) as { error: { code: string } }).error.code).toBe('UNKNOWN_RECIPIENT');
      const notJson = await fetch(`${base}/ui/api/send`, {
        method: 'POST',
        headers: { cookie, origin: base, 'content-type': 'application/json' },
        body: '{not json',
      });
      expect(notJson.status).toBe(400);
      const getSend = await fetch(`${base}/ui/api/send`, { headers: { cookie } });
      expect(getSend.status).toBe(405);
      // Single-host: no broker, so no dead-letter queue to show or requeue.
      const dlq = await fetch(`${base}/ui/api/dlq`, { headers: { cookie } });
      expect(dlq.status).toBe(503);
      expect(((await dlq.json()) as { error: { message: string } }).error.message).toMatch(/broker/);
    });

    it('the overview: mode, deliveries by state, the latency histogram per bucket, dead letters by reason', async () => {
      const { cookie, session } = await sessionFrom((await login()).url);
      const taker = await daemon.gateway.services.registrations.register({ kind: 'main', name: 'taker' });
      await consolePost(session, '/ui/api/send', { to: 'taker', text: 'one to count' });
      (
        await daemon.gateway.services.drains.drain(daemon.gateway.directory.authenticate(taker.token)!)
      ).confirm();
      await daemon.gateway.store.batch.flush();
      const overview = (await (await fetch(`${base}/ui/api/overview`, { headers: { cookie } })).json()) as {
        host: string;
        mode: string;
        broker: unknown;
        deliveries: Record<string, number>;
        deliveryLatency: Array<{ le: number | null; count: number }>;
        deadLetters: Record<string, number>;
      };
      expect(overview).toMatchObject({ host: 'console', mode: 'single-host', broker: null });
      // Each acked delivery is counted once, in its bucket.
      const acked = overview.deliveries.acked ?? 0;
      expect(acked).toBeGreaterThan(0);
      expect(overview.deliveryLatency.reduce((sum, bucket) => sum + bucket.count, 0)).toBe(acked);
      expect(overview.deliveryLatency.at(-1)?.le).toBeNull();
      expect(overview.deliveryLatency.every((bucket) => bucket.count >= 0)).toBe(true);
      expect(overview.deadLetters).toEqual({});
    });

    it('lists the last hour’s flows and opens one: the replay merge of this host’s log, re-run', async () => {
      const { cookie, session } = await sessionFrom((await login()).url);
      const inbox = await daemon.gateway.services.registrations.register({
        kind: 'main',
        name: 'flow-reader',
      });
      const sent = (await (
        await consolePost(session, '/ui/api/send', { to: 'flow-reader', text: 'a flow' })
      ).json()) as {
        msgId: string;
        traceId: string;
      };
      (
        await daemon.gateway.services.drains.drain(daemon.gateway.directory.authenticate(inbox.token)!)
      ).confirm();
      await daemon.gateway.store.batch.flush();
      const flows = (await (await fetch(`${base}/ui/api/flows`, { headers: { cookie } })).json()) as Array<{
        traceId: string;
        events: number;
        actorKinds: string[];
        last: { actorKind: string; toState: string };
      }>;
      // Its last event here: the send learning its stage from the delivery's receipt.
      expect(flows[0]).toMatchObject({
        traceId: sent.traceId,
        last: { actorKind: 'send', toState: 'handed-over' },
      });
      expect(flows[0]?.actorKinds.sort()).toEqual(['delivery', 'send']);

      const flow = (await (await consolePost(session, '/ui/api/flow', { traceId: sent.traceId })).json()) as {
        hosts: string[];
        total: number;
        events: Array<{ actorKind: string; event: string; toState: string; msgId: string | null }>;
        divergences: unknown[];
        sequence: {
          hosts: string[];
          steps: Array<{ kind: string; from?: string; to?: string; label: string }>;
        };
        machines: Array<{ kind: string; svg: string }>;
      };
      expect(flow.hosts).toEqual(['console']);
      // Its sequence: the message from the send to its delivery, on this one host.
      expect(flow.sequence.hosts).toEqual(['console']);
      expect(flow.sequence.steps).toContainEqual(
        expect.objectContaining({ kind: 'message', from: 'console', to: 'console' }),
      );
      // The machines it went through, drawn with its path marked; no other machine.
      expect(flow.machines.map((m) => m.kind).sort()).toEqual(['delivery', 'send']);
      const delivery = flow.machines.find((m) => m.kind === 'delivery')?.svg ?? '';
      expect(delivery).toMatch(/<g class="state atomic taken" data-state="held">/);
      expect(delivery).toMatch(/<g class="edge taken"/);
      expect(delivery).not.toMatch(/style=/);
      expect(flow.total).toBe(flows[0]?.events);
      expect(flow.divergences).toEqual([]);
      expect(flow.events.map((e) => `${e.actorKind} ${e.toState}`)).toEqual(
        expect.arrayContaining(['send accepted', 'delivery held', 'delivery acked']),
      );
      expect(flow.events.every((e) => e.msgId === sent.msgId)).toBe(true);

      const bad = await consolePost(session, '/ui/api/flow', {
        traceId: sent.traceId,
        exports: ['not an export'],
      });
      expect(bad.status).toBe(400);
    });

    it('broadcasts as the operator to a group', async () => {
      const member = await daemon.gateway.services.registrations.register({
        kind: 'main',
        name: 'member',
        groups: ['night'],
      });
      const { session } = await sessionFrom((await login()).url);
      const res = await consolePost(session, '/ui/api/broadcast', {
        group: 'night',
        text: 'to the night group',
      });
      expect(res.status).toBe(200);
      const handover = await daemon.gateway.services.drains.drain(
        daemon.gateway.directory.authenticate(member.token)!,
      );
      handover.confirm();
      expect(handover.envelopes.map((e) => [e.kind, e.text])).toEqual([['BROADCAST', 'to the night group']]);
    });
  });
});
