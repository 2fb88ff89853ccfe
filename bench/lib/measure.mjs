import { performance } from 'node:perf_hooks';

/**
 * The one measurement every scenario and baseline goes through: `count` operations, at most
 * `concurrency` in flight (a closed loop: each lane starts its next operation when the previous
 * one resolves). An operation's latency is the time its promise takes to resolve.
 *
 * `op(i, lane)` gets a unique index (warm-up runs use negative ones, so keys never collide) and
 * the lane it runs on (for per-lane resources such as one MCP client per lane). `cpuMs()` reads
 * the cumulative CPU time of the process doing the work (this one unless the target says
 * otherwise): CPU per message is steadier than msgs/s on a shared machine. `sideCpuMs`, a map of
 * name → reader of the same kind, breaks that down or adds other processes (the broker), reported
 * per message as `cpuUsPerMsgOf`.
 * @param {{ count: number, concurrency: number, warmup?: number, op: (i: number, lane: number) => unknown, cpuMs?: () => number, sideCpuMs?: Record<string, () => number> }} options
 */
export async function measure({ count, concurrency, warmup = 0, op, cpuMs = processCpuMs, sideCpuMs = {} }) {
  if (warmup > 0) await runLanes(warmup, concurrency, op, -warmup);
  const sides = Object.entries(sideCpuMs);
  const sidesBefore = sides.map(([, read]) => read());
  const cpuBefore = cpuMs();
  const { seconds, latencies } = await runLanes(count, concurrency, op, 0);
  const cpu = cpuMs() - cpuBefore;
  const perMsg = (ms) => round((ms * 1000) / count, 0);
  return {
    ...summarize(count, concurrency, seconds, latencies),
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

/** This process's cumulative CPU time (user + system) in ms. */
export function processCpuMs() {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
}

async function runLanes(count, concurrency, op, firstIndex) {
  const latencies = new Float64Array(count);
  let next = 0;
  const lane = async (laneIndex) => {
    while (next < count) {
      const slot = next++;
      const started = performance.now();
      await op(firstIndex + slot, laneIndex);
      latencies[slot] = performance.now() - started;
    }
  };
  const started = performance.now();
  const lanes = Array.from({ length: Math.min(concurrency, count) }, (_, laneIndex) => lane(laneIndex));
  await Promise.all(lanes);
  return { seconds: (performance.now() - started) / 1000, latencies };
}

function summarize(count, concurrency, seconds, latencies) {
  const sorted = latencies.slice().sort();
  const total = sorted.reduce((sum, ms) => sum + ms, 0);
  return {
    count,
    concurrency,
    seconds: round(seconds, 3),
    msgsPerSec: round(count / seconds, 0),
    p50Ms: round(percentile(sorted, 0.5), 3),
    p99Ms: round(percentile(sorted, 0.99), 3),
    meanMs: round(total / count, 3),
    maxMs: round(sorted[sorted.length - 1] ?? 0, 3),
  };
}

/** Nearest-rank percentile of an ascending array. */
export function percentile(sorted, q) {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)];
}

export function round(value, digits) {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
}

/** A message text of `bytes` bytes whose first word is its key (`m<i>`), so a receiver can match it. */
export function messageText(i, bytes) {
  const key = `m${i}`;
  return `${key} ${'x'.repeat(Math.max(0, bytes - key.length - 1))}`;
}

export function keyOfText(text) {
  const space = text.indexOf(' ');
  return space < 0 ? text : text.slice(0, space);
}

/**
 * Matches deliveries to the operations waiting for them, by message key. A delivery that comes
 * before its waiter registers is kept, so the order of the two never matters. With `timeoutMs`,
 * a wait that sees no delivery in time rejects (a lost message fails the run instead of hanging
 * it); `fail(err)` rejects every wait, current and future (the receiving side broke).
 * @param {{ timeoutMs?: number }} [options]
 */
export function createDeliveryTracker({ timeoutMs } = {}) {
  const waiting = new Map();
  const early = new Set();
  let failure;
  return {
    wait(key) {
      if (failure) return Promise.reject(failure);
      if (early.delete(key)) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const timer =
          timeoutMs === undefined
            ? undefined
            : setTimeout(() => {
                waiting.delete(key);
                reject(new Error(`message ${key} was not delivered within ${timeoutMs} ms`));
              }, timeoutMs).unref();
        waiting.set(key, { resolve, reject, timer });
      });
    },
    delivered(key) {
      const waiter = waiting.get(key);
      if (waiter) {
        waiting.delete(key);
        clearTimeout(waiter.timer);
        waiter.resolve();
      } else {
        early.add(key);
      }
    },
    fail(err) {
      failure = err;
      for (const waiter of waiting.values()) {
        clearTimeout(waiter.timer);
        waiter.reject(err);
      }
      waiting.clear();
    },
  };
}
