import { execFile, execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * What the submission scenario (bench/scenarios/submission.mjs) drives: private tmux servers, a
 * `cat` pane per side (verified, baseline) writing what it reads to a file, Claude Code at its
 * prompt offline (test/support/agentTuis.ts, loaded through tsx) talking to the fake model API
 * (test/support/fakeModelApi.ts), the gateway-shaped message, and the two ways of putting a
 * message into a pane: the real injector's (verified) and the old one (one tmux client, no
 * read-back).
 */

/** tmux without $TMUX: a benchmark started inside tmux never reaches the user's server. */
const { TMUX: _outerTmux, TMUX_PANE: _outerPane, ...tmuxEnv } = process.env;

/** Runs one tmux client on the server at `socket`, `input` on its stdin; resolves to its stdout. */
export function tmux(socket, args, input) {
  return new Promise((resolve, reject) => {
    const child = execFile(
      'tmux',
      ['-S', socket, ...args],
      { env: tmuxEnv, encoding: 'utf8', timeout: 10_000 },
      (error, stdout, stderr) => {
        if (error) reject(new Error(`tmux ${args.join(' ')} failed: ${stderr.trim() || error.message}`));
        else resolve(stdout);
      },
    );
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(input ?? '');
  });
}

/** Kills the tmux server at `socket`, synchronously (for the exit path too); never throws. */
export function killTmuxServerSync(socket) {
  try {
    execFileSync('tmux', ['-S', socket, 'kill-server'], { env: tmuxEnv, stdio: 'ignore', timeout: 5_000 });
  } catch {
    // Not running (any more): nothing to kill.
  }
}

/**
 * SIGKILLs every process whose environment has HOME=`home` (an agent's temp HOME: only ours),
 * synchronously, for the exit path, where agentTuis' own async `stop` cannot run.
 */
export function killHomeProcessesSync(home) {
  const needle = Buffer.from(`\0HOME=${home}\0`);
  let entries = [];
  try {
    entries = readdirSync('/proc');
  } catch {
    return;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const environ = readFileSync(`/proc/${entry}/environ`);
      if (Buffer.concat([Buffer.from([0]), environ]).includes(needle)) process.kill(Number(entry), 'SIGKILL');
    } catch {
      // Gone, or not ours to read.
    }
  }
}

/** A message as the gateway types it (formatInjection / injectionMarker), `bytes` of body text. */
export function benchMessage(i, bytes) {
  const id = randomUUID();
  const head = `submission bench message ${i}`;
  const body = `${head} ${'x'.repeat(Math.max(0, bytes - head.length - 1))}`;
  return { id, text: `[bridge SEND from lead@bench msg ${id}] ${body}`, marker: `msg ${id}` };
}

/**
 * Verified (R-DL6), as the gateway's pane delivery does it: `type` (the pane read, the paste,
 * the read-back until it shows; into a line reader with its Enter, until the line was read),
 * then, if it came back `typed`, `submit` (Enter, read back until the input took it).
 * Latency to typed = `type`; to submitted = `type` + `submit`.
 */
export async function verifiedSubmission(injector, message) {
  const wallStart = Date.now();
  const started = performance.now();
  const typed = await injector.type(message);
  const typedAt = performance.now();
  const outcome = typed.kind === 'typed' ? await injector.submit(message) : typed;
  const submittedAt = performance.now();
  return {
    wallStart,
    typedMs: typedAt - started,
    submittedMs: submittedAt - started,
    typeKind: typed.kind,
    kind: outcome.kind,
    detail: outcome.how ?? outcome.detail ?? outcome.reason ?? '',
  };
}

/**
 * The old way, unverified: one tmux client doing load-buffer + paste-buffer -p -d + send-keys
 * Enter back to back, nothing read back. What it reports is "delivered" when tmux returns: its
 * latency to typed and to submitted are both that.
 */
export async function baselineSubmission(socket, target, message) {
  const buffer = `bench-${process.pid}-${randomUUID()}`;
  const wallStart = Date.now();
  const started = performance.now();
  // biome-ignore format: one tmux command per line reads better than a wrapped list
  await tmux(socket, [
    'load-buffer', '-b', buffer, '-', ';',
    'paste-buffer', '-p', '-d', '-b', buffer, '-t', target, ';',
    'send-keys', '-t', target, 'Enter',
  ], message.text);
  const ms = performance.now() - started;
  return { wallStart, typedMs: ms, submittedMs: ms };
}

/**
 * A `cat` in a new session of the tmux server at `socket`, writing every line it reads to `file`
 * (a line reader, as the injector reads it: its terminal echoes the paste, the cursor leaves the
 * line once cat has read it). Resolves to its pane id.
 */
