/**
 * A daemon's /metrics (Prometheus text) read twice, around a measured span, and what happened in
 * between: the event-loop delay over the span (prom-client resets its histogram at each read, so
 * the read at the start opens the span), GC pauses by kind, and the event log's group commits.
 * Needs the daemon to run with `metrics.runtime: true` for the first two.
 */

/**
 * Reads `url` and returns its samples by series (`name` or `name{labels}`).
 * @param {string} url
 */
export async function scrapeMetrics(url) {
  const text = await (await fetch(url)).text();
  /** @type {Map<string, number>} */
  const samples = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const cut = line.lastIndexOf(' ');
    samples.set(line.slice(0, cut), Number(line.slice(cut + 1)));
  }
  return samples;
}

const monitorPeriodMs = 10;

const round = (value, digits = 2) => Math.round(value * 10 ** digits) / 10 ** digits;

/**
 * The samples of `name` (a histogram's `_bucket` series) by their `le`, as cumulative counts.
 * @param {Map<string, number>} samples
 * @param {string} name
 */
function buckets(samples, name) {
  /** @type {Array<[number, number]>} */
  const out = [];
  for (const [series, value] of samples) {
    const match = new RegExp(`^${name}_bucket\\{.*le="([^"]+)"`).exec(series);
    if (match) out.push([match[1] === '+Inf' ? Infinity : Number(match[1]), value]);
  }
  return out.sort((a, b) => a[0] - b[0]);
}

/** The upper bound of the bucket the `q` quantile of what was observed between two reads fell in. */
function quantileBound(before, after, name, q) {
  const start = new Map(buckets(before, name));
  const counts = buckets(after, name).map(([le, n]) => [le, n - (start.get(le) ?? 0)]);
  const total = counts.at(-1)?.[1] ?? 0;
  if (total === 0) return 0;
  return counts.find(([, n]) => n >= q * total)?.[0] ?? Infinity;
}

const delta = (before, after, series) => (after.get(series) ?? 0) - (before.get(series) ?? 0);

/**
 * What the daemon did between the reads `before` and `after`, for `messages` messages.
 * @param {Map<string, number>} before
 * @param {Map<string, number>} after
 * @param {number} messages
 */
export function metricsBetween(before, after, messages) {
  const gcKinds = /** @type {string[]} */ (
    [...after.keys()]
      .map((series) => /^nodejs_gc_duration_seconds_count\{kind="([^"]+)"\}$/.exec(series)?.[1])
      .filter(Boolean)
  );
  const gc = Object.fromEntries(
    gcKinds
      .map(
        /** @returns {[string, { count: number, ms: number }]} */
        (kind) => {
          const count = delta(before, after, `nodejs_gc_duration_seconds_count{kind="${kind}"}`);
          const ms = delta(before, after, `nodejs_gc_duration_seconds_sum{kind="${kind}"}`) * 1000;
          return [kind, { count, ms: round(ms, 1) }];
        },
      )
      .filter(([, { count }]) => count > 0),
  );
  const gcMs = Object.values(gc).reduce((sum, { ms }) => sum + ms, 0);
  const commits = delta(before, after, 'bridge_store_commit_ops_count');
  const rows = delta(before, after, 'bridge_store_rows_written_total');
  const perCommit = (name) => (commits > 0 ? (delta(before, after, `${name}_sum`) * 1000) / commits : 0);
  // The monitor's timer fires every 10 ms (prom-client's default precision) and records the
  // whole interval: what is past 10 ms is the delay.
  const lag = (name) =>
    round(Math.max(0, (after.get(`nodejs_eventloop_lag_${name}_seconds`) ?? 0) * 1000 - monitorPeriodMs), 2);
  return {
    eventLoopDelayMs: { p50: lag('p50'), p99: lag('p99'), max: lag('max') },
    gc: {
      pauses: Object.values(gc).reduce((sum, { count }) => sum + count, 0),
      ms: round(gcMs, 1),
      byKind: gc,
    },
    store: {
      commits,
      rows,
      rowsPerMessage: messages > 0 ? round(rows / messages, 2) : 0,
      opsPerCommit: commits > 0 ? round(rows / commits, 1) : 0,
      commitMsMean: round(perCommit('bridge_store_commit_seconds'), 2),
      commitMsP99Bound: quantileBound(before, after, 'bridge_store_commit_seconds', 0.99) * 1000,
      waitMsMean: round(perCommit('bridge_store_commit_wait_seconds'), 2),
      waitMsP99Bound: quantileBound(before, after, 'bridge_store_commit_wait_seconds', 0.99) * 1000,
    },
  };
}

/** One line of `metricsBetween`'s result, for a note. */
export function describeMetrics({ eventLoopDelayMs: lag, gc, store }) {
  const kinds = Object.entries(gc.byKind)
    .map(([kind, { count, ms }]) => `${kind} ${count}×/${ms} ms`)
    .join(', ');
  return (
    `event-loop delay (past the monitor's ${monitorPeriodMs} ms period) p50 ${lag.p50} ms, p99 ${lag.p99} ms, max ${lag.max} ms; ` +
    `GC ${gc.pauses} pauses, ${gc.ms} ms${kinds ? ` (${kinds})` : ''}; ` +
    `event log ${store.commits} commits, ${store.rows} rows (${store.rowsPerMessage}/message, ${store.opsPerCommit}/commit), ` +
    `commit mean ${store.commitMsMean} ms (p99 ≤ ${store.commitMsP99Bound} ms), ` +
    `a write waited until durable mean ${store.waitMsMean} ms (p99 ≤ ${store.waitMsP99Bound} ms)`
  );
}
