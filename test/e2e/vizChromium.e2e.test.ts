import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import Database from 'better-sqlite3';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registryGraphs } from '../../src/viz/vizFiles.js';
import { findChromium } from '../support/chromium.js';
import { GatewayProcess, repoRoot, runCli } from '../support/GatewayProcess.js';
import { waitFor } from '../support/waitFor.js';

/**
 * `agentbridge viz` as a user sees it: the page it writes, opened in a real headless Chromium
 * (Debian's `chromium`, which `npm test` installs: tools/prepareTests.ts), must load nothing but itself, log no error,
 * and show every state of every machine; with `--trace`, a real flow through a gateway process
 * is marked on the diagrams with its counts. Screenshots go to test-artifacts/.
 */
const artifacts = join(repoRoot, 'test-artifacts');
const graphs = registryGraphs();

interface OpenedPage {
  page: Page;
  url: string;
  requests: string[];
  problems: string[];
}

async function open(browser: Browser, file: string): Promise<OpenedPage> {
  const page = await browser.newPage({ viewport: { width: 1600, height: 900 } });
  const opened: OpenedPage = { page, url: pathToFileURL(file).href, requests: [], problems: [] };
  page.on('request', (request) => opened.requests.push(request.url()));
  page.on('requestfailed', (request) => opened.problems.push(`request failed: ${request.url()}`));
  page.on('pageerror', (err) => opened.problems.push(`page error: ${err.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error' || message.type() === 'warning') {
      opened.problems.push(`console ${message.type()}: ${message.text()}`);
    }
  });
  await page.goto(opened.url, { waitUntil: 'load' });
  return opened;
}

describe('agentbridge viz in Chromium', () => {
  let browser: Browser;
  const dirs: string[] = [];
  const outDir = (): string => {
    const dir = mkdtempSync(join(tmpdir(), 'bridge-viz-'));
    dirs.push(dir);
    return dir;
  };

  beforeAll(async () => {
    mkdirSync(artifacts, { recursive: true });
    browser = await chromium.launch({ executablePath: findChromium('the viz test') });
  });

  afterAll(async () => {
    await browser?.close();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it('renders every machine offline: no request but the page, no console error, every state shown', async () => {
    const out = outDir();
    const run = await runCli(['viz', '--out', out]);
    expect(run.code, run.stderr || run.stdout).toBe(0);
    expect(run.stdout).toContain(`wrote ${join(out, 'index.html')}`);
    for (const graph of graphs) expect(existsSync(join(out, `${graph.kind}.mmd`))).toBe(true);

    const { page, url, requests, problems } = await open(browser, join(out, 'index.html'));
    try {
      // biome-ignore lint/performance/useDomNodeTextContent: the rendered text, as a reader sees it
      const text = await page.locator('body').innerText();
      for (const graph of graphs) {
        const svg = page.locator(`#machine-${graph.kind} svg`);
        expect(await svg.isVisible(), graph.kind).toBe(true);
        for (const state of graph.states) {
          const name = svg.locator(`g[data-state="${state.id}"] > text.name`);
          expect(await name.textContent(), `${graph.kind} ${state.id}`).toBe(state.name);
          expect(await name.isVisible(), `${graph.kind} ${state.id} visible`).toBe(true);
          expect(text).toContain(state.name);
        }
        expect(await svg.locator('g.edge').count(), graph.kind).toBe(graph.transitions.length);
      }
      // Everything drawn lies inside its picture, and every label fits its backdrop: the
      // layout's text metrics hold for the font Chromium picked.
      const misfits = await page.locator('svg.machine').evaluateAll((svgs) => {
        const found: string[] = [];
        for (const svg of svgs) {
          const frame = svg.getBoundingClientRect();
          for (const el of svg.querySelectorAll('g.state, g.label')) {
            const box = el.getBoundingClientRect();
            const inside =
              box.left >= frame.left - 1 &&
              box.right <= frame.right + 1 &&
              box.top >= frame.top - 1 &&
              box.bottom <= frame.bottom + 1;
            if (!inside) found.push(`outside: ${el.getAttribute('data-state') ?? el.textContent}`);
          }
          for (const label of svg.querySelectorAll('g.label')) {
            const text = label.querySelector('text').getBBox();
            const backdrop = label.querySelector('rect').getBBox();
            if (text.width > backdrop.width + 1)
              found.push(`label wider than its backdrop: ${label.textContent}`);
          }
        }
        return found;
      });
      expect(misfits).toEqual([]);
      // Every picture fits its box: none needs a sideways scroll to show its last states.
      const wider = await page
        .locator('.diagram')
        .evaluateAll((boxes) =>
          boxes
            .filter((box) => box.scrollWidth > box.clientWidth + 1)
            .map((box) => box.closest('[id]')?.id ?? '?'),
        );
      expect(wider).toEqual([]);
      await page.screenshot({ path: join(artifacts, 'viz.png'), fullPage: true });
      expect(problems).toEqual([]);
      expect(requests).toEqual([url]);
    } finally {
      await page.close();
    }
  });

  describe('with --trace, on a real flow', () => {
    let gateway: GatewayProcess;
    let traceId: string;
    let db: string;

    beforeAll(async () => {
      gateway = new GatewayProcess();
      await gateway.start();
      const register = async (name: string) =>
        JSON.parse((await gateway.cli(['register', '--kind', 'main', '--name', name, '--json'])).stdout) as {
          token: string;
        };
      const alice = await register('alice');
      const bob = await register('bob');
      const sent = await gateway.cli(['send', 'bob', 'the build is green', '--json'], {
        BRIDGE_TOKEN: alice.token,
      });
      expect(sent.code, sent.stderr || sent.stdout).toBe(0);
      traceId = (JSON.parse(sent.stdout) as { traceId: string }).traceId;
      const drained = await gateway.cli(['drain', '--json'], { BRIDGE_TOKEN: bob.token });
      expect(JSON.parse(drained.stdout)).toHaveLength(1);
      db = join(gateway.home, 'events.db');
      await waitFor('the delivery acked in the log', () =>
        events(db, traceId).includes('delivery.acked') ? true : undefined,
      );
    });

    afterAll(async () => {
      await gateway?.dispose();
    });

    it('marks the transitions the flow took, with counts, in the summary, the Mermaid and the page', async () => {
      const out = outDir();
      const run = await runCli(['viz', '--trace', traceId, db, '--out', out, '--json']);
      expect(run.code, run.stderr || run.stdout).toBe(0);
      const summary = JSON.parse(run.stdout) as {
        trace: {
          events: number;
          unmatched: unknown[];
          machines: Record<
            string,
            { created: number; transitions: { from: string; event: string; to: string; count: number }[] }
          >;
        };
      };
      const { machines } = summary.trace;
      // Same host: routed here, then the receipts of the delivery (R-RC1).
      expect(machines.send).toEqual({
        created: 1,
        transitions: [
          { from: 'accepted', event: 'send.routedLocal', to: 'routed-local', count: 1 },
          { from: 'routed-local', event: 'send.receipt', to: 'queued', count: 1 },
          { from: 'queued', event: 'send.receipt', to: 'handed-over', count: 1 },
        ],
      });
      expect(machines.delivery).toEqual({
        created: 1,
        transitions: [
          { from: 'pending', event: 'delivery.hold', to: 'held', count: 1 },
          { from: 'held', event: 'delivery.handedOver', to: 'handed-over', count: 1 },
          { from: 'handed-over', event: 'delivery.acked', to: 'acked', count: 1 },
        ],
      });
      // Every recorded event of the flow is accounted for: a creation or a marked transition.
      const counted = Object.values(machines).reduce(
        (sum, m) => sum + m.created + m.transitions.reduce((n, t) => n + t.count, 0),
        0,
      );
      expect(summary.trace.unmatched).toEqual([]);
      expect(counted).toBe(summary.trace.events);
      expect(summary.trace.events).toBe(events(db, traceId).length);

      const mermaid = readFileSync(join(out, 'delivery.mmd'), 'utf8').split('\n');
      expect(mermaid).toContain('  [*] --> pending : created (×1)');
      expect(mermaid).toContain('  pending --> held : delivery.hold (×1)');
      expect(mermaid).toContain('  handed_over --> acked : delivery.acked (×1)');
      expect(mermaid).toContain('  pending --> injecting : delivery.inject [isInjectMode]');
      expect(mermaid).toContain('  class handed_over taken');
      const send = readFileSync(join(out, 'send.mmd'), 'utf8');
      expect(send).toContain('accepted --> routed_local : send.routedLocal (×1)');
      expect(send).toContain('queued --> handed_over : send.receipt [isReceipt(handed-over)] (×1)');

      const { page, url, requests, problems } = await open(browser, join(out, 'index.html'));
      try {
        const taken = await page
          .locator('#machine-delivery g.edge.taken')
          .evaluateAll((edges) =>
            edges.map((e) => `${e.getAttribute('data-transition')} ${e.getAttribute('data-count')}`),
          );
        expect(taken).toEqual([
          'pending|delivery.hold|held#0 1',
          'held|delivery.handedOver|handed-over#0 1',
          'handed-over|delivery.acked|acked#0 1',
        ]);
        expect(await page.locator('#machine-delivery g.label.taken').allTextContents()).toEqual([
          'delivery.hold ×1',
          'delivery.handedOver ×1',
          'delivery.acked ×1',
        ]);
        expect(await page.locator('#machine-delivery g.state.taken').count()).toBe(4);
        expect(await page.locator('#machine-broker g.edge.taken').count()).toBe(0);
        expect(await page.locator('h1').textContent()).toBe(`bridge state machines: trace ${traceId}`);
        await page.locator('#machine-delivery').screenshot({ path: join(artifacts, 'viz-trace.png') });
        expect(problems).toEqual([]);
        expect(requests).toEqual([url]);
      } finally {
        await page.close();
      }
    });

    it('says so when the trace has no events, or a log cannot be read', async () => {
      const unknown = await runCli(['viz', '--trace', 'no-such-trace', db, '--out', outDir()]);
      expect(unknown.code).toBe(2);
      expect(unknown.stderr).toMatch(/no events of trace no-such-trace in .*events\.db: check the trace id/);
      const missing = await runCli([
        'viz',
        '--trace',
        traceId,
        join(gateway.home, 'nope.db'),
        '--out',
        outDir(),
      ]);
      expect(missing.code).toBe(2);
      expect(missing.stderr).toMatch(/cannot read .*nope\.db/);
      const noLogs = await runCli(['viz', '--trace', traceId]);
      expect(noLogs.stderr).toMatch(/needs one or more event logs/);
    });
  });
});

/** The event types of one flow in a gateway's log, oldest first. */
function events(db: string, traceId: string): string[] {
  const handle = new Database(db, { readonly: true });
  try {
    const rows = handle
      .prepare('SELECT event FROM event_log WHERE trace_id = ? ORDER BY hlc')
      .all(traceId) as {
      event: string;
    }[];
    return rows.map((row) => row.event);
  } finally {
    handle.close();
  }
}
