import type { Browser, Page } from 'playwright-core';
import { expect } from 'vitest';
import type { GatewayProcess } from './GatewayProcess.js';

export interface ConsolePage {
  readonly page: Page;
  /** Errors the page logged or threw. */
  readonly problems: string[];
  /** Every URL the page requested. */
  readonly requests: string[];
  readonly url: string;
}

/**
 * `agentbridge console --name NAME` on `gateway`, its one-time URL opened in a new page of
 * `browser`; what the page requested and any error it logged are kept for the test's end.
 */
export async function openConsole(
  gateway: GatewayProcess,
  browser: Browser,
  name: string,
): Promise<ConsolePage> {
  const printed = await gateway.cli(['console', '--name', name]);
  expect(printed.code, printed.stderr || printed.stdout).toBe(0);
  const url = /http:\/\/\S+\/ui\/login\?code=\S+/.exec(printed.stdout)?.[0];
  expect(url, printed.stdout).toBeDefined();
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const problems: string[] = [];
  const requests: string[] = [];
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error') problems.push(`console error: ${message.text()}`);
  });
  page.on('request', (request) => requests.push(request.url()));
  await page.goto(url as string, { waitUntil: 'load' });
  return { page, problems, requests, url: url as string };
}