export async function startCatPane(socket, session, file) {
  // biome-ignore format: one tmux argument per pair reads better than a wrapped list
  const out = await tmux(socket, [
    '-f', '/dev/null', 'new-session', '-d', '-P', '-F', '#{pane_id}',
    '-s', session, '-x', '200', '-y', '50',
    `exec cat > '${file}'`,
  ]);
  const target = out.trim();
  if (!/^%\d+$/.test(target))
    throw new Error(`tmux new-session printed ${JSON.stringify(out)}, not a pane id`);
  return target;
}

/** How many lines of `file` carry each message id, and how many lines carry none we sent. */
export function countLines(file, messages) {
  const counts = new Map(messages.map((m) => [m.id, 0]));
  let stray = 0;
  const text = readFileSync(file, 'utf8');
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const id = /^\[bridge SEND from lead@bench msg ([0-9a-f-]{36})\] /.exec(line)?.[1];
    if (id !== undefined && counts.has(id)) counts.set(id, counts.get(id) + 1);
    else stray++;
  }
  const values = [...counts.values()];
  return {
    once: values.filter((n) => n === 1).length,
    missing: values.filter((n) => n === 0).length,
    repeated: values.filter((n) => n > 1).length,
    stray,
  };
}

/** Waits until `file` has at least `lines` lines (cat reads after the benchmark's last paste). */
export async function waitForLines(file, lines, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const count = readFileSync(file, 'utf8').split('\n').length - 1;
    if (count >= lines || Date.now() > deadline) return count;
    await sleep(20);
  }
}

const rule = /^─{20,}\s*$/;
const spinner = /^[✻✽✢✶✳✺·*] [A-Z][a-z]+…/m;

/**
 * Claude Code at an idle prompt: its input box (`❯` and a no-break space between two full rules)
 * empty, no turn running (no `esc to interrupt` footer, no spinner line).
 */
export function claudeIdle(screen) {
  const lines = screen.split('\n');
  const i = lines.findLastIndex((line, n) => /^❯\s?$/.test(line) && rule.test(lines[n - 1] ?? ''));
  return i > 0 && rule.test(lines[i + 1] ?? '') && !/esc to interrupt/.test(screen) && !spinner.test(screen);
}

/**
 * Claude's input box holds the message (left there, e.g. by an Enter that came too soon): its
 * head, or the placeholder Claude folds a long paste into (`[Pasted text #1]`).
 */
export function claudeInputHolds(screen, message) {
  const lines = screen.split('\n');
  const top = lines.findLastIndex((line, n) => /^❯/.test(line) && rule.test(lines[n - 1] ?? ''));
  if (top < 0) return false;
  const bottom = lines.findIndex((line, n) => n > top && rule.test(line));
  const input = lines.slice(top, bottom < 0 ? undefined : bottom).join('\n');
  return (
    /\[Pasted text #\d+/.test(input) ||
    input.replace(/\s+/g, '').includes(message.text.slice(0, 60).replace(/\s+/g, ''))
  );
}

/** Polls `session.capture()` until Claude is idle on two reads in a row; fails with the screen. */
export async function waitClaudeIdle(session, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  let streak = 0;
  let screen = '';
  while (Date.now() < deadline) {
    screen = await session.capture();
    streak = claudeIdle(screen) ? streak + 1 : 0;
    if (streak >= 2) return;
    await sleep(20);
  }
  throw new Error(`Claude Code not idle at its prompt after ${timeoutMs} ms; screen:\n${screen.trimEnd()}`);
}

/** The fake API's record of the user prompt carrying `id`, once it arrives (undefined after `timeoutMs`). */
export async function waitForPrompt(api, id, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = api.requests.find((r) => r.kind === 'prompt' && r.prompt?.includes(id));
    if (found || Date.now() > deadline) return found;
    await sleep(5);
  }
}

/** How many user prompts that reached the model carry `id`. */
export function promptsWith(api, id) {
  return api.prompts().filter((prompt) => prompt.includes(id)).length;
}

/** The TypeScript test support (agent TUIs, fake model API), loaded through tsx's ESM API. */
export async function loadAgentSupport() {
  // Imported here, not at the top: a run without Claude never loads tsx.
  const { tsImport } = await import('tsx/esm/api');
  const [agents, fake] = await Promise.all([
    tsImport('../../test/support/agentTuis.ts', import.meta.url),
    tsImport('../../test/support/fakeModelApi.ts', import.meta.url),
  ]);
  return {
    launchAgentTui: agents.launchAgentTui,
    prepareAgentHome: agents.prepareAgentHome,
    startFakeModelApi: fake.startFakeModelApi,
  };
}
