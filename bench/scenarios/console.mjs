import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { adminRoutes } from '#bridge/interfaces/adminProtocol';
import { inParallel } from '../lib/cluster.mjs';
import { launchChromium, openConsolePage, wallNow } from '../lib/consolePage.mjs';
import { adminClient, startDaemon } from '../lib/daemon.mjs';
import { percentile, round } from '../lib/measure.mjs';
import { createTeardown } from '../lib/processes.mjs';
import { noProgress } from '../lib/progress.mjs';
import {
  commandLine,
  loadAverage,
  machineInfo,
  renderTable,
  sectionHead,
  writeResultsSection,
} from '../lib/report.mjs';
import { intSetting } from '../lib/settings.mjs';
import { killTmuxServerSync, startCatPane } from '../lib/submissionTargets.mjs';

/** @typedef {import('../lib/consolePage.mjs').BenchWindow} BenchWindow */

/**
 * The operator console under load (`BENCH_ONLY=console`): "the console stays responsive with
 * 1,000 entities and 10,000 recent deliveries". Two `agentbridge start` daemons, each its own process,
 * single host (no broker), side by side for the whole run:
 * - **loaded**: BENCH_CONSOLE_ENTITIES entities registered over the admin socket (POST
 *   /v1/register): the send target `target`, every 10th of the others a worker on one shared
 *   `cat` pane of a private tmux server (so the roster has workers with their Stop button; nothing
 *   is sent to them), the rest mains; then BENCH_CONSOLE_DELIVERIES messages between the mains
 *   over the admin socket (POST /v1/send, 16 in flight), of which every 100th to one of ten extra
 *   mains that are deregistered afterwards (their messages dead-lettered), and every even main's
 *   inbox drained (POST /v1/drain): the log holds that many recent deliveries, held, acked and
 *   dead-lettered, and the flows list of the last hour is full (its 200-row cap);
 * - **empty**, the baseline: only `target` (and the operator the login registers).
 *
 * Measured in a real headless Chromium (playwright-core), the page instrumented before its own
 * scripts run (bench/lib/consolePage.mjs), BENCH_CONSOLE_ROUNDS rounds, each opening one page on
 * each gateway in turn (the order flipped every round), one at a time, each in a fresh browser
 * context with a fresh login URL (POST /v1/console/login on the admin socket: the route and the
 * URL `agentbridge console` prints):
 * - first paint: First Contentful Paint, and until the roster is complete (every entity's row,
 *   the operator's included, in `#roster tbody` and the next frame done) and the flows listed,
 *   from the start of navigation (the login URL's redirect included); Chrome's main-thread time
 *   until then (CDP TaskDuration), the DOM nodes and JS heap after a GC;
 * - update latency: with the page open, BENCH_CONSOLE_UPDATES new mains registered over the admin
 *   socket, one at a time, each timed until its row is shown without a reload (split into the wait
 *   for the event stream's push and the page's render of it); then a message typed into the page's
 *   send form to `target`, until its row is in the sent table, and, once `target` is drained over
 *   the admin socket, until that row's stage reads handed-over.
 * Then a page open on each gateway (both at once) for BENCH_CONSOLE_IDLE_SECONDS left alone, and
 * as long again while a main sends BENCH_CONSOLE_BUSY_RATE messages a second to `target` on each
 * (its queue depth, in the roster, changes on every tick, as it does while agents work): the
 * page's main-thread time, how late a 100 ms timer in it fires (what a click would wait), its
 * roster pushes and requests (the page's polling), the daemon's CPU, beside the same daemons with
 * no page open. Before the rounds, the page's read API is timed from here (BENCH_CONSOLE_API_CALLS
 * calls each, alternating gateways): roster, flows, overview, one entity's deliveries.
 *
 * Ratios follow the fleet convention: empty ÷ loaded for times, sizes and CPU (≥ 1.00: as good
 * as the empty gateway). The server reads the roster once a second and pushes it when it changed
 * (src/interfaces/ConsoleFeed.ts, its roster topic), and a sent message's stage is polled every
 * 1 s (ui/app.js follow): both
 * gateways wait for them alike (each timed change first waits a pause spread evenly over one
 * tick, so that wait is sampled over the whole tick), and the rows after "new entity" split it
 * off from the page's own work.
 *
 * Settings (env): BENCH_CONSOLE_ENTITIES (1000), BENCH_CONSOLE_DELIVERIES (10000),
 * BENCH_CONSOLE_ROUNDS (page loads per gateway, 6), BENCH_CONSOLE_UPDATES (new entities per
 * round, 3), BENCH_CONSOLE_IDLE_SECONDS (each of the idle and busy windows, 10; 0 skips them),
 * BENCH_CONSOLE_BUSY_RATE (messages a second in the busy window, 20), BENCH_CONSOLE_API_CALLS (10).
 * Needs Chromium (test/support/chromium.ts) and tmux. It writes its own section of bench/results.md
 * (and the `console` key of results.json), also when run alone.
 */

