import { encodeHlc } from '../wire/hlc.js';
import { parseLater } from './eventRow.js';
import type { Store } from './openStore.js';

/**
 * One flow (a trace) as this host's log saw it, for the operator console's list. Its figures
 * count its events from the start of the first window read (the gateway's first list: the hour
 * before it), so a flow that began before that has its earlier events left out.
 */
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

interface FlowSoFar {
  readonly flow: RecentFlow;
  /** seq of its last event, for the order of the list. */
  lastSeq: number;
}

/** The host a send went to, from its creation's data (other rows: null). */
const peerColumn = `CASE WHEN actor_kind = 'send' AND event = 'xstate.init'
                         THEN json_extract(data, '$.recipientHost') END`;

interface SeedRow {
  trace_id: string;
  first_hlc: string;
  last_hlc: string;
  events: number;
  kinds: string;
  hosts: string;
  peers: string | null;
  last_seq: number;
  actor_kind: string;
  event: string;
  to_state: string;
}

interface EventRow {
  seq: number;
  hlc: string;
  host: string;
  trace_id: string;
  actor_kind: string;
  event: string;
  to_state: string;
  peer: string | null;
  later: string | null;
}

/** A row's later events; a damaged list counts for none (its row's first event still counts). */
function laterOf(later: string | null): Array<{ hlc: string; event: string; toState: string }> {
  const parsed = parseLater(later);
  return parsed.ok ? parsed.events : [];
}

/** SQL over a row whose \`later\` may be damaged: its later events' count, and its last one's field. */
const laterCount = 'iif(json_valid(later), json_array_length(later), 0)';
const lastOf = (row: string, index: number) =>
  `iif(json_valid(${row}.later), ${row}.later ->> '$[#-1][${index}]', NULL)`;

/** Events grouped per slice of the first read, between which the event loop runs. */
const seedSliceRows = 20_000;

/**
 * The flows with an event in this host's log in a recent window, kept up to date by reading
 * only the events appended since the last call: the console asks every few seconds, and a
 * grouping of the whole window (10,000 flows: ~90,000 rows) would block the gateway's event loop
 * for 50–125 ms each time. The first call finds the window's first row by binary search on seq
 * (the log's seq grows with its HLC: one writer, one clock), then groups the window in slices,
 * letting the gateway's other work run between them.
 */
export class RecentFlows {
  private readonly flows = new Map<string, FlowSoFar>();
  /** The last seq read; undefined until the first read has grouped the window. */
  private cursor: number | undefined;
  private seeding: Promise<void> | undefined;

  constructor(private readonly store: Store) {}

  /** The flows with an event since `sinceWallMs`, the latest first, at most `limit`. */
  async read(sinceWallMs: number, limit: number): Promise<RecentFlow[]> {
    const since = encodeHlc({ wall: sinceWallMs, counter: 0 });
    // Unread for longer than the window (no page was open): what it kept is all out of it.
    if (this.cursor !== undefined && this.cursor < this.firstSeqAt(since) - 1) {
      this.flows.clear();
      this.cursor = undefined;
    }
    if (this.cursor === undefined) {
      this.seeding ??= this.seed(since).finally(() => {
        this.seeding = undefined;
      });
      await this.seeding;
    }
    const next = this.store.prepare<[number, number], EventRow>(
      `SELECT seq, hlc, host, trace_id, actor_kind, event, to_state, ${peerColumn} AS peer, later
         FROM events WHERE seq > ? ORDER BY seq LIMIT ?`,
    );
    for (;;) {
      const rows = next.all(this.cursor ?? 0, seedSliceRows);
      for (const row of rows) this.add(row);
      this.cursor = rows.at(-1)?.seq ?? this.cursor;
      if (rows.length < seedSliceRows) break;
      await new Promise((resolve) => setImmediate(resolve)); // a burst: the event loop runs between slices
    }
    for (const [traceId, { flow }] of this.flows) {
      if (flow.lastHlc < since) this.flows.delete(traceId);
    }
    return [...this.flows.values()]
      .sort((a, b) => b.lastSeq - a.lastSeq)
      .slice(0, limit)
      .map(({ flow }) => ({ ...flow, hosts: [...flow.hosts], actorKinds: [...flow.actorKinds] }));
  }

