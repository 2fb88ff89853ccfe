import { execFile, execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/** Every child this benchmark started and that has not exited yet. */
const running = new Set();

/** The caller's environment without BRIDGE_* settings: the benchmark configures the gateway itself. */
const baseEnv = Object.fromEntries(
  Object.entries(process.env).filter(([name]) => !name.startsWith('BRIDGE_')),
);

/**
 * Starts a node script as a child process the benchmark keeps track of (and kills at exit).
 * @param {string[]} args
 * @param {{ env?: Record<string, string>, cwd?: string }} [options]
 */
export function spawnNode(args, { env = {}, cwd } = {}) {
  const child = spawn(process.execPath, args, {
    cwd,
    env: { ...baseEnv, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(child);
  let output = '';
  const collect = (chunk) => {
    output += chunk.toString();
    if (output.length > 200_000) output = output.slice(-100_000);
  };
  child.stdout.on('data', collect);
  child.stderr.on('data', collect);
  const exited = new Promise((resolve) => {
    child.once('exit', (code, signal) => {
      running.delete(child);
      resolve(code ?? signal);
    });
  });
  return {
    child,
    exited,
    /** Everything it printed so far (tail), for error messages. */
    output: () => output,
    /** Its cumulative CPU time (user + system), from /proc. */
    cpuMs: () => childCpuMs(child.pid),
    /** SIGTERM, then SIGKILL if it has not exited within `graceMs`. Resolves with its exit code. */
    async stop(graceMs = 10_000) {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

let clockTicks;

/** A process's cumulative CPU time (user + system) in ms, from /proc/<pid>/stat. */
export function childCpuMs(pid) {
  clockTicks ??= Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
  // /proc/<pid>/stat: the command may contain spaces, so count fields after its closing paren.
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / clockTicks;
}

/** Kills whatever is still running; for the exit handler, so it must be synchronous. */
export function killRunningChildren() {
  for (const child of running) child.kill('SIGKILL');
}

/**
 * Runs a node script to completion and returns its stdout; rejects with its output on failure.
 * @param {string[]} args
 * @param {{ env?: Record<string, string>, timeoutMs?: number }} [options]
 * @returns {Promise<string>}
 */
export function runNode(args, { env = {}, timeoutMs = 30_000 } = {}) {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      args,
      { env: { ...baseEnv, ...env }, timeout: timeoutMs },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`node ${args.join(' ')} failed: ${err.message}\n${stdout}${stderr}`));
        else resolve(stdout);
      },
    );
  });
}

/**
 * Polls `check` until it returns a truthy value; fails early if `process` exits meanwhile.
 * @template T
 * @param {() => Promise<T>} check
 * @param {{ what: string, process?: ReturnType<typeof spawnNode>, timeoutMs?: number }} options
 * @returns {Promise<T>}
 */
export async function waitFor(check, { what, process: proc, timeoutMs = 20_000 }) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (proc && proc.child.exitCode !== null) {
      throw new Error(`${what}: the process exited with ${proc.child.exitCode}:\n${proc.output()}`);
    }
    const value = await check().catch(() => undefined);
    if (value) return value;
    await sleep(25);
  }
  throw new Error(`${what}: not ready after ${timeoutMs} ms${proc ? `:\n${proc.output()}` : ''}`);
}

/** A free TCP port on loopback (asked of the kernel, then released). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = /** @type {import('node:net').AddressInfo} */ (server.address());
      server.close(() => resolve(port));
    });
  });
}

/** @typedef {ReturnType<typeof createTeardown>} Teardown */

/** Teardowns that have not run yet: the run's timeout and signal handlers run them before exiting. */
const pendingTeardowns = new Set();

/**
 * The clean-up of one target, as a stack of steps added as its resources come into being (stop a
 * daemon, delete a queue on the shared broker). `run()` runs them newest first, every one even if
 * an earlier one failed, and rethrows the first failure; it runs once, however often it is called.
 * Until it has run, `runPendingTeardowns` (the timeout and signal path) runs it too.
 */
export function createTeardown() {
  const steps = [];
  let ran;
  const teardown = {
    add(step) {
      steps.push(step);
    },
    run() {
      ran ??= (async () => {
        let failure;
        // Popped one by one, so a step added while this runs (an open still in progress) runs too.
        while (steps.length > 0) {
          try {
            await steps.pop()();
          } catch (err) {
            failure ??= err;
          }
        }
        pendingTeardowns.delete(teardown);
        if (failure) throw failure;
      })();
      return ran;
    },
  };
  pendingTeardowns.add(teardown);
  return teardown;
}

/** Runs every teardown still pending, for at most `timeoutMs`; never rejects. */
export async function runPendingTeardowns(timeoutMs) {
  const all = Promise.allSettled([...pendingTeardowns].map((teardown) => teardown.run()));
  await Promise.race([all, sleep(timeoutMs)]);
}