export const consoleScenario = {
  name: 'console',
  title: 'the operator console with 1,000 entities and 10,000 recent deliveries',
  timeoutMs: 300_000,
};

/** Messages in flight while the loaded gateway is filled. */
const sendConcurrency = 16;
const registerConcurrency = 8;
/** Mains that get messages and then leave, so some deliveries are dead letters. */
const leavers = 10;
/** Messages are at most this many per drain (limits.maxDrain's default). */
const drainMax = 100;
/** About the size of an agent's short message, as the other scenarios send. */
const messageBytes = 120;
/** The server's roster period and the page's stage poll (the console feed's roster topic, ui/app.js follow). */
const tickMs = 1_000;

/**
 * A pause before the k-th timed change, spread evenly over one tick (golden-ratio steps, the
 * same sequence on both gateways). Without it each change lands at the same phase of the 1 s
 * tick as the one before (the loop's own pace sets it), and the wait for the tick measures
 * that pace, not the console.
 */
const tickPhaseMs = (k) => ((k * 0.6180339887) % 1) * tickMs;

export function consoleSettings(env = process.env) {
  return {
    entities: intSetting('BENCH_CONSOLE_ENTITIES', 1000, 1, env),
    deliveries: intSetting('BENCH_CONSOLE_DELIVERIES', 10_000, 0, env),
    rounds: intSetting('BENCH_CONSOLE_ROUNDS', 6, 1, env),
    updates: intSetting('BENCH_CONSOLE_UPDATES', 3, 0, env),
    idleSeconds: intSetting('BENCH_CONSOLE_IDLE_SECONDS', 10, 0, env),
    busyRate: intSetting('BENCH_CONSOLE_BUSY_RATE', 20, 1, env),
    apiCalls: intSetting('BENCH_CONSOLE_API_CALLS', 10, 1, env),
  };
}

/** Progress-bar steps the scenario takes. */
export function consoleSteps(settings = consoleSettings()) {
  // Start, the loaded gateway's three fill steps, a step per round, the windows.
  return 4 + settings.rounds + (settings.idleSeconds > 0 ? 1 : 0);
}

/** p50/p95/max of the numbers among `values` (a side that could not measure one leaves a gap). */
function stats(values) {
  const present = values.filter((v) => typeof v === 'number' && Number.isFinite(v));
  if (present.length === 0) return { n: 0, p50: null, p95: null, max: null };
  const sorted = [...present].sort((a, b) => a - b);
  return {
    n: sorted.length,
    p50: round(percentile(sorted, 0.5), 2),
    p95: round(percentile(sorted, 0.95), 2),
    max: round(sorted.at(-1), 2),
  };
}

/** A results row: the loaded gateway beside the empty one; ratio = empty ÷ loaded (≥ 1 as good). */
function row(measure, unit, loaded, empty) {
  const l = stats(loaded);
  const e = stats(empty);
  const ratio = (key) => (l[key] && e[key] !== null ? round(e[key] / l[key], 3) : null);
  return { measure, unit, loaded: l, empty: e, ratioP50: ratio('p50'), ratioP95: ratio('p95') };
}

/** Round `i`'s order: loaded first on even rounds, empty first on odd ones. */
const sidesFor = (i) => (i % 2 === 0 ? ['loaded', 'empty'] : ['empty', 'loaded']);

/** One gateway of the two: the daemon, its admin client, and what the measurements collect. */
async function startSide({ name, work, configFile, teardown }) {
  const home = join(work, name);
  const daemon = await startDaemon({ home, env: { BRIDGE_HOST_ID: `console-${name}` }, configFile });
  teardown.add(() => daemon.stop());
  const admin = adminClient(daemon.adminSocket);
  teardown.add(() => admin.close());
  const target = await admin.call(adminRoutes.register, { kind: 'main', name: 'target' });
  return { name, daemon, admin, target, host: `console-${name}`, changes: 0, samples: {} };
}

function sample(side, key, value) {
  side.samples[key] ??= [];
  side.samples[key].push(value);
}

