import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import BetterSqlite3 from 'better-sqlite3';
import { adminRoutes } from '#bridge/interfaces/adminProtocol';
import { createTmuxInjector } from '#bridge/panes/tmuxInjector';
import { decodeHlc } from '#bridge/wire/hlc';
import { adminClient, startDaemon } from '../lib/daemon.mjs';
import { percentile, round } from '../lib/measure.mjs';
import { createTeardown, runNode } from '../lib/processes.mjs';
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
import {
  baselineSubmission,
  benchMessage,
  claudeInputHolds,
  countLines,
  killHomeProcessesSync,
  killTmuxServerSync,
  loadAgentSupport,
  promptsWith,
  startCatPane,
  tmux,
  verifiedSubmission,
  waitClaudeIdle,
  waitForLines,
  waitForPrompt,
} from '../lib/submissionTargets.mjs';
import { nativePathLines, runNativePath } from './nativePath.mjs';

/** @typedef {Awaited<ReturnType<typeof verifiedSubmission>>} VerifiedResult */
/** @typedef {Awaited<ReturnType<typeof baselineSubmission>>} BaselineResult */

/**
 * The cost of verified submission (R-DL6, `BENCH_ONLY=submission`): per message, the latency to
 * `typed` and to `submitted` through the real injector (`createTmuxInjector` from dist: read the
 * pane, paste, read back until it shows, Enter, read back until the input took it), beside the
 * old unverified way run alternately on the same machine (one tmux client: load-buffer +
 * paste-buffer -p -d + send-keys Enter, nothing read back, "delivered" when tmux returns).
 * Messages are shaped as the gateway types them: `[bridge SEND from lead@bench msg <uuid>] <text>`,
 * marker `msg <uuid>`; one at a time, verified and baseline alternating (the order flipped every
 * message), so both see the same load.
 *
 * Targets:
 * - `cat` (a line reader, the stand-in that matters): one pane per side on one private tmux
 *   server, each `cat > file`. The injector's `type` into a line reader already pastes with
 *   Enter and reads back until the line was read, so it returns `submitted`: its latency to
 *   typed is that. Check: every line arrived in its side's file exactly once.
 * - Claude Code (node_modules/.bin/claude) at its prompt offline, launched by
 *   test/support/agentTuis.ts (through tsx) and pointed at the fake model API
 *   (test/support/fakeModelApi.ts), which answers every prompt with "Done." at once. Before each
 *   message the benchmark waits until Claude is idle (empty input box, no turn running), so each
 *   submission starts from an idle prompt; both sides use the same Claude, alternately. Beside
 *   typed and submitted, the latency until the prompt reached the model (the fake API's arrival
 *   time), for both sides: the baseline's "submitted" is only what it claims. A baseline message
 *   that has not reached the model within 3 s counts as left unsubmitted; a second Enter then
 *   clears it out of the way. Check: each verified message reached the model exactly once; the
 *   result says how many of the baseline's did ("baseline submitted N of M"). Two message sizes,
 *   one after the other: the gateway-sized body, and a long one (BENCH_SUBMISSION_CLAUDE_LONG_BYTES)
 *   that Claude folds into a `[Pasted text #N]` placeholder, where an Enter right behind the paste
 *   is most often lost.
 *
 * - Through a gateway (`agentbridge start` as its own process, single host): a worker registered on a
 *   `cat` pane (`agentbridge register --kind worker --tmux %N --tmux-socket …`), messages from a main
 *   over the admin socket (POST /v1/send, what bridge_send calls), one at a time (the next once
 *   the last is submitted); the latencies are read from the gateway's event log: from the send
 *   actor's `accepted` to the delivery's `typed` and `submitted` (the `hlc` column's wall part,
 *   ms). A line reader's delivery goes from injecting straight to submitted (no `typed` event):
 *   its typed figure is then its submitted one. Beside the same baseline, run alternately.
 *
 * Settings (env): BENCH_SUBMISSION_MESSAGES (per side into cat, default 200),
 * BENCH_SUBMISSION_CLAUDE (per side into Claude Code, default 30; 0 skips Claude),
 * BENCH_SUBMISSION_CLAUDE_LONG_BYTES (the long Claude body, default 1000; 0 skips that size),
 * BENCH_SUBMISSION_GATEWAY (per side through the gateway, default 100; 0 skips it),
 * BENCH_SUBMISSION_NATIVE (per path into Claude Code by its terminal and its stream-json path,
 * default 20; 0 skips it: bench/scenarios/nativePath.mjs),
 * BENCH_SUBMISSION_TEXT_BYTES (the body after the `[bridge …]` head, default 120). Warm-up: 10
 * messages per side into cat and through the gateway, 2 into Claude, not measured.
 */

