import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { createAgentHost } from '#bridge/agents/agentHost';
import { agentHostHello, createAgentHostInjector } from '#bridge/panes/agentHostInjector';
import { createTmuxInjector } from '#bridge/panes/tmuxInjector';
import { percentile, round } from '../lib/measure.mjs';
import {
  benchMessage,
  killTmuxServerSync,
  loadAgentSupport,
  promptsWith,
  verifiedSubmission,
  waitClaudeIdle,
  waitForPrompt,
} from '../lib/submissionTargets.mjs';

/**
 * The same agent by its two delivery paths (issue 33), side by side: Claude Code at its prompt
 * in a tmux pane, typed into by the verified tmux injector (the terminal path), and Claude Code
 * in its stream-json mode behind an agent host (`createAgentHost`, dist), given the message by
 * the agent host's injector (the claude-stream path); both pointed at the same fake model API,
 * one message at a time, the two paths alternating (the order flipped every message), each from
 * an idle agent. Per message: the latency until the injector reported submitted (`type` +
 * `submit`), and until the prompt reached the model. Check: each message reached the model
 * exactly once on either path.
 */

/** How long a message reported submitted may take to reach the model. */
const modelTimeoutMs = 10_000;

function stats(values) {
  if (values.length === 0) return { n: 0, p50Ms: null, p99Ms: null, maxMs: null };
  const sorted = [...values].sort((a, b) => a - b);
  return {
    n: values.length,
    p50Ms: round(percentile(sorted, 0.5), 2),
    p99Ms: round(percentile(sorted, 0.99), 2),
    maxMs: round(/** @type {number} */ (sorted.at(-1)), 2),
  };
}

/** Until the agent host says its agent is idle (no turn runs), read every 10 ms. */
async function waitHostIdle(socketPath, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if ((await agentHostHello(socketPath)).status === 'idle') return;
    await sleep(10);
  }
  throw new Error(`the agent host at ${socketPath} not idle after ${timeoutMs} ms`);
}

/** @param {{ work: string, settings: { nativeMessages: number, textBytes: number }, progress: any, teardown: any, sockets: string[], homes: string[], log: (line: string) => void }} context */
export async function runNativePath({ work, settings, progress, teardown, sockets, homes, log }) {
  progress.step('submission · Claude Code: terminal path vs stream-json path (launch)');
  const { launchAgentTui, startFakeModelApi, prepareAgentHome } = await loadAgentSupport();
  const api = await startFakeModelApi();
  teardown.add(() => api.close());
  const socket = join(work, 'native-claude.sock');
  sockets.push(socket);
  teardown.add(() => killTmuxServerSync(socket));
  const session = await launchAgentTui('claude', { socket, apiUrl: api.url, timeoutMs: 90_000 });
  homes.push(session.home);
  teardown.add(() => session.stop());
  const terminal = createTmuxInjector({ target: session.target, socket });
  teardown.add(() => terminal.close());

  const home = await prepareAgentHome('claude', { apiUrl: api.url });
  homes.push(home.home);
  teardown.add(() => home.remove());
  const socketPath = join(work, 'claude-stream.sock');
  const host = createAgentHost({
    socketPath,
    protocol: 'claude-stream',
    command: home.bin,
    args: [],
    cwd: home.cwd,
    env: home.env,
    mirror: () => {},
  });
  await host.start();
  teardown.add(() => host.stop());
  const native = createAgentHostInjector({ socketPath });

  const warmup = 2;
  const total = warmup + settings.nativeMessages;
  progress.step('submission · Claude Code: terminal path vs stream-json path', 2 * total);
  /** @typedef {{ id: string, submittedMs: number | undefined, toModelMs: number | undefined, detail: string }} Sample */
  /** @type {{ native: Sample[], terminal: Sample[] }} */
  const measured = { native: [], terminal: [] };
  const started = performance.now();
  for (let i = -warmup; i < settings.nativeMessages; i++) {
    for (const side of i % 2 === 0 ? ['native', 'terminal'] : ['terminal', 'native']) {
      const message = benchMessage(i, settings.textBytes);
      let result;
      if (side === 'native') {
        await waitHostIdle(socketPath);
        result = await verifiedSubmission(native, message);
      } else {
        await waitClaudeIdle(session);
        result = await verifiedSubmission(terminal, message);
      }
      const arrival =
        result.kind === 'submitted' ? await waitForPrompt(api, message.id, modelTimeoutMs) : undefined;
      if (i >= 0) {
        measured[side].push({
          id: message.id,
          submittedMs: result.kind === 'submitted' ? result.submittedMs : undefined,
          toModelMs: arrival ? arrival.receivedAt - result.wallStart : undefined,
          detail: result.detail,
        });
      }
      progress.tick();
    }
  }
  await waitHostIdle(socketPath);
  await waitClaudeIdle(session);
  const seconds = (performance.now() - started) / 1000;
  const of = (side, key) => measured[side].map((m) => m[key]).filter((v) => v !== undefined);
  const once = (side) => measured[side].filter((m) => promptsWith(api, m.id) === 1).length;
  const rows = ['submittedMs', 'toModelMs'].map((key) => {
    const n = stats(of('native', key));
    const t = stats(of('terminal', key));
    const ratio = (k) => (n[k] !== null && t[k] ? round(n[k] / t[k], 2) : null);
    return {
      measure: key === 'submittedMs' ? 'submitted (as reported)' : 'the model (prompt arrived)',
      native: n,
      terminal: t,
      ratioP50: ratio('p50Ms'),
      ratioP99: ratio('p99Ms'),
    };
  });
  log(
    `submission: the two paths into Claude Code, ${settings.nativeMessages} messages each, in ${round(seconds, 1)} s`,
  );
  return {
    launchMs: session.launchMs,
    rows,
    check: {
      of: settings.nativeMessages,
      nativeReachedModelOnce: once('native'),
      terminalReachedModelOnce: once('terminal'),
      nativeHow: [...new Set(measured.native.map((m) => m.detail))],
    },
  };
}

const ms = (value) => (value === null ? '—' : value.toFixed(value >= 100 ? 0 : value >= 10 ? 1 : 2));

/** The comparison as lines of the submission section (Markdown). */
export function nativePathLines(native) {
  const table = [
    '| latency to | stream-json p50 ms | stream-json p99 ms | terminal p50 ms | terminal p99 ms | ratio p50 | ratio p99 | n |',
    '|---|---|---|---|---|---|---|---|',
    ...native.rows.map(
      (r) =>
        `| ${r.measure} | ${ms(r.native.p50Ms)} | ${ms(r.native.p99Ms)} | ${ms(r.terminal.p50Ms)} | ${ms(r.terminal.p99Ms)} | ` +
        `${r.ratioP50 ?? '—'} | ${r.ratioP99 ?? '—'} | ${r.native.n} · ${r.terminal.n} |`,
    ),
  ];
  const { check } = native;
  return [
    '',
    '**The same agent by its two delivery paths** (issue 33): Claude Code behind an agent host in its stream-json mode ' +
      '(`createAgentHost`, protocol claude-stream; submitted = Claude took the message: its turn’s init) beside Claude Code at ' +
      'its prompt in a tmux pane (the verified terminal path above), the same fake model API, alternating message by message, ' +
      'each from an idle agent. ratio = stream-json ÷ terminal (below 1.00: the native path is faster).',
    '',
    ...table,
    '',
    `Reached the model exactly once: stream-json ${check.nativeReachedModelOnce}/${check.of}, terminal ${check.terminalReachedModelOnce}/${check.of}.`,
  ];
}