/** Fills the loaded gateway: entities, then deliveries between its mains; returns what it made. */
async function populate(side, { work, settings, progress, teardown, log }) {
  const { admin } = side;
  const others = settings.entities - 1;
  const workerCount = Math.floor(others / 10);
  let pane;
  if (workerCount > 0) {
    const socket = join(work, 'workers.sock');
    teardown.add(() => killTmuxServerSync(socket));
    pane = { type: 'tmux', target: await startCatPane(socket, 'workers', join(work, 'workers.txt')), socket };
  }
  progress.step('console · loaded gateway: register entities', others + leavers);
  const startedAt = performance.now();
  const mains = [];
  await inParallel(
    others,
    registerConcurrency,
    async (i) => {
      const worker = i % 10 === 9;
      const registered = await admin.call(adminRoutes.register, {
        kind: worker ? 'worker' : 'main',
        name: worker ? `w${i}` : `m${i}`,
        ...(worker ? { pane } : {}),
      });
      if (!worker) mains.push(registered);
    },
    (done) => progress.update(done),
  );
  const leaving = await inParallel(leavers, registerConcurrency, (i) =>
    admin.call(adminRoutes.register, { kind: 'main', name: `leaver${i}` }),
  );
  const registerSeconds = (performance.now() - startedAt) / 1000;
  // Sorted by name, so which main sends to which is the same on every run.
  mains.sort((a, b) => a.name.localeCompare(b.name, 'en', { numeric: true }));

  progress.step('console · loaded gateway: send deliveries', settings.deliveries);
  const sendAt = performance.now();
  const text = (i) => `console bench ${i} ${'x'.repeat(messageBytes)}`;
  await inParallel(
    mains.length > 1 ? settings.deliveries : 0,
    sendConcurrency,
    async (i) => {
      const sender = i % mains.length;
      // Any other main (an offset of 1 to length - 1), spread so every inbox gets some.
      const to =
        i % 100 === 0
          ? leaving[(i / 100) % leavers]
          : mains[(sender + 1 + ((i * 7) % (mains.length - 1))) % mains.length];
      const from = mains[sender];
      await admin.call(adminRoutes.send, { token: from.token, to: to.gid, text: text(i) });
    },
    (done) => progress.update(done),
  );
  const sendSeconds = (performance.now() - sendAt) / 1000;

  progress.step('console · loaded gateway: drain half the mains, deregister the leavers');
  let drained = 0;
  await inParallel(Math.ceil(mains.length / 2), registerConcurrency, async (k) => {
    const main = mains[2 * k];
    for (;;) {
      const envelopes = await admin.call(adminRoutes.drain, { token: main.token, max: drainMax });
      drained += envelopes.length;
      if (envelopes.length < drainMax) return;
    }
  });
  for (const leaver of leaving) await admin.call(adminRoutes.deregister, { address: leaver.gid });
  log(
    `console: loaded gateway: ${settings.entities} entities (${workerCount} workers) in ${round(registerSeconds, 1)} s, ` +
      `${settings.deliveries} deliveries in ${round(sendSeconds, 1)} s, ${drained} drained, ${leavers} leavers deregistered`,
  );
  // The main whose latest deliveries the API timing reads: an odd one, not drained, so it holds messages.
  side.busiest = mains[1] ?? side.target;
  return {
    workers: workerCount,
    mains: mains.length + 1,
    registerSeconds: round(registerSeconds, 1),
    sendSeconds: round(sendSeconds, 1),
    sendsPerSecond: sendSeconds > 0 ? round(settings.deliveries / sendSeconds, 0) : null,
    drained,
  };
}

/** A console session for this process (what a browser does with the login URL): its cookie. */
async function apiSession(side) {
  const login = await side.admin.call(adminRoutes.consoleLogin, {});
  const res = await fetch(login.url, { redirect: 'manual' });
  const cookie = res.headers.get('set-cookie')?.split(';')[0];
  if (res.status !== 303 || !cookie) throw new Error(`console login on ${side.name} answered ${res.status}`);
  return { origin: new URL(login.url).origin, cookie };
}

/** Times the page's read API from here, alternating gateways; returns ms per path and side. */
async function timeApi(sides, calls) {
  const paths = (side) => ({
    roster: '/ui/api/roster',
    flows: '/ui/api/flows',
    overview: '/ui/api/overview',
    entity: `/ui/api/entity?gid=${(side.busiest ?? side.target).gid}`,
  });
  const sessions = new Map();
  for (const side of sides) sessions.set(side, await apiSession(side));
  const bytes = {};
  for (let i = 0; i < calls; i++) {
    for (const name of sidesFor(i)) {
      const side = sides.find((s) => s.name === name);
      const { origin, cookie } = sessions.get(side);
      for (const [what, path] of Object.entries(paths(side))) {
        const startedAt = performance.now();
        const res = await fetch(`${origin}${path}`, { headers: { cookie } });
        const body = await res.arrayBuffer();
        if (!res.ok) throw new Error(`GET ${path} on ${side.name}: ${res.status}`);
        sample(side, `api ${what}`, performance.now() - startedAt);
        bytes[`${side.name} ${what}`] = body.byteLength;
      }
    }
  }
  const overview = {};
  for (const side of sides) {
    const { origin, cookie } = sessions.get(side);
    overview[side.name] = await (await fetch(`${origin}/ui/api/overview`, { headers: { cookie } })).json();
  }
  return { bytes, overview };
}

async function rosterSize(side) {
  return (await side.admin.call(adminRoutes.roster, {})).length;
}

