import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { CommitStats } from '../store/WriteBatch.js';

export interface MetricsOptions {
  /**
   * Node's own metrics too (prom-client's defaults: event-loop delay, GC pauses by kind, heap,
   * CPU, handles). Off by default: the event-loop delay monitor wakes the process every 10 ms.
   */
  runtime?: boolean;
}

const commitBuckets = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1];

/** The gateway's Prometheus metrics (SPEC §9: observability). */
export interface Metrics {
  readonly registry: Registry;
  readonly accepted: Counter<'route'>;
  readonly deliveries: Counter<'outcome'>;
  readonly deadLetters: Counter<'reason'>;
  readonly deliveryLatency: Histogram<'mode'>;
  readonly inboxDepth: Gauge<'entity'>;
  readonly mcpSessions: Gauge<'entity'>;
  readonly parkedCalls: Gauge;
  readonly droppedConnections: Counter;
  readonly brokerConnected: Gauge;
  readonly rejectedRequests: Counter<'code'>;
  readonly presenceIgnored: Counter<'reason'>;
  readonly nudges: Counter;
  readonly asks: Counter<'outcome'>;
  readonly spawns: Counter<'outcome'>;
  readonly receipts: Counter<'outcome'>;
  /** One committed batch of the event log: its statements, its wait and its commit. */
  storeCommitted(stats: CommitStats): void;
}

export function createMetrics(
  inboxDepths: () => Iterable<[string, number]>,
  options: MetricsOptions = {},
): Metrics {
  const registry = new Registry();
  if (options.runtime) collectDefaultMetrics({ register: registry });
  const storeRows = new Counter({
    name: 'bridge_store_rows_written_total',
    help: 'Statements committed to the event log (rows inserted, updated or deleted)',
    registers: [registry],
  });
  const storeCommitOps = new Histogram({
    name: 'bridge_store_commit_ops',
    help: 'Statements per event-log transaction (a group commit: the writes of a tick or more)',
    buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000],
    registers: [registry],
  });
  const storeCommitSeconds = new Histogram({
    name: 'bridge_store_commit_seconds',
    help: 'One event-log transaction on the writer thread, its fsync included',
    buckets: commitBuckets,
    registers: [registry],
  });
  const storeWaitSeconds = new Histogram({
    name: 'bridge_store_commit_wait_seconds',
    help: 'From the first write of a batch until it was durable (behind the commit in flight, then its own)',
    buckets: commitBuckets,
    registers: [registry],
  });
  const inboxDepth = new Gauge({
    name: 'bridge_inbox_depth',
    help: 'Undelivered messages per local entity',
    labelNames: ['entity'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const [entity, depth] of inboxDepths()) this.set({ entity }, depth);
    },
  });
  return {
    registry,
    inboxDepth,
    storeCommitted({ ops, waitedMs, commitMs }) {
      storeRows.inc(ops);
      storeCommitOps.observe(ops);
      storeCommitSeconds.observe(commitMs / 1000);
      storeWaitSeconds.observe(waitedMs / 1000);
    },
    mcpSessions: new Gauge({
      name: 'bridge_mcp_sessions',
      help: 'Open MCP sessions per local entity (at most mcp.maxSessionsPerEntity)',
      labelNames: ['entity'] as const,
      registers: [registry],
    }),
    parkedCalls: new Gauge({
      name: 'bridge_parked_calls',
      help: 'Tool calls parked open (drains with wait_ms, asks, sends that wait): at most limits.maxParked',
      registers: [registry],
    }),
    droppedConnections: new Counter({
      name: 'bridge_http_connections_dropped_total',
      help: 'HTTP connections closed at once because mcp.maxConnections were open',
      registers: [registry],
    }),
    nudges: new Counter({
      name: 'bridge_nudges_total',
      help: 'Reminders sent to entities with undrained messages (U3)',
      registers: [registry],
    }),
    asks: new Counter({
      name: 'bridge_asks_total',
      help: 'Finished asking turns by outcome (answered, expired, abandoned) (U2)',
      labelNames: ['outcome'] as const,
      registers: [registry],
    }),
    spawns: new Counter({
      name: 'bridge_spawns_total',
      help: 'Spawn requests run on this host by outcome (running, refused) (U4)',
      labelNames: ['outcome'] as const,
      registers: [registry],
    }),
    receipts: new Counter({
      name: 'bridge_receipts_total',
      help:
        'Receipts (R-RC1) by outcome: sent to another host, unroutable (its gateway is gone), no-route; ' +
        'received and recorded, stale, unknown-message, wrong-recipient, wrong-host',
      labelNames: ['outcome'] as const,
      registers: [registry],
    }),
    accepted: new Counter({
      name: 'bridge_messages_accepted_total',
      help: 'Messages accepted from local senders, by route',
      labelNames: ['route'] as const,
      registers: [registry],
    }),
    deliveries: new Counter({
      name: 'bridge_deliveries_total',
      help: 'Finished deliveries by outcome',
      labelNames: ['outcome'] as const,
      registers: [registry],
    }),
    deadLetters: new Counter({
      name: 'bridge_dead_letters_total',
      help: 'Dead-lettered deliveries by reason',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
    deliveryLatency: new Histogram({
      name: 'bridge_delivery_latency_seconds',
      help: 'From acceptance to delivery (typed into the pane or handed over)',
      labelNames: ['mode'] as const,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60],
      registers: [registry],
    }),
    brokerConnected: new Gauge({
      name: 'bridge_broker_connected',
      help: '1 when connected to the broker, 0 when not; absent in single-host mode',
      registers: [registry],
    }),
    presenceIgnored: new Counter({
      name: 'bridge_presence_ignored_total',
      help: 'PRESENCE announcements ignored (malformed, bad signature, wrong host, clock skew)',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
    rejectedRequests: new Counter({
      name: 'bridge_rejected_requests_total',
      help: 'Requests refused with an error, by error code',
      labelNames: ['code'] as const,
      registers: [registry],
    }),
  };
}
