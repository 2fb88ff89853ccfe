import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { percentile, processCpuMs, round } from './measure.mjs';

/**
 * An open-loop measurement at a fixed rate (the counterpart of `measure`, which is a closed
 * loop): operation i is due at t0 + i / rate and is started then, whether or not the earlier
 * ones have finished, so a target that cannot keep up builds a backlog instead of slowing the
 * sender down (no coordinated omission). An operation's latency runs from when it was *due* to
 * when its promise resolved, so the pacer's own lateness counts against the target too (it is
 * reported apart: `lateP99Ms`, `lateMaxMs`).
 *
 * The pacer wakes with setTimeout (about once a millisecond at 1,000/s) and starts every
 * operation that is due; it never spins, so it leaves the CPU to the processes under test.
 * At most `maxInFlight` operations are outstanding; past that it waits (and the offered rate
 * falls, which the result shows).
 *
 * Result: count, rate (asked), offeredPerSec (operations started per second), deliveredPerSec
 * (count ÷ the time from t0 to the last completion), sustained (deliveredPerSec ≥ 95% of the
 * rate, as a backlog that grew would push the last completion out, and the in-flight cap never
 * reached, as reaching it means the pacer had to hold messages back), p50/p95/p99/max/mean ms,
 * peakInFlight, cpuUsPerMsg (and cpuUsPerMsgOf by `sideCpuMs`, as `measure` does).
 * `window.start()` and `window.end()` (both awaited) run just before and just after the measured
 * operations, after the warm-up: where a profiler marks the span it reports on.
 * @param {{ rate: number, seconds: number, warmup?: number, op: (i: number) => unknown, cpuMs?: () => number, sideCpuMs?: Record<string, () => number>, maxInFlight?: number, onProgress?: (done: number, total: number) => void, window?: { start: () => Promise<void>, end: () => Promise<void> } }} options
 */
export async function measurePaced({
  rate,
  seconds,
  warmup = 0,
  op,
  cpuMs = processCpuMs,
  sideCpuMs = {},
  maxInFlight = 20_000,
  onProgress = () => {},
  window,
}) {
  if (warmup > 0) await runPaced({ rate, count: warmup, firstIndex: -warmup, op, maxInFlight });
  const count = Math.max(1, Math.round(rate * seconds));
  const sides = Object.entries(sideCpuMs);
  const sidesBefore = sides.map(([, read]) => read());
  await window?.start();
  const cpuBefore = cpuMs();
  const run = await runPaced({ rate, count, firstIndex: 0, op, maxInFlight, onProgress });
  const cpu = cpuMs() - cpuBefore;
  await window?.end();
  const perMsg = (ms) => round((ms * 1000) / count, 0);
  const sorted = run.latencies.slice().sort();
  const late = run.late.slice().sort();
  const total = sorted.reduce((sum, ms) => sum + ms, 0);
  const deliveredPerSec = round(count / (run.lastDoneMs / 1000), 0);
  return {
    count,
    rate,
    seconds: round(run.lastDoneMs / 1000, 3),
    offeredPerSec: count > 1 ? round((count - 1) / (Math.max(run.lastStartMs, 1) / 1000), 0) : rate,
    deliveredPerSec,
    sustained: deliveredPerSec >= 0.95 * rate && run.maxInFlight < maxInFlight,
    p50Ms: round(percentile(sorted, 0.5), 3),
    p95Ms: round(percentile(sorted, 0.95), 3),
    p99Ms: round(percentile(sorted, 0.99), 3),
    maxMs: round(sorted[sorted.length - 1] ?? 0, 3),
    meanMs: round(total / count, 3),
    lateP99Ms: round(percentile(late, 0.99), 3),
    lateMaxMs: round(late[late.length - 1] ?? 0, 3),
    peakInFlight: run.maxInFlight,
    inFlightCap: maxInFlight,
    cpuUsPerMsg: perMsg(cpu),
    ...(sides.length > 0
      ? {
          cpuUsPerMsgOf: Object.fromEntries(
            sides.map(([name, read], i) => [name, perMsg(read() - sidesBefore[i])]),
          ),
        }
      : {}),
  };
}

/**
 * @param {{ rate: number, count: number, firstIndex: number, op: (i: number) => unknown, maxInFlight: number, onProgress?: (done: number, total: number) => void }} options
 */
async function runPaced({ rate, count, firstIndex, op, maxInFlight, onProgress = () => {} }) {
  const intervalMs = 1000 / rate;
  const latencies = new Float64Array(count);
  const late = new Float64Array(count);
  let next = 0;
  let inFlight = 0;
  let peak = 0;
  let done = 0;
  let lastDoneMs = 0;
  let lastStartMs = 0;
  let failure;
  let wake;
  const t0 = performance.now() + 5;
  const due = (slot) => t0 + slot * intervalMs;
  const start = (slot) => {
    const now = performance.now();
    late[slot] = now - due(slot);
    lastStartMs = now - t0;
    inFlight++;
    if (inFlight > peak) peak = inFlight;
    Promise.resolve()
      .then(() => op(firstIndex + slot))
      .then(
        () => {
          const finished = performance.now();
          latencies[slot] = finished - due(slot);
          lastDoneMs = Math.max(lastDoneMs, finished - t0);
        },
        (err) => {
          failure ??= err;
        },
      )
      .finally(() => {
        inFlight--;
        done++;
        if (done % 100 === 0 || done === count) onProgress(done, count);
        wake?.();
      });
  };
  while (next < count && !failure) {
    const now = performance.now();
    while (next < count && due(next) <= now && inFlight < maxInFlight) start(next++);
    if (next >= count) break;
    if (inFlight >= maxInFlight) {
      await new Promise((resolve) => {
        wake = resolve;
      });
      wake = undefined;
    } else {
      await sleep(Math.max(0, due(next) - performance.now()));
    }
  }
  while (done < count && !failure) {
    await new Promise((resolve) => {
      wake = resolve;
    });
    wake = undefined;
  }
  // Let the last ones settle (a failure stops the pacer; the rest resolve or time out).
  while (done < next) {
    await new Promise((resolve) => {
      wake = resolve;
    });
    wake = undefined;
  }
  if (failure) throw failure;
  return { latencies, late, lastDoneMs, lastStartMs, maxInFlight: peak };
}