/** One page load on one gateway, then its updates and one send from the page. */
async function pageRound(side, { browser, settings, round: roundIndex, problems }) {
  const expected = await rosterSize(side);
  const { url } = await side.admin.call(adminRoutes.consoleLogin, {});
  const console_ = await openConsolePage(browser, url, { expected });
  try {
    const loaded = await console_.loaded();
    if (loaded.path !== '/ui/' || loaded.rows !== expected) {
      throw new Error(
        `console page on ${side.name}: at ${loaded.path} with ${loaded.rows} of ${expected} rows`,
      );
    }
    const metrics = await console_.metrics();
    sample(side, 'fcp', loaded.fcpMs);
    sample(side, 'roster shown', loaded.rosterShownMs);
    sample(side, 'roster in DOM', loaded.rosterInDomMs);
    sample(side, 'flows listed', loaded.flowsListedMs);
    sample(side, 'main thread until loaded', metrics.TaskDuration * 1000);
    sample(
      side,
      'style and layout until loaded',
      (metrics.RecalcStyleDuration + metrics.LayoutDuration) * 1000,
    );
    sample(side, 'first push KB', loaded.firstPushBytes / 1024);
    side.flows = loaded.flows;
    const memory = await console_.liveMemory();
    sample(side, 'dom nodes', memory.nodes);
    sample(side, 'js heap', memory.jsHeapUsedMB);

    for (let u = 0; u < settings.updates; u++) {
      const name = `late-${roundIndex}-${u}`;
      await sleep(tickPhaseMs(side.changes++));
      const timed = await console_.timeUntil('#roster tbody tr[data-gid] > td:first-child', name, () =>
        side.admin.call(adminRoutes.register, { kind: 'main', name }),
      );
      // The push that brought the row: the last one before the row was in the DOM.
      const { push, render } = await console_.page.evaluate(
        ([since, until]) => {
          const { events, renders } = /** @type {BenchWindow} */ (window).__bench;
          return {
            push: events.filter((e) => e.topic === 'roster' && e.at >= since && e.at <= until).at(-1),
            render: renders.find((r) => r.at >= since),
          };
        },
        [timed.startedAt, timed.startedAt + timed.inDomMs],
      );
      sample(side, 'new entity shown', timed.shownMs);
      if (push) {
        sample(side, 'new entity: wait for push', push.at - timed.startedAt);
        sample(side, 'new entity: push to DOM', timed.startedAt + timed.inDomMs - push.at);
        sample(side, 'new entity: DOM to shown', timed.shownMs - timed.inDomMs);
      }
      if (render) side.lastRender = render;
    }

    const text = `from the console ${side.name} ${roundIndex}`;
    const { page } = console_;
    await page.locator('#send input[name=to]').fill('target');
    await page.locator('#send input[name=text]').fill(text);
    const sent = await console_.timeUntil('#sent tbody tr > td:nth-child(2)', text, () =>
      page.locator('#send button[type=submit]').click(),
    );
    sample(side, 'send from page shown', sent.shownMs);
    const msgId = await page.locator('#sent tbody tr', { hasText: text }).getAttribute('data-msg-id');
    await sleep(tickPhaseMs(side.changes++));
    const stage = await console_.timeUntil(
      `#sent tbody tr[data-msg-id="${msgId}"] td.stage`,
      'handed-over',
      () => side.admin.call(adminRoutes.drain, { token: side.target.token, max: drainMax }),
    );
    sample(side, 'stage handed-over shown', stage.shownMs);
    console_.checkErrors(`${side.name}, round ${roundIndex + 1}`);
    for (const problem of console_.problems) problems.add(`${side.name}: ${problem}`);
  } finally {
    await console_.close();
  }
}

/** Per path of the page's own requests: how many, and the response bytes, over a window. */
function countRequests(page) {
  const byPath = {};
  const onFinished = async (request) => {
    const path = new URL(request.url()).pathname;
    byPath[path] ??= { requests: 0, bytes: 0 };
    const entry = byPath[path];
    entry.requests++;
    try {
      entry.bytes += (await request.sizes()).responseBodySize;
    } catch {
      // The page closed before the sizes were read: the request is still counted.
    }
  };
  page.on('requestfinished', onFinished);
  return {
    byPath,
    stop: () => page.off('requestfinished', onFinished),
  };
}

/** The CPU each side's daemon used while `during` ran, in % of one core. */
async function daemonCpuOver(sides, during) {
  const before = sides.map((side) => side.daemon.cpuMs());
  const startedAt = performance.now();
  await during();
  const elapsed = performance.now() - startedAt;
  return sides.map((side, i) => round(((side.daemon.cpuMs() - before[i]) / elapsed) * 100, 2));
}

/**
 * One window of `seconds` with each side's page open (`pages`, in the order of `sides`) while
 * `during` runs: per side the page's main-thread and script time per second, its layouts, the
 * delays of a 100 ms timer in it (how long an input would wait), what its event stream brought
 * by topic, its own requests by path, and the daemon's CPU.
 */
