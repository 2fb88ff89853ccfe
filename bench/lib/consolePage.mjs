import { performance } from 'node:perf_hooks';

/**
 * What the console scenario (bench/scenarios/console.mjs) drives in the browser: a real headless
 * Chromium (test/support/chromium.ts findChromium, loaded through tsx, as the browser tests find
 * it) through playwright-core, one fresh context per page (no cookie, no cache kept between
 * loads), each page instrumented before its own scripts run (`instrumentPage`) so that what is
 * timed is timed by the page's clock, not by polling it from here.
 */

/**
 * What `instrumentPage` keeps in the page as `window.__bench` (times in the page's clock or wall ms).
 * @typedef {{
 *   expected: number,
 *   rosterInDom: number | null,
 *   rosterShown: number | null,
 *   flowsListed: number | null,
 *   events: Array<{ topic: string, at: number, bytes: number }>,
 *   renders: Array<{ at: number, removed: number, added: number, created: number }>,
 *   watches: Map<string, Watch>,
 *   watch: (key: string, selector: string, text: string) => void,
 *   found: (key: string) => Promise<Seen>,
 *   lags: number[],
 *   lagTimer?: ReturnType<typeof setInterval>,
 *   startLagProbe: () => void,
 *   stopLagProbe: () => number[],
 * }} BenchProbe
 */
/**
 * An element `watch` waits for: when it was first in the DOM, when it was shown (wall ms).
 * @typedef {{ selector: string, text: string, inDom: number | null, shown: number | null, resolve: (seen: Seen) => void, done: Promise<Seen> }} Watch
 * @typedef {{ inDom: number, shown: number }} Seen
 */
/** The page's window, instrumented. @typedef {typeof window & { __bench: BenchProbe }} BenchWindow */

/** Headless Chromium, found where the browser tests find it. */
export async function launchChromium() {
  // Imported here, not at the top: the other scenarios never load tsx or playwright.
  const [{ tsImport }, { chromium }] = await Promise.all([import('tsx/esm/api'), import('playwright-core')]);
  const { findChromium } = await tsImport('../../test/support/chromium.ts', import.meta.url);
  return chromium.launch({ executablePath: findChromium('the console bench') });
}

/** Wall-clock ms with sub-ms precision, comparable with the page's `timeOrigin + now()`. */
export const wallNow = () => performance.timeOrigin + performance.now();

/**
 * Runs in the page before ui/app.js (context.addInitScript). It records, in the page's clock
 * (ms since navigation start, the login URL's request included):
 * - `rosterInDom` / `rosterShown`: when `#roster tbody` first holds `expected` rows, and when the
 *   frame after that one has run (layout and paint of the table included);
 * - `flowsListed`: when the flows list was first filled (its count set);
 * - every message of the page's event stream as it arrives, before the page's own listener
 *   parses it (`events`: topic, wall ms, bytes), and per change of the roster table the rows it
 *   removed and added, and how many of those added were new elements (`created`; the others
 *   were rows kept and put back);
 * - `watch(key, selector, text)`: when an element matching `selector` with exactly `text` first
 *   appears (wall ms, in the DOM and after the next frame), for `found(key)` to resolve with;
 * - between `startLagProbe()` and `stopLagProbe()`, how late each tick of a 100 ms timer ran.
 * A MutationObserver sees each change right after the script that made it, so "in the DOM" is
 * when the page's own code finished rendering it.
 */