export const submissionScenario = {
  name: 'submission',
  title: 'the cost of verified submission (R-DL6)',
  timeoutMs: 300_000,
};

const catWarmup = 10;
const claudeWarmup = 2;
/** How long a baseline message may take to reach the model before it counts as left unsubmitted. */
const baselineGraceMs = 3_000;
/** How long a verified message, reported submitted, may take to reach the model. */
const modelTimeoutMs = 10_000;

export function submissionSettings(env = process.env) {
  return {
    messages: Math.max(1, intSetting('BENCH_SUBMISSION_MESSAGES', 200, 0, env)),
    claudeMessages: intSetting('BENCH_SUBMISSION_CLAUDE', 30, 0, env),
    claudeLongBytes: intSetting('BENCH_SUBMISSION_CLAUDE_LONG_BYTES', 1000, 0, env),
    gatewayMessages: intSetting('BENCH_SUBMISSION_GATEWAY', 100, 0, env),
    nativeMessages: intSetting('BENCH_SUBMISSION_NATIVE', 20, 0, env),
    textBytes: intSetting('BENCH_SUBMISSION_TEXT_BYTES', 120, 0, env),
    catWarmup,
    claudeWarmup,
    baselineGraceMs,
  };
}

/** Progress-bar steps the scenario takes. */
export function submissionSteps(settings = submissionSettings()) {
  return (
    1 +
    (settings.gatewayMessages > 0 ? 2 : 0) +
    (settings.claudeMessages > 0 ? 1 + claudeVariants(settings).length : 0) +
    (settings.nativeMessages > 0 ? 2 : 0)
  );
}

/** p50/p99/mean/max of latencies in ms, and which sample was the slowest. */
function stats(values) {
  if (values.length === 0) return { n: 0, p50Ms: null, p99Ms: null, meanMs: null, maxMs: null };
  const sorted = [...values].sort((a, b) => a - b);
  return {
    n: values.length,
    p50Ms: round(percentile(sorted, 0.5), 2),
    p99Ms: round(percentile(sorted, 0.99), 2),
    meanMs: round(sorted.reduce((sum, v) => sum + v, 0) / sorted.length, 2),
    maxMs: round(sorted.at(-1), 2),
  };
}

function row(target, measure, verified, baseline, extra = {}) {
  const v = stats(verified);
  const b = stats(baseline);
  const ratio = (key) => (v[key] !== null && b[key] ? round(v[key] / b[key], 2) : null);
  return {
    target,
    measure,
    verified: v,
    baseline: b,
    ratioP50: ratio('p50Ms'),
    ratioP99: ratio('p99Ms'),
    ...extra,
  };
}