async function pageWindow(sides, pages, seconds, during) {
  const before = await Promise.all(
    pages.map(async (p) => ({ metrics: await p.metrics(), stream: await p.stream() })),
  );
  const counters = pages.map((p) => countRequests(p.page));
  await Promise.all(pages.map((p) => p.startLagProbe()));
  const startedAt = wallNow();
  const cpu = await daemonCpuOver(sides, during);
  for (const counter of counters) counter.stop();
  return Promise.all(
    sides.map(async (side, i) => {
      const lags = await pages[i].stopLagProbe();
      const renders = await pages[i].page.evaluate((since) => {
        const within = /** @type {BenchWindow} */ (window).__bench.renders.filter((r) => r.at >= since);
        const sum = (key) => within.reduce((total, r) => total + r[key], 0);
        return {
          changes: within.length,
          removed: sum('removed'),
          added: sum('added'),
          created: sum('created'),
        };
      }, startedAt);
      const after = { metrics: await pages[i].metrics(), stream: await pages[i].stream() };
      const delta = (name) => after.metrics[name] - before[i].metrics[name];
      const perMinute = 60 / seconds;
      const requests = Object.fromEntries(
        Object.entries(counters[i].byPath).map(([path, { requests: n, bytes }]) => [
          path,
          { perMinute: round(n * perMinute, 1), kBPerMinute: round((bytes * perMinute) / 1024, 1) },
        ]),
      );
      const stream = Object.fromEntries(
        Object.entries(after.stream).map(([topic, { messages, bytes }]) => {
          const earlier = before[i].stream[topic] ?? { messages: 0, bytes: 0 };
          return [
            topic,
            {
              perMinute: round((messages - earlier.messages) * perMinute, 1),
              kBPerMinute: round(((bytes - earlier.bytes) * perMinute) / 1024, 1),
            },
          ];
        }),
      );
      const pushes = (after.stream.roster?.messages ?? 0) - (before[i].stream.roster?.messages ?? 0);
      const kB = (byName) => Object.values(byName).reduce((sum, r) => sum + r.kBPerMinute, 0);
      return {
        side: side.name,
        daemonCpuPercent: cpu[i],
        pageMainThreadMsPerSecond: round((delta('TaskDuration') * 1000) / seconds, 1),
        pageScriptMsPerSecond: round((delta('ScriptDuration') * 1000) / seconds, 1),
        pageStyleAndLayoutMsPerSecond: round(
          ((delta('RecalcStyleDuration') + delta('LayoutDuration')) * 1000) / seconds,
          1,
        ),
        layoutsPerMinute: round(delta('LayoutCount') * perMinute, 1),
        lagMs: lags.map((lag) => round(lag, 1)),
        rosterPushes: pushes,
        rosterPushesPerSecond: round(pushes / seconds, 2),
        rosterTableChanges: renders,
        stream,
        requests,
        kBPerMinute: round(kB(stream) + kB(requests), 1),
      };
    }),
  );
}

/** Messages from `senders[i]` to `target` on each side at once, `rate` a second each, for `ms`. */
async function traffic(sides, senders, { rate, ms }) {
  const count = Math.max(1, Math.round((rate * ms) / 1000));
  await Promise.all(
    sides.map(async (side, i) => {
      const startedAt = performance.now();
      for (let k = 0; k < count; k++) {
        const wait = startedAt + (k * 1000) / rate - performance.now();
        if (wait > 0) await sleep(wait);
        await side.admin.call(adminRoutes.send, {
          token: senders[i].token,
          to: side.target.gid,
          text: `console bench traffic ${k}`,
        });
      }
      const left = startedAt + ms - performance.now();
      if (left > 0) await sleep(left);
    }),
  );
}

/**
 * Both daemons with no page open, then one page on each (both open at once): left alone, then
 * while a main sends `busyRate` messages a second to `target` on each gateway, so that the roster
 * changes (target's queue depth) on every tick, as it does while agents work.
 */
async function windows(sides, { browser, settings, problems }) {
  const seconds = settings.idleSeconds;
  const ms = seconds * 1000;
  const senders = await Promise.all(
    sides.map((side) => side.admin.call(adminRoutes.register, { kind: 'main', name: 'sender' })),
  );
  // Past the last round's page: its event stream closed, the daemons' GC after it done.
  await sleep(3_000);
  const withoutPage = await daemonCpuOver(sides, () => sleep(ms));
  const pages = [];
  try {
    for (const side of sides) {
      const { url } = await side.admin.call(adminRoutes.consoleLogin, {});
      const opened = await openConsolePage(browser, url, { expected: await rosterSize(side) });
      pages.push(opened);
      await opened.loaded();
    }
    // Past the pages' start: their first polls and the GC after the first render.
    await sleep(3_000);
    const idle = await pageWindow(sides, pages, seconds, () => sleep(ms));
    const busy = await pageWindow(sides, pages, seconds, () =>
      traffic(sides, senders, { rate: settings.busyRate, ms }),
    );
    sides.forEach((side, i) => {
      pages[i].checkErrors(`${side.name}, idle and busy windows`);
      for (const problem of pages[i].problems) problems.add(`${side.name}: ${problem}`);
    });
    return sides.map((side, i) => ({
      side: side.name,
      daemonCpuPercentNoPage: withoutPage[i],
      idle: idle[i],
      busy: busy[i],
    }));
  } finally {
    for (const opened of pages) await opened.close();
  }
}

