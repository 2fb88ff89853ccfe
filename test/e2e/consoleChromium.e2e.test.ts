import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromiumCandidates } from '../../tools/testPrerequisites.js';
import { uniqueHostId } from '../support/broker.js';
import { brokerUri, waitFor } from '../support/federation.js';
import { GatewayProcess, repoRoot } from '../support/GatewayProcess.js';

/**
 * The operator console as a person uses it, in a real headless Chromium: two gateway daemons
 * federated through the real broker; `bridge console` on A prints the login URL; the page opened
 * with it shows A's and B's entities, and a worker registered on B afterwards appears without a
 * reload. A page without the session, or with a forged cookie, gets nothing. Screenshots go to
 * test-artifacts/.
 */
const artifacts = join(repoRoot, 'test-artifacts');

function findChromium(): string {
  const found = chromiumCandidates(process.env).find((path) => existsSync(path));
  if (!found) {
    throw new Error(
      'no Chromium for the console test: install it (apt-get install -y --no-install-recommends chromium, ' +
        'as `npm test` does through tools/prepareTests.ts) or set CHROMIUM_PATH',
    );
  }
  return found;
}

describe('operator console in Chromium, over two federated gateways', () => {
  let browser: Browser;
  let alpha: GatewayProcess;
  let beta: GatewayProcess;

  beforeAll(async () => {
    mkdirSync(artifacts, { recursive: true });
    const gateway = (prefix: string) =>
      new GatewayProcess({ hostId: uniqueHostId(prefix), env: { BRIDGE_BROKER_URI: brokerUri } });
    alpha = gateway('console-a');
    beta = gateway('console-b');
    await Promise.all([alpha.start(), beta.start()]);
    browser = await chromium.launch({ executablePath: findChromium() });
  });

  afterAll(async () => {
    await browser?.close();
    await alpha?.dispose();
    await beta?.dispose();
  });

  const register = async (g: GatewayProcess, kind: string, name: string) => {
    const result = await g.cli(['register', '--kind', kind, '--name', name]);
    expect(result.code, result.stderr).toBe(0);
  };

  it('logs in with the printed URL and shows a worker registered on the other gateway, live', async () => {
    await register(alpha, 'main', 'lead');
    await register(beta, 'worker', 'builder');
    const printed = await alpha.cli(['console', '--name', 'ops']);
    expect(printed.code, printed.stderr).toBe(0);
    const url = /http:\/\/\S+\/ui\/login\?code=\S+/.exec(printed.stdout)?.[0];
    expect(url, printed.stdout).toBeDefined();

    const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
    const problems: string[] = [];
    const requests: string[] = [];
    page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
    page.on('console', (message) => {
      if (message.type() === 'error') problems.push(`console error: ${message.text()}`);
    });
    page.on('request', (request) => requests.push(request.url()));
    await page.goto(url as string, { waitUntil: 'load' });
    expect(new URL(page.url()).pathname).toBe('/ui/');
    await page
      .locator('#who')
      .filter({ hasText: `ops@${alpha.hostId} (operator)` })
      .waitFor();
    const row = (name: string) => page.locator(`#roster tbody tr`, { hasText: name });
    await row('lead').waitFor();
    await row('builder').waitFor({ timeout: 30_000 });
    expect(await row('builder').textContent()).toContain(beta.hostId);
    await page.screenshot({ path: join(artifacts, 'console-roster.png') });

    // Registered on B after the page opened: it comes by presence, then by the event stream.
    await register(beta, 'worker', 'late-joiner');
    await row('late-joiner').waitFor({ timeout: 30_000 });
    expect(await page.locator('#link').getAttribute('data-state')).toBe('live');
    await page.screenshot({ path: join(artifacts, 'console-roster-live.png') });

    expect(problems).toEqual([]);
    const origin = new URL(url as string).origin;
    expect(requests.filter((request) => !request.startsWith(origin))).toEqual([]);
    await page.close();
  });

  it('a page without the session, or with a forged cookie, shows nothing of the gateway', async () => {
    const base = alpha.mcpUrl.replace(/\/mcp$/, '');
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      const bare = await page.goto(`${base}/ui/`);
      expect(bare?.status()).toBe(401);
      expect(await page.locator('body').textContent()).toMatch(/Run `bridge console`/);
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
