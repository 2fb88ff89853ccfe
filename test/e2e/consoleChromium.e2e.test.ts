import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uniqueHostId } from '../support/broker.js';
import { findChromium } from '../support/chromium.js';
import { openConsole } from '../support/consolePage.js';
import { withEventsDb } from '../support/eventsDb.js';
import { brokerEnv, removeDeadLettersOf, waitFor } from '../support/federation.js';
import { GatewayProcess, repoRoot } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';
import { startTmuxServer, type TmuxTestServer } from '../support/tmux.js';

/**
 * The operator console as a person uses it, in a real headless Chromium: two gateway daemons
 * federated through the real broker; `agentbridge console` on A prints the login URL; the page opened
 * with it shows A's and B's entities, and a worker registered on B afterwards appears without a
 * reload. A message sent from the page reaches a worker's real tmux pane on B, and the page shows
 * its stages; a dead letter (an inbox on B that was full) is requeued from the page and reaches
 * its main. A page without the session, or with a forged cookie, gets nothing. Screenshots go to
 * test-artifacts/.
 */
const artifacts = join(repoRoot, 'test-artifacts');

describe('operator console in Chromium, over two federated gateways', () => {
  let browser: Browser;
  let alpha: GatewayProcess;
  let beta: GatewayProcess;
  let tmux: TmuxTestServer;
  let pane: string;

  beforeAll(async () => {
    mkdirSync(artifacts, { recursive: true });
    const gateway = (prefix: string) =>
      new GatewayProcess({ hostId: uniqueHostId(prefix), env: { ...brokerEnv } });
    alpha = gateway('console-a');
    // B's inboxes hold 2 messages on the broker, so that a third, sent while B is down, is a
    // dead letter (maxlen) to requeue.
    beta = new GatewayProcess({
      hostId: uniqueHostId('console-b'),
      env: { ...brokerEnv },
      config: { broker: { inboxMaxLength: 2 }, limits: { senderInboxShare: 1 } },
    });
    await Promise.all([alpha.start(), beta.start()]);
    tmux = await startTmuxServer();
    pane = await tmux.newPane('cat');
    browser = await chromium.launch({ executablePath: findChromium('the console test') });
  });

  afterAll(async () => {
    await browser?.close();
    await alpha?.dispose();
    await beta?.dispose();
    await tmux?.kill();
    if (alpha && beta) await removeDeadLettersOf([alpha.hostId, beta.hostId]);
  });

  const register = async (g: GatewayProcess, kind: string, name: string, ...extra: string[]) => {
    const result = await g.cli(['register', '--kind', kind, '--name', name, '--json', ...extra]);
    expect(result.code, result.stderr || result.stdout).toBe(0);
    return JSON.parse(result.stdout) as { gid: string; token: string };
  };
  const loginPage = (name: string) => openConsole(alpha, browser, name);

  it('logs in with the printed URL and shows a worker registered on the other gateway, live', async () => {
    await register(alpha, 'main', 'lead');
    await register(beta, 'worker', 'builder', '--tmux', pane, '--tmux-socket', tmux.socket);
    const { page, problems, requests, url } = await loginPage('ops');
    expect(new URL(page.url()).pathname).toBe('/ui/');
    await page
      .locator('#who')
      .filter({ hasText: `ops@${alpha.hostId} (operator)` })
      .waitFor();
    const row = (name: string) => page.locator(`#roster tbody tr`, { hasText: name });
    await row('lead').waitFor();
    await row('builder').waitFor({ timeout: 30_000 });
    expect(await row('builder').textContent()).toContain(beta.hostId);
    // A worker registered by hand, not spawned: no Stop (bridge_stop would refuse it).
    expect(await row('builder').locator('button', { hasText: 'Stop' }).count()).toBe(0);
    await page.screenshot({ path: join(artifacts, 'console-roster.png') });

    // Registered on B after the page opened: it comes by presence, then by the event stream.
    await register(beta, 'worker', 'late-joiner');
    await row('late-joiner').waitFor({ timeout: 30_000 });
    expect(await page.locator('#link').getAttribute('data-state')).toBe('live');
    await page.screenshot({ path: join(artifacts, 'console-roster-live.png') });

    // Sent from the page as the operator: it reaches the worker's pane on B, the stages follow.
    await page.locator('#send input[name=to]').fill(`builder@${beta.hostId}`);
    await page.locator('#send input[name=text]').fill('hello from the console');
    await page.locator('#send button[type=submit]').click();
    const sent = page.locator('#sent tbody tr', { hasText: 'hello from the console' });
    await sent.waitFor();
    await waitFor(
      'the text in the pane',
      async () => ((await tmux.capture(pane)).includes('hello from the console') ? true : undefined),
      30_000,
    );
    await sent.locator('td.stage', { hasText: 'submitted' }).waitFor({ timeout: 30_000 });
    // B's next presence says when the worker was last active: the message typed into its pane.
    await waitFor(
      "the worker's last activity",
      async () => ((await row('builder').locator('td').nth(6).textContent()) !== '—' ? true : undefined),
      30_000,
    );
    // The gateway's own figures: connected, and the latency histogram drawn (B delivered it, but
    // A's own deliveries count here: none yet, so the chart says so until one is made).
    await page.locator('#gateway dd[data-fact=broker]', { hasText: 'connected' }).waitFor();
    await page.screenshot({ path: join(artifacts, 'console-sent.png') });

    expect(problems).toEqual([]);
    const origin = new URL(url).origin;
    expect(requests.filter((request) => !request.startsWith(origin))).toEqual([]);
    await page.close();
  });

  it('requeues a dead letter from the page: the main it was for gets it', async () => {
    const reader = await register(beta, 'main', 'reader');
    const lead = await register(alpha, 'main', 'lead-2');
    await waitFor("reader in A's roster", async () => {
      const roster = (await alpha.roster()) as Array<{ name: string }>;
      return roster.some((entry) => entry.name === 'reader') ? true : undefined;
    });
    // B down (no goodbye: its roster entries stay until their TTL), sends to its main until its
    // inbox of two is full: the next is refused (INBOX_FULL) and dead-lettered as maxlen. Two
    // sends fill it, or one: another test's gateway on the shared broker may have broadcast to
    // every main meanwhile, and that copy takes a place (B dead-letters it as untrusted).
    await beta.kill9();
    const kept: string[] = [];
    let refused: string | undefined;
    try {
      for (const text of ['one', 'two', 'three']) {
        const sent = await alpha.cli(['send', `reader@${beta.hostId}`, text], { BRIDGE_TOKEN: lead.token });
        if (sent.code === 0) kept.push(text);
        else {
          expect(sent.stderr).toMatch(/INBOX_FULL/);
          refused = text;
          break;
        }
      }
    } finally {
      await beta.start();
    }
    expect(kept.length, `kept ${kept.join(', ')}`).toBeGreaterThanOrEqual(1);
    expect(refused).toBeDefined();

    const { page, problems } = await loginPage('ops-dlq');
    const letter = page.locator(`#dlq tbody tr[data-to="${reader.gid}"]`).filter({ hasText: 'maxlen' });
    await letter.waitFor({ timeout: 30_000 });
    // A counted the refusal: its dead-letter chart has a maxlen bar.
    await page.locator('#dead-letter-chart text', { hasText: 'maxlen' }).waitFor({ timeout: 10_000 });
    expect(await page.locator('#dead-letter-chart rect').count()).toBeGreaterThan(0);
    expect(await letter.locator('td').first().textContent()).toBe(`reader@${beta.hostId}`);
    await page.screenshot({ path: join(artifacts, 'console-dlq.png') });
    // B drains what it kept, then the requeued one has room.
    const drained: string[] = [];
    const drainAll = async () => {
      const out = await beta.cli(['drain', '--json'], { BRIDGE_TOKEN: reader.token });
      drained.push(...(JSON.parse(out.stdout) as Array<{ text: string }>).map((m) => m.text));
    };
    await waitFor('the kept ones', async () => {
      await drainAll();
      return kept.every((text) => drained.includes(text)) ? true : undefined;
    });
    await letter.locator('button', { hasText: 'Requeue' }).click();
    await letter.waitFor({ state: 'detached', timeout: 15_000 });
    await waitFor('the requeued one', async () => {
      await drainAll();
      return drained.includes(refused as string) ? true : undefined;
    });
    expect(drained.sort()).toEqual([...kept, refused].sort());
    expect(await page.locator('#dlq-error').textContent()).toBe('');
    expect(problems).toEqual([]);
    await page.close();
  });

  it("answers from the page an ASK a worker on the other gateway put to a main here: the worker's parked call returns", async () => {
    await register(alpha, 'main', 'decider');
    const asker = await register(beta, 'worker', 'asker');
    await waitFor("decider in B's roster", async () => {
      const roster = (await beta.roster()) as Array<{ name: string }>;
      return roster.some((entry) => entry.name === 'decider') ? true : undefined;
    });
    const worker = await connectMcp(beta.mcpUrl, asker.token);
    try {
      const asked = callTool(
        worker,
        'bridge_ask',
        { to: `decider@${alpha.hostId}`, question: 'ship it on Friday?', timeout_ms: 60_000 },
        90_000,
      );
      const { page, problems } = await loginPage('ops-asks');
      const ask = page.locator('#asks tbody tr', { hasText: 'ship it on Friday?' });
      await ask.waitFor({ timeout: 30_000 });
      expect(await ask.locator('td').nth(1).textContent()).toBe(`asker@${beta.hostId}`);
      await page.screenshot({ path: join(artifacts, 'console-ask.png') });
      await ask.locator('input[name=text]').fill('yes, after the tests pass');
      await ask.locator('button', { hasText: 'Answer' }).click();
      const result = await asked;
      // A handed the ASK over at the console: one delivery in A's latency histogram.
      await page.locator('#latency-chart rect:not([width="0"])').first().waitFor({ timeout: 10_000 });
      expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
      const { answer } = result.structuredContent as {
        answer: { text: string; traceId: string; from: { name: string } };
      };
      expect(answer).toMatchObject({ text: 'yes, after the tests pass', from: { name: 'decider' } });
      await ask.waitFor({ state: 'detached', timeout: 10_000 });
      // The main's latest deliveries: the ASK, acked (taken at the console).
      await page.locator('#roster tbody button.link-button', { hasText: 'decider' }).click();
      const delivery = page.locator(
        `#deliveries tbody tr[data-msg-id="${(result.structuredContent as { askId: string }).askId}"]`,
      );
      await delivery.filter({ hasText: 'acked' }).waitFor({ timeout: 10_000 });
      expect(await delivery.locator('td').first().textContent()).toBe('ASK');
      await page.screenshot({ path: join(artifacts, 'console-entity.png'), fullPage: true });

      // The ask's flow: A's side from its log, then B's added from its `agentbridge export`.
      const traceId = answer.traceId;
      const flowRow = page.locator(`#flows tbody tr[data-trace-id="${traceId}"]`);
      await flowRow.locator('button').click({ timeout: 15_000 });
      // A's log knows both hosts of the flow: its answer went to B (the list shows it within its 5 s).
      await flowRow.locator('td', { hasText: beta.hostId }).waitFor({ timeout: 10_000 });
      const timeline = page.locator('#timeline tbody tr');
      await page.locator('#flow-note', { hasText: alpha.hostId }).waitFor({ timeout: 10_000 });
      expect(await page.locator(`#timeline tbody tr[data-host="${beta.hostId}"]`).count()).toBe(0);
      const exportFile = join(beta.home, 'ask-flow.jsonl');
      const exported = await beta.cli(['export', '--trace', traceId, '--out', exportFile]);
      expect(exported.code, exported.stderr || exported.stdout).toBe(0);
      await page.locator('#flow-exports').setInputFiles(exportFile);
      await page
        .locator(`#timeline tbody tr[data-host="${beta.hostId}"]`)
        .first()
        .waitFor({ timeout: 10_000 });
      expect(await page.locator('#flow-note').textContent()).toMatch(/every actor re-runs as recorded/);
      expect(await timeline.count()).toBeGreaterThan(4);
      // Its sequence diagram has a column per host, and the ASK going from B to A and its answer back.
      const hostsDrawn = await page.locator('#sequence text.host').allTextContents();
      expect(hostsDrawn.sort()).toEqual([alpha.hostId, beta.hostId].sort());
      expect(await page.locator('#sequence g.step.message').count()).toBeGreaterThanOrEqual(2);
      // The state machines it went through, with the states it reached marked.
      await page
        .locator('#machines [data-machine="turn"] svg g.state.taken')
        .first()
        .waitFor({ timeout: 5_000 });
      expect(
        await page.locator('#machines [data-machine="delivery"] svg g.edge.taken').count(),
      ).toBeGreaterThan(0);
      await page.locator('#flow').screenshot({ path: join(artifacts, 'console-flow.png') });
      expect(await page.locator('#asks-error').textContent()).toBe('');
      // On the record: the ASK's delivery on A was handed over at the console, by the operator.
      const roster = (await alpha.roster()) as Array<{
        name: string;
        gid: string;
      }>;
      const operatorGid = roster.find((entry) => entry.name === 'ops-asks')?.gid;
      const recorded = withEventsDb(
        alpha.home,
        (db) =>
          db
            .prepare(
              "SELECT event, data FROM event_log WHERE actor_kind = 'delivery' AND msg_id = ? AND event IN ('delivery.handedOver', 'delivery.acked') ORDER BY hlc",
            )
            .all((result.structuredContent as { askId: string }).askId) as Array<{
            event: string;
            data: string;
          }>,
      );
      expect(recorded.map((row) => [row.event, JSON.parse(row.data)])).toEqual([
        ['delivery.handedOver', { via: 'console', by: operatorGid }],
        ['delivery.acked', { via: 'console' }],
      ]);
      expect(problems).toEqual([]);
      await page.close();
    } finally {
      await worker.close();
    }
  });

  it('a page without the session, or with a forged cookie, shows nothing of the gateway', async () => {
    const base = alpha.mcpUrl.replace(/\/mcp$/, '');
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      const bare = await page.goto(`${base}/ui/`);
      expect(bare?.status()).toBe(401);
      expect(await page.locator('body').textContent()).toMatch(/Run `agentbridge console`/);
      await context.addCookies([{ name: 'bridge_console', value: 'forged', url: base }]);
      const forged = await page.goto(`${base}/ui/`);
      expect(forged?.status()).toBe(401);
      const api = await page.goto(`${base}/ui/api/roster`);
      expect(api?.status()).toBe(401);
      await page.screenshot({ path: join(artifacts, 'console-refused.png') });
    } finally {
      await context.close();
    }
  });

  it('the login URL works once', async () => {
    const printed = await alpha.cli(['console', '--json']);
    const { url } = JSON.parse(printed.stdout) as { url: string };
    const first = await browser.newContext();
    const second = await browser.newContext();
    try {
      const a = await first.newPage();
      await a.goto(url);
      expect(new URL(a.url()).pathname).toBe('/ui/');
      const b = await second.newPage();
      const again = await b.goto(url);
      expect(again?.status()).toBe(401);
      await waitFor('the refusal text', async () =>
        /unknown, used or expired/.test((await b.locator('body').textContent()) ?? '') ? true : undefined,
      );
    } finally {
      await first.close();
      await second.close();
    }
  });
});