/** A side's windows as results.json keeps them: the timer delays summed up, not each one. */
function storedWindows(w) {
  const summary = (x) => {
    const { lagMs, ...rest } = x;
    return { ...rest, lagMs: { ...stats(lagMs), over20: lagMs.filter((lag) => lag > 20).length } };
  };
  return { ...w, idle: summary(w.idle), busy: summary(w.busy) };
}

/** The rows of the results table, in the order they read best. */
function resultRows(sides, idle) {
  const [loaded, empty] = sides;
  const both = (key) => [loaded.samples[key] ?? [], empty.samples[key] ?? []];
  const rows = [
    row('first contentful paint', 'ms', ...both('fcp')),
    row('roster complete (all rows shown)', 'ms', ...both('roster shown')),
    row('flows of the last hour listed', 'ms', ...both('flows listed')),
    row('main-thread time until loaded', 'ms', ...both('main thread until loaded')),
    row('  of which: style and layout', 'ms', ...both('style and layout until loaded')),
    row('new entity → its row shown', 'ms', ...both('new entity shown')),
    row('  of which: until the roster push arrives', 'ms', ...both('new entity: wait for push')),
    row('  of which: push → rows rebuilt (parse, DOM)', 'ms', ...both('new entity: push to DOM')),
    row('  of which: rebuilt → frame done (layout…)', 'ms', ...both('new entity: DOM to shown')),
    row('send from the page → row in sent', 'ms', ...both('send from page shown')),
    row('drain → stage handed-over shown', 'ms', ...both('stage handed-over shown')),
    row('roster push (the whole roster)', 'KB', ...both('first push KB')),
    row('DOM nodes (after load)', 'nodes', ...both('dom nodes')),
    row('JS heap after GC (after load)', 'MB', ...both('js heap')),
    row('GET /ui/api/roster (from node)', 'ms', ...both('api roster')),
    row('GET /ui/api/flows (from node)', 'ms', ...both('api flows')),
    row('GET /ui/api/overview (from node)', 'ms', ...both('api overview')),
    row('GET /ui/api/entity (from node)', 'ms', ...both('api entity')),
  ];
  if (idle) {
    const [l, e] = idle;
    const pair = (measure, unit, read) => row(measure, unit, read(l), read(e));
    rows.push(
      pair('idle page: main-thread time', 'ms/s', (w) => [w.idle.pageMainThreadMsPerSecond]),
      pair('idle page: a 100 ms timer’s delay', 'ms', (w) => w.idle.lagMs),
      pair('idle page: event stream + requests', 'KB/min', (w) => [w.idle.kBPerMinute]),
      pair('busy page: event stream + requests', 'KB/min', (w) => [w.busy.kBPerMinute]),
      pair('daemon CPU, idle, no page', '% core', (w) => [w.daemonCpuPercentNoPage]),
      pair('daemon CPU, idle, page open', '% core', (w) => [w.idle.daemonCpuPercent]),
      pair('busy: roster pushes', 'per s', (w) => [w.busy.rosterPushesPerSecond]),
      pair('busy page: main-thread time', 'ms/s', (w) => [w.busy.pageMainThreadMsPerSecond]),
      pair('busy page: a 100 ms timer’s delay', 'ms', (w) => w.busy.lagMs),
      pair('daemon CPU, busy, page open', '% core', (w) => [w.busy.daemonCpuPercent]),
    );
  }
  return rows;
}

/**
 * Runs the scenario; returns its results. Its daemons, browser and tmux server are gone when it
 * returns or throws (the run's exit handler kills the daemons if it never gets that far).
 */