function instrumentPage({ expected }) {
  const wall = () => performance.timeOrigin + performance.now();
  /** The next frame's work (style, layout, paint) is done by the time a task posted from rAF runs. */
  const afterFrame = (record) => requestAnimationFrame(() => setTimeout(() => record()));
  /** @type {BenchProbe} */
  const bench = {
    expected,
    rosterInDom: null,
    rosterShown: null,
    flowsListed: null,
    events: [],
    renders: [],
    watches: new Map(),
    watch(key, selector, text) {
      /** @type {((seen: Seen) => void) | undefined} */
      let resolve;
      /** @type {Promise<Seen>} */
      const done = new Promise((r) => {
        resolve = r;
      });
      // The executor ran synchronously: resolve is set.
      bench.watches.set(key, {
        selector,
        text,
        inDom: null,
        shown: null,
        resolve: /** @type {(seen: Seen) => void} */ (resolve),
        done,
      });
      check();
    },
    // Called after watch(key).
    found: (key) => /** @type {Watch} */ (bench.watches.get(key)).done,
    lags: [],
    /** How late a 100 ms timer fires, each time: what a click or key would wait for the main thread. */
    startLagProbe() {
      bench.lags = [];
      let last = performance.now();
      bench.lagTimer = setInterval(() => {
        const now = performance.now();
        bench.lags.push(Math.max(0, now - last - 100));
        last = now;
      }, 100);
    },
    stopLagProbe() {
      clearInterval(bench.lagTimer);
      return bench.lags;
    },
  };
  /** @type {BenchWindow} */ (window).__bench = bench;

  const NativeEventSource = window.EventSource;
  window.EventSource = class extends NativeEventSource {
    #stamped = new Set();
    addEventListener(type, listener, options) {
      // Added just before the page's first listener of a topic, so it runs first: the arrival, not the render.
      if (!this.#stamped.has(type)) {
        this.#stamped.add(type);
        super.addEventListener(type, (event) => {
          if (typeof event.data === 'string')
            bench.events.push({ topic: type, at: wall(), bytes: event.data.length });
        });
      }
      super.addEventListener(type, listener, options);
    }
  };

  const rosterRows = () => document.querySelectorAll('#roster tbody tr[data-gid]');
  const check = (records = []) => {
    const removed = new Set();
    const added = [];
    for (const record of records) {
      if (record.target instanceof Element && record.target.matches('#roster tbody')) {
        for (const node of record.removedNodes) removed.add(node);
        added.push(...record.addedNodes);
      }
    }
    if (added.length > 0 || removed.size > 0) {
      const created = added.filter((node) => !removed.has(node)).length;
      bench.renders.push({ at: wall(), removed: removed.size, added: added.length, created });
    }
    if (bench.rosterInDom === null && (added.length > 0 || records.length === 0)) {
      if (rosterRows().length >= bench.expected) {
        bench.rosterInDom = performance.now();
        afterFrame(() => {
          bench.rosterShown = performance.now();
        });
      }
    }
    if (bench.flowsListed === null && document.getElementById('flows-count')?.textContent) {
      bench.flowsListed = performance.now();
    }
    for (const watch of bench.watches.values()) {
      if (watch.inDom !== null) continue;
      const hit = [...document.querySelectorAll(watch.selector)].some((el) => el.textContent === watch.text);
      if (!hit) continue;
      watch.inDom = wall();
      afterFrame(() => {
        watch.shown = wall();
        watch.resolve({ inDom: /** @type {number} */ (watch.inDom), shown: watch.shown });
      });
    }
  };
  new MutationObserver(check).observe(document, { childList: true, subtree: true, characterData: true });
}

/** Chrome's own counters of a page (CDP Performance.getMetrics), by name; durations in seconds. */
async function pageMetrics(cdp) {
  const { metrics } = await cdp.send('Performance.getMetrics');
  return Object.fromEntries(metrics.map(({ name, value }) => [name, value]));
}

/**
 * Opens `url` (a console login URL) in a fresh context of `browser`, instrumented to see
 * `expected` roster rows. Returns the page and what the scenario reads of it: `loaded()` waits
 * until the roster is complete and the flows are listed and returns the page-clock figures;
 * `metrics()` Chrome's counters; `liveMemory()` the DOM nodes and JS heap after a GC;
 * `startLagProbe()` / `stopLagProbe()` the page's timer delays in between;
 * `timeUntil(selector, text, action)` runs `action` and resolves with how long after its start
 * (wall ms) the element showed; `problems` the errors it logged to its console (a 503 of the
 * dead-letter list, single host, among them); `checkErrors(where)` fails if it threw.
 */