/** Counts of each (kind, how) the verified side ended with, e.g. "submitted: line reader echoed it…". */
function tally(results) {
  const counts = {};
  for (const r of results) {
    const key = `${r.kind}: ${r.detail}`;
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}

/** Message order within pair `i`: verified first on even messages, baseline first on odd. */
const sidesFor = (i) => (Math.abs(i) % 2 === 0 ? ['verified', 'baseline'] : ['baseline', 'verified']);

async function runCat({ work, settings, progress, teardown, sockets, log }) {
  const socket = join(work, 'cat.sock');
  sockets.push(socket);
  teardown.add(() => killTmuxServerSync(socket));
  const files = { verified: join(work, 'cat-verified.txt'), baseline: join(work, 'cat-baseline.txt') };
  const panes = {
    verified: await startCatPane(socket, 'verified', files.verified),
    baseline: await startCatPane(socket, 'baseline', files.baseline),
  };
  // The cat was just started: it takes input at once, so no wait for a new program to settle.
  const injector = createTmuxInjector({ target: panes.verified, socket, timing: { programSettleMs: 0 } });
  teardown.add(() => injector.close());

  const total = settings.catWarmup + settings.messages;
  progress.step('submission · cat (line reader): verified vs paste+Enter', 2 * total);
  const sent = { verified: [], baseline: [] };
  /** @type {{ verified: Array<{ i: number } & VerifiedResult>, baseline: Array<{ i: number } & BaselineResult> }} */
  const measured = { verified: [], baseline: [] };
  const started = performance.now();
  for (let i = -settings.catWarmup; i < settings.messages; i++) {
    for (const side of sidesFor(i)) {
      const message = benchMessage(i, settings.textBytes);
      sent[side].push(message);
      const result =
        side === 'verified'
          ? await verifiedSubmission(injector, message)
          : await baselineSubmission(socket, panes.baseline, message);
      if (i >= 0) measured[side].push({ i, ...result });
      progress.tick();
    }
  }
  const seconds = (performance.now() - started) / 1000;
  const arrived = {
    verified: await waitForLines(files.verified, total),
    baseline: await waitForLines(files.baseline, total),
  };
  const check = {
    verified: countLines(files.verified, sent.verified),
    baseline: countLines(files.baseline, sent.baseline),
  };
  const verifiedOk = measured.verified.filter((r) => r.kind === 'submitted');
  const outcomes = tally(measured.verified);
  const submitted = `${check.verified.once}/${total} · ${check.baseline.once}/${total}`;
  const rows = [
    row(
      'cat (line reader)',
      'typed',
      verifiedOk.map((r) => r.typedMs),
      measured.baseline.map((r) => r.typedMs),
      { submitted },
    ),
    row(
      'cat (line reader)',
      'submitted',
      verifiedOk.map((r) => r.submittedMs),
      measured.baseline.map((r) => r.submittedMs),
      { submitted },
    ),
  ];
  const slowest = [...measured.verified].sort((a, b) => b.submittedMs - a.submittedMs).slice(0, 3);
  log(
    `submission cat: ${settings.messages} + ${settings.catWarmup} warm-up per side in ${round(seconds, 1)} s; ` +
      `verified outcomes ${JSON.stringify(outcomes)}; lines once: verified ${check.verified.once}/${total}, ` +
      `baseline ${check.baseline.once}/${total}`,
  );
  return {
    rows,
    check,
    arrivedLines: arrived,
    outcomes,
    typedThenSubmit: measured.verified.filter((r) => r.typeKind === 'typed').length,
    slowestVerified: slowest.map((r) => ({ i: r.i, submittedMs: round(r.submittedMs, 2) })),
    seconds: round(seconds, 1),
  };
}

/** The Claude Code message sizes: the gateway-sized body, and a long one (a paste Claude folds). */
function claudeVariants(settings) {
  return [
    { id: 'short', label: 'Claude Code', bytes: settings.textBytes },
    ...(settings.claudeLongBytes > 0
      ? [
          {
            id: 'long',
            label: `Claude Code, ${settings.claudeLongBytes} B body`,
            bytes: settings.claudeLongBytes,
          },
        ]
      : []),
  ];
}

async function runClaude({ work, settings, progress, teardown, sockets, homes, log }) {
  progress.step('submission · Claude Code: launch (offline, fake model API)');
  const { launchAgentTui, startFakeModelApi } = await loadAgentSupport();
  const api = await startFakeModelApi();
  teardown.add(() => api.close());
  const socket = join(work, 'claude.sock');
  sockets.push(socket);
  teardown.add(() => killTmuxServerSync(socket));
  const session = await launchAgentTui('claude', { socket, apiUrl: api.url, timeoutMs: 90_000 });
  homes.push(session.home);
  teardown.add(() => session.stop());
  log(`submission: Claude Code at its prompt in ${session.launchMs} ms (pane ${session.target})`);
  const injector = createTmuxInjector({ target: session.target, socket });
  teardown.add(() => injector.close());
  const variants = [];
  for (const variant of claudeVariants(settings)) {
    variants.push(await claudeVariant({ variant, session, api, injector, socket, settings, progress, log }));
  }
  return { launchMs: session.launchMs, prompts: api.prompts().length, variants };
}

/** One message size into Claude Code: verified and baseline alternating, each from an idle prompt. */
async function claudeVariant({ variant, session, api, injector, socket, settings, progress, log }) {
  const total = settings.claudeWarmup + settings.claudeMessages;
  progress.step(`submission · ${variant.label}: verified vs paste+Enter`, 2 * total);
  const measured = { verified: [], baseline: [] };
  const warm = { verified: [], baseline: [] };
  const screens = [];
  const started = performance.now();

  /** A message left in the input box: a second Enter takes it out of the way (not counted as submitted). */
  const clearOut = async (message, side) => {
    const screen = await session.capture();
    const held = claudeInputHolds(screen, message);
    if (screens.length < 2) screens.push({ side, held, screen: screen.trimEnd() });
    if (held) {
      await tmux(socket, ['send-keys', '-t', session.target, 'Enter']);
      await waitForPrompt(api, message.id, modelTimeoutMs);
    }
    return held;
  };

  for (let i = -settings.claudeWarmup; i < settings.claudeMessages; i++) {
    for (const side of sidesFor(i)) {
      await waitClaudeIdle(session);
      const message = benchMessage(i, variant.bytes);
      let result;
      if (side === 'verified') {
        result = await verifiedSubmission(injector, message);
        const arrival =
          result.kind === 'submitted' ? await waitForPrompt(api, message.id, modelTimeoutMs) : undefined;
        result.toModelMs = arrival ? arrival.receivedAt - result.wallStart : undefined;
        if (!arrival) result.leftInInput = await clearOut(message, side);
      } else {
        result = await baselineSubmission(socket, session.target, message);
        const arrival = await waitForPrompt(api, message.id, baselineGraceMs);
        result.toModelMs = arrival ? arrival.receivedAt - result.wallStart : undefined;
        result.kind = arrival ? 'submitted' : 'not-submitted';
        if (!arrival) {
          result.leftInInput = await clearOut(message, side);
          log(
            `submission ${variant.label}: baseline message ${i} did not reach the model within ${baselineGraceMs} ms ` +
              `(${result.leftInInput ? 'left in the input box' : 'not in the input box either'})`,
          );
        }
      }
      (i >= 0 ? measured : warm)[side].push({ i, id: message.id, ...result });
      progress.tick();
    }
  }
  await waitClaudeIdle(session);
  const seconds = (performance.now() - started) / 1000;

  // What reached the model: each verified message exactly once; the baseline's within its grace.
  const reached = (list) =>
    list.filter((r) => r.toModelMs !== undefined && promptsWith(api, r.id) === 1).length;
  const repeated = (list) => list.filter((r) => promptsWith(api, r.id) > 1).length;
  const v = measured.verified;
  const b = measured.baseline;
  const check = {
    verified: {
      reportedSubmitted: v.filter((r) => r.kind === 'submitted').length,
      reachedModelOnce: reached(v),
      repeated: repeated(v),
      of: v.length,
    },
    baseline: {
      reachedModelOnce: reached(b),
      leftInInput: b.filter((r) => r.leftInInput).length,
      repeated: repeated(b),
      of: b.length,
    },
    warmup: {
      verifiedReached: reached(warm.verified),
      baselineReached: reached(warm.baseline),
      of: warm.verified.length,
    },
  };
  const submitted = `${check.verified.reachedModelOnce}/${v.length} · ${check.baseline.reachedModelOnce}/${b.length}`;
  const vOk = v.filter((r) => r.kind === 'submitted');
  const bOk = b.filter((r) => r.toModelMs !== undefined);
  const rows = [
    row(
      variant.label,
      'typed',
      v.filter((r) => r.typeKind === 'typed').map((r) => r.typedMs),
      b.map((r) => r.typedMs),
      { submitted },
    ),
    row(
      variant.label,
      'submitted',
      vOk.map((r) => r.submittedMs),
      b.map((r) => r.submittedMs),
      { submitted },
    ),
    row(
      variant.label,
      'the model (prompt arrived)',
      vOk.filter((r) => r.toModelMs !== undefined).map((r) => r.toModelMs),
      bOk.map((r) => r.toModelMs),
      { submitted },
    ),
  ];
  const outcomes = tally(v);
  log(
    `submission ${variant.label}: ${settings.claudeMessages} + ${settings.claudeWarmup} warm-up per side in ${round(seconds, 1)} s; ` +
      `verified outcomes ${JSON.stringify(outcomes)}; reached the model once: verified ` +
      `${check.verified.reachedModelOnce}/${v.length}, baseline ${check.baseline.reachedModelOnce}/${b.length}`,
  );
  return {
    id: variant.id,
    label: variant.label,
    bytes: variant.bytes,
    rows,
    check,
    outcomes,
    slowestVerified: [...v]
      .sort((x, y) => y.submittedMs - x.submittedMs)
      .slice(0, 3)
      .map((r) => ({ i: r.i, submittedMs: round(r.submittedMs, 2), detail: r.detail })),
    unsubmittedBaseline: b.filter((r) => r.toModelMs === undefined).map((r) => r.i),
    screens,
    seconds: round(seconds, 1),
  };
}

const cliPath = new URL('../../dist/cli/main.js', import.meta.url).pathname;

/** The delivery's stages of `msgId` in a gateway's event log: wall ms of accepted, typed, submitted. */
function stagesOf(db, msgId) {
  const rows = db
    .prepare('SELECT actor_kind, to_state, hlc FROM event_log WHERE msg_id = ? ORDER BY hlc')
    .all(msgId);
  const at = (kind, state) => {
    const found = rows.find((r) => r.actor_kind === kind && r.to_state === state);
    return found ? decodeHlc(found.hlc).wall : undefined;
  };
  return {
    accepted: at('send', 'accepted'),
    typed: at('delivery', 'typed'),
    submitted: at('delivery', 'submitted'),
    deadLettered: rows.some((r) => r.actor_kind === 'delivery' && r.to_state === 'dead-lettered'),
  };
}

async function runGateway({ work, settings, progress, teardown, sockets, log, configFile }) {
  progress.step('submission · gateway: start, worker on a cat pane');
  const socket = join(work, 'gateway-tmux.sock');
  sockets.push(socket);
  teardown.add(() => killTmuxServerSync(socket));
  const files = { worker: join(work, 'gateway-worker.txt'), baseline: join(work, 'gateway-baseline.txt') };
  const panes = {
    worker: await startCatPane(socket, 'worker', files.worker),
    baseline: await startCatPane(socket, 'baseline', files.baseline),
  };
  const home = join(work, 'gateway');
  const daemon = await startDaemon({ home, env: { BRIDGE_HOST_ID: 'bench' }, configFile });
  teardown.add(() => daemon.stop());
  const cliEnv = { BRIDGE_HOME: home, ...(configFile ? { BRIDGE_CONFIG: configFile } : {}) };
  const register = async (args) =>
    JSON.parse(await runNode([cliPath, 'register', ...args, '--json'], { env: cliEnv }));
  await register(['--kind', 'worker', '--name', 'worker', '--tmux', panes.worker, '--tmux-socket', socket]);
  const lead = await register(['--kind', 'main', '--name', 'lead']);
  const admin = adminClient(daemon.adminSocket);
  teardown.add(() => admin.close());
  const db = new BetterSqlite3(join(home, 'events.db'), { readonly: true });
  teardown.add(() => db.close());

  const total = settings.catWarmup + settings.gatewayMessages;
  progress.step('submission · gateway: send to a worker on cat vs paste+Enter', 2 * total);
  /** @type {{ gateway: Array<{ i: number, typedMs: number, submittedMs: number, typedEvent: boolean }>, baseline: BaselineResult[] }} */
  const measured = { gateway: [], baseline: [] };
  const sentBaseline = [];
  const deadLettered = [];
  const sentIds = [];
  const started = performance.now();
  for (let i = -settings.catWarmup; i < settings.gatewayMessages; i++) {
    for (const side of sidesFor(i)) {
      const message = benchMessage(i, settings.textBytes);
      if (side === 'baseline') {
        sentBaseline.push(message);
        const result = await baselineSubmission(socket, panes.baseline, message);
        if (i >= 0) measured.baseline.push(result);
      } else {
        const body = message.text.slice(message.text.indexOf('] ') + 2);
        const { msgId } = await admin.call(adminRoutes.send, { token: lead.token, to: 'worker', text: body });
        sentIds.push(msgId);
        const deadline = Date.now() + modelTimeoutMs;
        let stages = stagesOf(db, msgId);
        while (stages.submitted === undefined && !stages.deadLettered && Date.now() < deadline) {
          await sleep(5);
          stages = stagesOf(db, msgId);
        }
        if (stages.submitted === undefined) {
          deadLettered.push({ i, msgId, deadLettered: stages.deadLettered });
        } else if (i >= 0 && stages.accepted !== undefined) {
          measured.gateway.push({
            i,
            typedMs: (stages.typed ?? stages.submitted) - stages.accepted,
            submittedMs: stages.submitted - stages.accepted,
            typedEvent: stages.typed !== undefined,
          });
        }
      }
      progress.tick();
    }
  }
  const seconds = (performance.now() - started) / 1000;
  await waitForLines(files.worker, total);
  await waitForLines(files.baseline, total);
  const workerLines = countLines(
    files.worker,
    sentIds.map((id) => ({ id })),
  );
  const baselineLines = countLines(files.baseline, sentBaseline);
  const submitted = `${workerLines.once}/${total} · ${baselineLines.once}/${total}`;
  const g = measured.gateway;
  const rows = [
    row(
      'cat via gateway (from accepted)',
      'typed',
      g.map((r) => r.typedMs),
      measured.baseline.map((r) => r.typedMs),
      { submitted },
    ),
    row(
      'cat via gateway (from accepted)',
      'submitted',
      g.map((r) => r.submittedMs),
      measured.baseline.map((r) => r.submittedMs),
      { submitted },
    ),
  ];
  log(
    `submission gateway: ${settings.gatewayMessages} + ${settings.catWarmup} warm-up per side in ${round(seconds, 1)} s; ` +
      `lines once: worker ${workerLines.once}/${total}, baseline ${baselineLines.once}/${total}; ` +
      `not submitted within ${modelTimeoutMs} ms: ${deadLettered.length}`,
  );
  return {
    rows,
    check: { worker: workerLines, baseline: baselineLines, notSubmitted: deadLettered },
    typedEvents: g.filter((r) => r.typedEvent).length,
    slowest: [...g]
      .sort((x, y) => y.submittedMs - x.submittedMs)
      .slice(0, 3)
      .map((r) => ({ i: r.i, submittedMs: r.submittedMs })),
    seconds: round(seconds, 1),
  };
}

/**
 * Runs the scenario; returns its results (rows, checks, machine, settings). Every tmux server and
 * agent process it started is gone when it returns or throws, and at process exit.
 */
export async function runSubmissionBench({
  dir,
  settings = submissionSettings(),
  progress = noProgress,
  log = console.error,
  configFile,
}) {
  const started = performance.now();
  const loadAtStart = loadAverage();
  const work = join(dir, 'submission');
  mkdirSync(work, { recursive: true });
  const sockets = [];
  const homes = [];
  // The exit path (the run's timeout, a crash) cannot await: tmux servers and agents killed at once.
  const onExit = () => {
    for (const socket of sockets) killTmuxServerSync(socket);
    for (const home of homes) killHomeProcessesSync(home);
  };
  process.on('exit', onExit);
  try {
    // Each phase cleans up after itself (its tmux server, gateway, agent) before the next starts.
    const phase = async (run) => {
      const teardown = createTeardown();
      try {
        return await run({ work, settings, progress, teardown, sockets, homes, log, configFile });
      } finally {
        await teardown.run();
      }
    };
    const cat = await phase(runCat);
    const gateway = settings.gatewayMessages > 0 ? await phase(runGateway) : undefined;
    const claude = settings.claudeMessages > 0 ? await phase(runClaude) : undefined;
    const native = settings.nativeMessages > 0 ? await phase(runNativePath) : undefined;
    return {
      date: new Date().toISOString(),
      command: commandLine(),
      durationSeconds: round((performance.now() - started) / 1000, 1),
      machine: machineInfo(work, loadAtStart),
      settings,
      rows: [...cat.rows, ...(gateway?.rows ?? []), ...(claude?.variants.flatMap((v) => v.rows) ?? [])],
      cat: { ...cat, rows: undefined },
      ...(gateway ? { gateway: { ...gateway, rows: undefined } } : {}),
      ...(claude
        ? { claude: { ...claude, variants: claude.variants.map((v) => ({ ...v, rows: undefined })) } }
        : {}),
      ...(native ? { native } : {}),
    };
  } finally {
    process.off('exit', onExit);
  }
}

const ms = (value) => (value === null ? '—' : value.toFixed(value >= 100 ? 0 : value >= 10 ? 1 : 2));
const ratio = (value) => (value === null ? '—' : value.toFixed(2));

/** @type {import('../lib/report.mjs').Column[]} */
const submissionColumns = [
  ['target', (r) => r.target],
  ['latency to', (r) => r.measure],
  ['verified p50 ms', (r) => ms(r.verified.p50Ms)],
  ['verified p99 ms', (r) => ms(r.verified.p99Ms)],
  ['baseline p50 ms', (r) => ms(r.baseline.p50Ms)],
  ['baseline p99 ms', (r) => ms(r.baseline.p99Ms)],
  ['ratio p50', (r) => ratio(r.ratioP50)],
  ['ratio p99', (r) => ratio(r.ratioP99)],
  ['verified max', (r) => ms(r.verified.maxMs)],
  ['baseline max', (r) => ms(r.baseline.maxMs)],
  ['n (v · b)', (r) => `${r.verified.n} · ${r.baseline.n}`],
  ['submitted (v · b)', (r) => r.submitted],
];

export const submissionRatioNote =
  'ratio = verified ÷ baseline, of the p50 and of the p99 latency per message (1.00 = as fast as the old ' +
  'unverified way; 10 = ten times slower). The baseline is one tmux client doing load-buffer + paste-buffer ' +
  '-p -d + send-keys Enter with no read-back: its latency to typed and to submitted is the same figure, ' +
  'the moment tmux returns and it would report "delivered". submitted (v · b): messages that arrived exactly ' +
  'once, verified · baseline (cat: lines in its output file, warm-up included; Claude Code: prompts that ' +
  'reached the fake model API, measured messages only).';

/** The submission rows as a table (Markdown or terminal text). */
export function renderSubmission(results, { markdown = false } = {}) {
  return renderTable(results.rows, { markdown, columns: submissionColumns });
}

const sectionStart = '<!-- submission:start (written by BENCH_ONLY=submission node bench/run.mjs) -->';
const sectionEnd = '<!-- submission:end -->';

function outcomeLines(outcomes) {
  return Object.entries(outcomes).map(([what, count]) => `${count}× ${what}`);
}

/** What verification adds per message, p50 over p50, from the rows that end the submission. */
function costLines(results) {
  const ends = results.rows.filter((r) => r.measure !== 'typed' && r.verified.p50Ms !== null);
  const busy = results.machine.loadAverage1m.start >= results.machine.cores;
  return [
    '- **What the verified path adds** (p50 verified − p50 baseline; through the gateway this includes the gateway’s own work, ' +
      'and into Claude "to the model" is the like-for-like figure, the baseline’s "submitted" being only the moment tmux returned): ' +
      `${ends
        .filter((r) => r.baseline.p50Ms !== null)
        .map((r) => `${r.target}, to ${r.measure}: +${ms(round(r.verified.p50Ms - r.baseline.p50Ms, 2))} ms`)
        .join('; ')}.`,
    ...(busy
      ? [
          `- The machine was shared: a load average of ${results.machine.loadAverage1m.start} at the start on ${results.machine.cores} cores. ` +
            'Absolute latencies are inflated by it; verified and baseline alternate message by message, so the ratios less so.',
        ]
      : []),
  ];
}

function submissionSection(results) {
  const { settings, cat, gateway, claude } = results;
  const catTotal = settings.messages + settings.catWarmup;
  const lines = [
    sectionStart,
    ...sectionHead('Cost of verified submission (R-DL6): latency to typed and to submitted', results),
    '',
    renderSubmission(results, { markdown: true }),
    '',
    submissionRatioNote,
    '',
    ...costLines(results),
    '- **verified**: `createTmuxInjector` (dist/panes/tmuxInjector.js) with its default timing, as a pane delivery drives it: ' +
      '`type(message)` (the pane read, one paste, read back until it shows), then `submit(message)` when `type` said `typed` ' +
      '(Enter as its own step, read back until the input took it). Latency to typed = `type`; to submitted = `type` + `submit`. ' +
      'Messages as the gateway types them, `[bridge SEND from lead@bench msg <uuid>] <text>` with marker `msg <uuid>`; ' +
      'one at a time, verified and baseline alternating (the order flipped every message) so both see the same load.',
    `- **cat (line reader)**: one \`cat > file\` pane per side on one private tmux server (200×50). Into a line reader \`type\` pastes with Enter ` +
      'and reads back until the line was read, so it already returns `submitted`: its "typed" figure is that, and "submitted" the same. ' +
      `Check: lines that arrived exactly once, verified ${cat.check.verified.once}/${catTotal} ` +
      `(missing ${cat.check.verified.missing}, repeated ${cat.check.verified.repeated}, stray ${cat.check.verified.stray}), ` +
      `baseline ${cat.check.baseline.once}/${catTotal} (missing ${cat.check.baseline.missing}, repeated ${cat.check.baseline.repeated}, stray ${cat.check.baseline.stray}). ` +
      `Verified outcomes: ${outcomeLines(cat.outcomes).join('; ')}. Slowest verified: ${cat.slowestVerified
        .map((s) => `#${s.i} ${s.submittedMs} ms`)
        .join(', ')}.`,
  ];
  if (gateway) {
    const { check } = gateway;
    const gatewayTotal = settings.gatewayMessages + settings.catWarmup;
    lines.push(
      '- **cat via gateway (from accepted)**: `agentbridge start` (its own process, single host, default config) with a worker registered on a `cat > file` pane ' +
        '(`agentbridge register --kind worker --tmux %N --tmux-socket …`); a main sends over the admin socket (POST /v1/send, what bridge_send calls), ' +
        'one message at a time, the next once the last is submitted. Latencies from the event log (`events.hlc`, wall part in ms, so ±1 ms): ' +
        'from the send actor’s `accepted` to the delivery’s `typed` and `submitted`; a line reader’s delivery goes from injecting to submitted ' +
        `with no \`typed\` event (${gateway.typedEvents} of ${settings.gatewayMessages} had one), so its typed figure is its submitted one. ` +
        'The baseline is the same paste + Enter as above, into a second cat pane on the same tmux server, alternating. ' +
        `Check: lines that arrived exactly once, worker ${check.worker.once}/${gatewayTotal} (missing ${check.worker.missing}, repeated ${check.worker.repeated}), ` +
        `baseline ${check.baseline.once}/${gatewayTotal}; not submitted within ${modelTimeoutMs / 1000} s: ${check.notSubmitted.length}. ` +
        `Slowest: ${gateway.slowest.map((s) => `#${s.i} ${s.submittedMs} ms`).join(', ')}.`,
    );
  }
  if (!gateway) lines.push('- **cat via gateway**: skipped (BENCH_SUBMISSION_GATEWAY=0).');
  if (claude) {
    lines.push(
      `- **Claude Code**: node_modules/.bin/claude at its prompt offline (test/support/agentTuis.ts, 120×40, at its prompt in ${claude.launchMs} ms), ` +
        'pointed at the fake model API (test/support/fakeModelApi.ts: every prompt answered "Done." at once); ' +
        'before each message the benchmark waits until the input box is empty and no turn runs (no `esc to interrupt`, no spinner), on two reads in a row. ' +
        'Both sides go into the same Claude, one message size after the other. "the model (prompt arrived)": from the start of the submission until the fake API received the prompt, for either side ' +
        '(what the baseline calls submitted is only what it claims). The verified `submit` waits at least the agent table’s `enterDelayMs` (60 ms for Claude Code) between paste and Enter.',
    );
    for (const variant of claude.variants) {
      const { check } = variant;
      lines.push(
        `  - **${variant.label}** (body ${variant.bytes} B after the \`[bridge …]\` head): ` +
          `verified reported submitted ${check.verified.reportedSubmitted}/${check.verified.of}, reached the model exactly once ${check.verified.reachedModelOnce}/${check.verified.of} (repeated ${check.verified.repeated}); ` +
          `**baseline submitted ${check.baseline.reachedModelOnce} of ${check.baseline.of}**` +
          (check.baseline.of - check.baseline.reachedModelOnce > 0
            ? ` (not at the model within ${settings.baselineGraceMs} ms: messages ${variant.unsubmittedBaseline.map((i) => `#${i}`).join(', ')}; ${check.baseline.leftInInput} of them left in the input box, then cleared by a second Enter)`
            : ` (each within ${settings.baselineGraceMs} ms)`) +
          `, repeated ${check.baseline.repeated}; warm-up: verified ${check.warmup.verifiedReached}/${check.warmup.of}, baseline ${check.warmup.baselineReached}/${check.warmup.of}. ` +
          `Verified outcomes: ${outcomeLines(variant.outcomes).join('; ')}. Slowest verified: ${variant.slowestVerified
            .map((s) => `#${s.i} ${s.submittedMs} ms`)
            .join(', ')}.`,
      );
    }
  } else {
    lines.push('- **Claude Code**: skipped (BENCH_SUBMISSION_CLAUDE=0).');
  }
  if (results.native) lines.push(...nativePathLines(results.native));
  else lines.push('', '**The same agent by its two delivery paths**: skipped (BENCH_SUBMISSION_NATIVE=0).');
  lines.push(...(results.notes ?? []).map((note) => `- ${note}`), sectionEnd, '');
  return lines.join('\n');
}

/**
 * Puts the submission results into bench/results.json (its `submission` key) and bench/results.md
 * (its own section, between markers, replaced on each run or appended), leaving the rest as it is.
 */
export function writeSubmissionResults({ jsonFile, mdFile, results }) {
  writeResultsSection({
    jsonFile,
    mdFile,
    start: sectionStart,
    end: sectionEnd,
    update: (json) => {
      json.submission = results;
      return results;
    },
    render: submissionSection,
  });
}