export async function runConsoleBench({
  dir,
  settings = consoleSettings(),
  progress = noProgress,
  log = console.error,
  configFile,
}) {
  const started = performance.now();
  const loadAtStart = loadAverage();
  const work = join(dir, 'console');
  mkdirSync(work, { recursive: true });
  const teardown = createTeardown();
  const onExit = () => killTmuxServerSync(join(work, 'workers.sock'));
  process.on('exit', onExit);
  try {
    progress.step('console · start two gateways and Chromium');
    const loaded = await startSide({ name: 'loaded', work, configFile, teardown });
    const empty = await startSide({ name: 'empty', work, configFile, teardown });
    const sides = [loaded, empty];
    const browser = await launchChromium();
    teardown.add(() => browser.close());
    const setup = await populate(loaded, { work, settings, progress, teardown, log });

    const api = await timeApi(sides, settings.apiCalls);
    const problems = new Set();
    for (let r = 0; r < settings.rounds; r++) {
      progress.step(`console · round ${r + 1}/${settings.rounds}: page load, updates, a send`, 2);
      for (const name of sidesFor(r)) {
        await pageRound(
          sides.find((side) => side.name === name),
          { browser, settings, round: r, problems },
        );
        progress.tick();
      }
    }
    let idle;
    if (settings.idleSeconds > 0) {
      progress.step(`console · no page, then a page open, idle and busy (${settings.idleSeconds} s each)`);
      idle = await windows(sides, { browser, settings, problems });
    }
    const rows = resultRows(sides, idle);
    const rosterOf = {};
    for (const side of sides) rosterOf[side.name] = await rosterSize(side);
    const results = {
      date: new Date().toISOString(),
      command: commandLine(),
      durationSeconds: round((performance.now() - started) / 1000, 1),
      machine: machineInfo(work, loadAtStart),
      settings,
      setup: {
        ...setup,
        rosterAtEnd: rosterOf,
        deliveriesByState: Object.fromEntries(
          sides.map((side) => [side.name, api.overview[side.name]?.deliveries ?? {}]),
        ),
        flowsListed: Object.fromEntries(sides.map((side) => [side.name, side.flows ?? null])),
        apiBytes: api.bytes,
        lastRosterRender: Object.fromEntries(sides.map((side) => [side.name, side.lastRender ?? null])),
      },
      rows,
      /** Every sample the rows were drawn from, in the order taken (ms unless the row says otherwise). */
      samples: Object.fromEntries(
        sides.map((side) => [
          side.name,
          Object.fromEntries(
            Object.entries(side.samples).map(([key, values]) => [key, values.map((v) => round(v, 2))]),
          ),
        ]),
      ),
      ...(idle ? { idle: idle.map(storedWindows) } : {}),
      problems: [...problems],
    };
    for (const line of renderConsole(results).split('\n')) log(line);
    return results;
  } finally {
    await teardown.run();
    process.off('exit', onExit);
  }
}

const value = (v) => (v === null ? '—' : v.toFixed(Math.abs(v) >= 100 ? 0 : Math.abs(v) >= 10 ? 1 : 2));
const ratio = (v) => (v === null ? '—' : v.toFixed(2));

/** @type {import('../lib/report.mjs').Column[]} */
const consoleColumns = [
  ['measure', (r) => r.measure],
  ['unit', (r) => r.unit],
  ['loaded p50', (r) => value(r.loaded.p50)],
  ['loaded p95', (r) => value(r.loaded.p95)],
  ['empty p50', (r) => value(r.empty.p50)],
  ['empty p95', (r) => value(r.empty.p95)],
  ['ratio p50', (r) => ratio(r.ratioP50)],
  ['ratio p95', (r) => ratio(r.ratioP95)],
  ['n', (r) => `${r.loaded.n} · ${r.empty.n}`],
];

export const consoleRatioNote =
  'ratio = empty ÷ loaded, of the p50 and of the p95 (≥ 1.00: the console with 1,000 entities and 10,000 recent ' +
  'deliveries is as fast, as small or as cheap as on an empty gateway; 0.25: four times slower or bigger). ' +
  'loaded: the gateway with the entities and deliveries; empty: the baseline, the same daemon with only the ' +
  'operator and the send target, in the same run, page loads alternating. Page times are the page’s own clock ' +
  'from the start of navigation (the login URL’s redirect included); update times from the admin-socket call or ' +
  'the click that caused them until the frame after the change was in the DOM. n: samples, loaded · empty.';

/** The console rows as a table (Markdown or terminal text). */
export function renderConsole(results, { markdown = false } = {}) {
  return renderTable(results.rows, { markdown, columns: consoleColumns });
}

const sectionStart = '<!-- console:start (written by BENCH_ONLY=console node bench/run.mjs) -->';
const sectionEnd = '<!-- console:end -->';

/** One side's idle and busy windows, for the section's prose. */
function windowLine(w) {
  const perMinute = (byName) =>
    Object.entries(byName)
      .filter(([, r]) => r.perMinute > 0)
      .map(([name, r]) => `${name} ${r.perMinute}×/min ${r.kBPerMinute} KB`)
      .join(', ') || 'none';
  const part = (name, x) =>
    `${name} ${x.pageMainThreadMsPerSecond} ms/s main thread (${x.pageScriptMsPerSecond} ms/s script, ${x.pageStyleAndLayoutMsPerSecond} ms/s style and layout, ${x.layoutsPerMinute} layouts/min), ` +
    `timer delay max ${x.lagMs.max} ms (${x.lagMs.over20} of ${x.lagMs.n} over 20 ms), ${x.rosterTableChanges.changes} changes of the roster table creating ${x.rosterTableChanges.created} rows, ` +
    `daemon ${x.daemonCpuPercent} % of a core; event stream: ${perMinute(x.stream)}; requests: ${perMinute(x.requests)}`;
  return `**${w.side}**: ${part('idle', w.idle)}. ${part('busy', w.busy)}.`;
}