export async function openConsolePage(browser, url, { expected, timeoutMs = 60_000 }) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await context.addInitScript(instrumentPage, { expected });
  const page = await context.newPage();
  const problems = [];
  const pageErrors = [];
  page.on('pageerror', (err) => pageErrors.push(err.message));
  page.on('console', (message) => {
    if (message.type() === 'error') problems.push(`console error: ${message.text()}`);
  });
  const cdp = await context.newCDPSession(page);
  await cdp.send('Performance.enable');
  let watches = 0;

  /** `promise`, or a rejection naming `what` after `ms`. */
  const within = (promise, what, ms = timeoutMs) => {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`console page: ${what} not within ${ms} ms`)), ms);
    });
    return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
  };

  await page.goto(url, { waitUntil: 'commit', timeout: timeoutMs });
  return {
    page,
    cdp,
    problems,
    /**
     * Throws if the page threw: ui/app.js starts with top-level awaits, so one exception there
     * leaves a page that stopped halfway (no polling set up), whose figures mean nothing.
     */
    checkErrors(where) {
      if (pageErrors.length > 0)
        throw new Error(`the console page threw (${where}): ${pageErrors.join('; ')}`);
    },
    async loaded() {
      await within(
        page.waitForFunction(
          () =>
            /** @type {BenchWindow} */ (window).__bench?.rosterShown !== null &&
            /** @type {BenchWindow} */ (window).__bench?.flowsListed !== null,
          undefined,
          { timeout: timeoutMs, polling: 50 },
        ),
        `the roster of ${expected} and the flows`,
      );
      const figures = await page.evaluate(() => {
        // The page's performance (a browser's), not the one this module imports from node:perf_hooks.
        const paint = performance.getEntriesByName('first-contentful-paint')[0];
        const [navigation] = /** @type {PerformanceNavigationTiming[]} */ (
          /** @type {Performance} */ (/** @type {unknown} */ (performance)).getEntriesByType('navigation')
        );
        const bench = /** @type {BenchWindow} */ (window).__bench;
        return {
          fcpMs: paint ? paint.startTime : null,
          htmlMs: navigation ? navigation.responseEnd : null,
          rosterInDomMs: bench.rosterInDom,
          rosterShownMs: bench.rosterShown,
          flowsListedMs: bench.flowsListed,
          firstPushBytes: bench.events.find((e) => e.topic === 'roster')?.bytes ?? null,
          rows: document.querySelectorAll('#roster tbody tr[data-gid]').length,
          flows: document.querySelectorAll('#flows tbody tr').length,
          redirected: navigation ? navigation.redirectCount : null,
        };
      });
      return { ...figures, path: new URL(page.url()).pathname };
    },
    metrics: () => pageMetrics(cdp),
    async liveMemory() {
      await cdp.send('HeapProfiler.collectGarbage');
      const metrics = await pageMetrics(cdp);
      return { nodes: metrics.Nodes, jsHeapUsedMB: metrics.JSHeapUsedSize / 2 ** 20 };
    },
    startLagProbe: () => page.evaluate(() => /** @type {BenchWindow} */ (window).__bench.startLagProbe()),
    stopLagProbe: () => page.evaluate(() => /** @type {BenchWindow} */ (window).__bench.stopLagProbe()),
    /** The event-stream messages the page got so far, by topic: how many, and their bytes. */
    stream: () =>
      page.evaluate(() => {
        const byTopic = {};
        for (const { topic, bytes } of /** @type {BenchWindow} */ (window).__bench.events) {
          byTopic[topic] ??= { messages: 0, bytes: 0 };
          byTopic[topic].messages++;
          byTopic[topic].bytes += bytes;
        }
        return byTopic;
      }),
    async timeUntil(selector, text, action) {
      const key = `w${watches++}`;
      await page.evaluate(
        ([k, s, t]) => /** @type {BenchWindow} */ (window).__bench.watch(k, s, t),
        [key, selector, text],
      );
      const startedAt = wallNow();
      await action();
      const { inDom, shown } = await within(
        page.evaluate((k) => /** @type {BenchWindow} */ (window).__bench.found(k), key),
        `"${text}" in ${selector}`,
      );
      return { startedAt, inDomMs: inDom - startedAt, shownMs: shown - startedAt, shownAt: shown };
    },
    close: () => context.close(),
  };
}