  /**
   * The first read: the window's flows grouped by SQLite (several times faster than row by row),
   * seedSliceRows events at a time; what is appended meanwhile is read on after.
   */
  private async seed(since: string): Promise<void> {
    const first = this.firstSeqAt(since);
    const last = this.store.prepare<[], { hi: number | null }>('SELECT max(seq) AS hi FROM events').get()?.hi;
    // A flow's last event is the latest of its rows' last ones (the rows of one commit are in the
    // order their actors first moved, so the last row may not hold it).
    const lastHlcOf = (row: string) => `coalesce(${row}.last_hlc, ${row}.hlc)`;
    const slice = this.store.prepare<[{ from: number; to: number }], SeedRow>(
      `SELECT g.*, e.actor_kind, coalesce(${lastOf('e', 1)}, e.event) AS event,
              coalesce(${lastOf('e', 3)}, e.to_state) AS to_state FROM (
         SELECT trace_id, min(hlc) AS first_hlc, max(${lastHlcOf('events')}) AS last_hlc,
                sum(1 + ${laterCount}) AS events,
                group_concat(DISTINCT actor_kind) AS kinds, group_concat(DISTINCT host) AS hosts,
                group_concat(DISTINCT ${peerColumn}) AS peers, max(seq) AS last_seq
           FROM events WHERE seq >= @from AND seq < @to GROUP BY trace_id
       ) AS g JOIN events AS e ON e.seq = (
         SELECT seq FROM events AS t WHERE t.trace_id = g.trace_id AND t.seq >= @from AND t.seq < @to
          ORDER BY ${lastHlcOf('t')} DESC LIMIT 1)`,
    );
    const end = (last ?? first - 1) + 1;
    for (let from = first; from < end; from += seedSliceRows) {
      for (const row of slice.all({ from, to: Math.min(end, from + seedSliceRows) })) this.merge(row);
      await new Promise((resolve) => setImmediate(resolve));
    }
    this.cursor = end - 1;
  }

  /** One slice's group of a flow, added to what earlier slices found of it. */
  private merge(row: SeedRow): void {
    const hosts = [...row.hosts.split(','), ...(row.peers?.split(',') ?? [])];
    const kinds = row.kinds.split(',');
    const known = this.flows.get(row.trace_id);
    const last = { actorKind: row.actor_kind, event: row.event, toState: row.to_state };
    if (!known) {
      this.flows.set(row.trace_id, {
        lastSeq: row.last_seq,
        flow: {
          traceId: row.trace_id,
          hosts: [...new Set(hosts)],
          firstHlc: row.first_hlc,
          lastHlc: row.last_hlc,
          events: row.events,
          actorKinds: kinds,
          last,
        },
      });
      return;
    }
    const { flow } = known;
    flow.events += row.events;
    if (row.first_hlc < flow.firstHlc) flow.firstHlc = row.first_hlc;
    if (row.last_hlc > flow.lastHlc) {
      flow.lastHlc = row.last_hlc;
      flow.last = last;
    }
    if (row.last_seq > known.lastSeq) known.lastSeq = row.last_seq;
    for (const host of hosts) if (!flow.hosts.includes(host)) flow.hosts.push(host);
    for (const kind of kinds) if (!flow.actorKinds.includes(kind)) flow.actorKinds.push(kind);
  }

  private add(row: EventRow): void {
    let known = this.flows.get(row.trace_id);
    if (!known) {
      known = {
        lastSeq: row.seq,
        flow: {
          traceId: row.trace_id,
          hosts: [],
          firstHlc: row.hlc,
          lastHlc: row.hlc,
          events: 0,
          actorKinds: [],
          last: { actorKind: '', event: '', toState: '' },
        },
      };
      this.flows.set(row.trace_id, known);
    }
    const { flow } = known;
    known.lastSeq = row.seq;
    for (const step of [{ hlc: row.hlc, event: row.event, toState: row.to_state }, ...laterOf(row.later)]) {
      flow.events++;
      if (step.hlc < flow.lastHlc) continue;
      flow.lastHlc = step.hlc;
      flow.last = { actorKind: row.actor_kind, event: step.event, toState: step.toState };
    }
    if (!flow.actorKinds.includes(row.actor_kind)) flow.actorKinds.push(row.actor_kind);
    for (const host of [row.host, row.peer]) {
      if (host !== null && !flow.hosts.includes(host)) flow.hosts.push(host);
    }
  }

  /** The seq of the log's first event at or after `hlc` (one past the last if none). */
  private firstSeqAt(hlc: string): number {
    const bounds = this.store
      .prepare<[], { lo: number | null; hi: number | null }>(
        'SELECT min(seq) AS lo, max(seq) AS hi FROM events',
      )
      .get();
    if (!bounds || bounds.lo === null || bounds.hi === null) return 1;
    const hlcAt = this.store.prepare<[number], { hlc: string }>(
      'SELECT hlc FROM events WHERE seq >= ? ORDER BY seq LIMIT 1',
    );
    let lo = bounds.lo;
    let hi = bounds.hi + 1;
    while (lo < hi) {
      const mid = Math.floor((lo + hi) / 2);
      const row = hlcAt.get(mid);
      if (row === undefined || row.hlc >= hlc) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }
}