/** One change of the roster table, in words. */
const render = (r) =>
  r
    ? `${r.removed} rows and got ${r.added}, ${r.created} of them new elements (the others kept rows put back)`
    : '—';

function consoleSection(results) {
  const { machine, settings, setup, idle } = results;
  const busy = machine.loadAverage1m.start >= machine.cores;
  const states = (side) =>
    Object.entries(setup.deliveriesByState[side] ?? {})
      .map(([state, n]) => `${n} ${state}`)
      .join(', ') || 'none';
  const lines = [
    sectionStart,
    ...sectionHead(
      'Operator console: 1,000 entities and 10,000 recent deliveries vs an empty gateway',
      results,
    ),
    '',
    renderConsole(results, { markdown: true }),
    '',
    consoleRatioNote,
    '',
    `- **Gateways**: two \`agentbridge start\` daemons, single host, the bench's gateway config, alive side by side. Loaded: ` +
      `${settings.entities} entities (\`target\`, ${setup.workers} workers on one shared \`cat\` pane, the rest mains) registered over the admin socket in ${setup.registerSeconds} s, ` +
      `${settings.deliveries} messages between the mains (POST /v1/send, ${sendConcurrency} in flight) in ${setup.sendSeconds} s, ` +
      `${setup.drained} of them drained, ${leavers} mains with messages deregistered. Deliveries by state: loaded ${states('loaded')}; empty ${states('empty')}. ` +
      `Roster at the end (the operator and the entities registered during the rounds included): loaded ${setup.rosterAtEnd.loaded}, empty ${setup.rosterAtEnd.empty}; ` +
      `flows listed: loaded ${setup.flowsListed.loaded}, empty ${setup.flowsListed.empty}.`,
    '- **Page**: headless Chromium through playwright-core, one fresh context and login URL (POST /v1/console/login, what `agentbridge console` prints) per load, 1280×900; ' +
      'instrumented before ui/app.js runs (bench/lib/consolePage.mjs): a MutationObserver stamps when the roster first holds every row and when a watched row or stage appears, ' +
      '"shown" being the task after the next animation frame (style, layout and paint of the change done); roster pushes are stamped as the event stream delivers them, before the page parses them. ' +
      'Main-thread time, DOM nodes and the JS heap are Chrome’s own counters (CDP Performance.getMetrics; the heap after HeapProfiler.collectGarbage).',
    '- **Update latency**: a main registered over the admin socket until its row is shown; the server reads the roster once a second and sends it when it changed (the console feed’s roster topic), ' +
      'so about half a second of it is that tick on either gateway (each change is made after a pause spread evenly over one tick), split out in the rows below it (the wait for the push, the page’s JSON.parse and rebuild of the table until the new row is in the DOM, then the frame: style, layout, paint). A message sent from the page’s form to `target` until its row is in the sent table (POST /ui/api/send), ' +
      'then `target` drained over the admin socket until the row’s stage reads handed-over (the page polls each sent message once a second).',
    ...(setup.lastRosterRender.loaded
      ? [
          `- **Roster render** (the last new entity of the rounds): the table lost ${render(setup.lastRosterRender.loaded)} on the loaded gateway; ` +
            `${render(setup.lastRosterRender.empty)} on the empty one. Every roster push carries the whole roster (the row above).`,
        ]
      : []),
    ...(idle
      ? [
          `- **Idle and busy page** (${settings.idleSeconds} s each, a page open on both gateways at once; busy: a main sending ${settings.busyRate} messages a second to \`target\` on each, ` +
            'so the roster (target’s queue depth) changes on every tick, as it does while agents work). A 100 ms timer’s delay is how long a click or key would wait for the main thread. ' +
            idle.map(windowLine).join(' ') +
            ` Daemon CPU with no page open: ${idle.map((w) => `${w.side} ${w.daemonCpuPercentNoPage} %`).join(', ')}.`,
        ]
      : []),
    ...(results.problems.length > 0
      ? [
          `- Page problems logged: ${results.problems.slice(0, 6).join('; ')}${results.problems.length > 6 ? ' …' : ''}.`,
        ]
      : []),
    ...(busy
      ? [
          `- The machine was shared: a load average of ${machine.loadAverage1m.start} at the start on ${machine.cores} cores. ` +
            'Absolute times are inflated by it; the two gateways alternate page by page, so the ratios less so.',
        ]
      : []),
    ...(results.notes ?? []).map((note) => `- ${note}`),
    sectionEnd,
    '',
  ];
  return lines.join('\n');
}

/**
 * Puts the console results into bench/results.json (its `console` key) and bench/results.md (its
 * own section, between markers, replaced on each run or appended), leaving the rest as it is.
 */
export function writeConsoleResults({ jsonFile, mdFile, results }) {
  writeResultsSection({
    jsonFile,
    mdFile,
    start: sectionStart,
    end: sectionEnd,
    update: (json) => {
      json.console = results;
      return results;
    },
    render: consoleSection,
  });
}
