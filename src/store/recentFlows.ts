import { encodeHlc } from '../clock/hlc.js';
import type { Store } from './openStore.js';

/** One flow (a trace) as this host's log saw it, for the operator console's list. */
export interface RecentFlow {
  traceId: string;
  /**
   * The hosts it touched as this log knows them: this host, and those its sends here went to
   * (a delivery here does not record its sender's host; the flow's replay merge names them all).
   */
  hosts: string[];
  /** HLC of its first and last event here. */
  firstHlc: string;
  lastHlc: string;
  events: number;
  /** The actor kinds it touched here (send, delivery, turn, spawn, …). */
  actorKinds: string[];
  /** Its last event here: which actor kind, which event, and the state it left. */
  last: { actorKind: string; event: string; toState: string };
}

/**
 * The flows with an event in this host's log since `sinceWallMs`, the latest first, at most
 * `limit`. The log's seq grows with its HLC (one writer, one clock), so the first row of the
 * window is found by binary search on seq (point reads by rowid), not by a scan.
 */
export function readRecentFlows(store: Store, sinceWallMs: number, limit: number): RecentFlow[] {
  const since = encodeHlc({ wall: sinceWallMs, counter: 0 });
  const bounds = store
    .prepare<[], { lo: number | null; hi: number | null }>(
      'SELECT min(seq) AS lo, max(seq) AS hi FROM events',
    )
    .get();
  if (!bounds || bounds.lo === null || bounds.hi === null) return [];
  const hlcAt = store.prepare<[number], { hlc: string }>(
    'SELECT hlc FROM events WHERE seq >= ? ORDER BY seq LIMIT 1',
  );
  let lo = bounds.lo;
  let hi = bounds.hi + 1;
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    const row = hlcAt.get(mid);
    if (row === undefined || row.hlc >= since) hi = mid;
    else lo = mid + 1;
  }
  const flows = store
    .prepare<
      [number, number],
      {
        trace_id: string;
        first_hlc: string;
        last_hlc: string;
        events: number;
        kinds: string;
        hosts: string;
        peers: string | null;
        last_seq: number;
      }
    >(
      `SELECT trace_id, min(hlc) AS first_hlc, max(hlc) AS last_hlc, count(*) AS events,
              group_concat(DISTINCT actor_kind) AS kinds, group_concat(DISTINCT host) AS hosts,
              group_concat(DISTINCT CASE WHEN actor_kind = 'send' AND event = 'xstate.init'
                                         THEN json_extract(data, '$.recipientHost') END) AS peers,
              max(seq) AS last_seq
         FROM events WHERE seq >= ? GROUP BY trace_id ORDER BY last_seq DESC LIMIT ?`,
    )
    .all(lo, limit);
  const lastOf = store.prepare<[number], { actor_kind: string; event: string; to_state: string }>(
    'SELECT actor_kind, event, to_state FROM events WHERE seq = ?',
  );
  return flows.map((flow) => {
    const last = lastOf.get(flow.last_seq);
    return {
      traceId: flow.trace_id,
      hosts: [...new Set([...flow.hosts.split(','), ...(flow.peers?.split(',') ?? [])])],
      firstHlc: flow.first_hlc,
      lastHlc: flow.last_hlc,
      events: flow.events,
      actorKinds: flow.kinds.split(','),
      last: { actorKind: last?.actor_kind ?? '', event: last?.event ?? '', toState: last?.to_state ?? '' },
    };
  });
}
