import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openSource } from '../../src/replay/readSource.js';
import { appendEvent } from '../../src/store/appendEvent.js';
import type { EventRow } from '../../src/store/eventRow.js';
import { purgeMessage, putMessage } from '../../src/store/messageBodies.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { RecentFlows } from '../../src/store/RecentFlows.js';
import { readActorEvents, readLastHlc, readTraceEvents } from '../../src/store/readEvents.js';
import { migrations } from '../../src/store/schema.js';
import type { CommitStats } from '../../src/store/WriteBatch.js';
import type { Envelope } from '../../src/wire/envelope.js';
import { encodeHlc } from '../../src/wire/hlc.js';

/**
 * An actor's events of one commit are one row of a real events.db (schema migration 6), and
 * every reader gives them back one by one, in the order they happened: the gateway's own
 * (an actor's events, a flow's, the clock's start, the console's flows), replay, and the
 * `event_log` view; a log written before, migrated or opened read-only, reads as it did.
 */
describe('the event log: one row per actor per commit, read back event by event', () => {
  let home: string;
  let file: string;
  let store: Store | undefined;
  let commits: CommitStats[];
  let tick: number;

  beforeEach(() => {
    home = mkdtempSync(join(tmpdir(), 'bridge-event-rows-'));
    file = join(home, 'events.db');
    commits = [];
    tick = 0;
  });

  afterEach(async () => {
    await store?.close();
    rmSync(home, { recursive: true, force: true });
  });

  const open = () => {
    store = openStore({ file, onCommitted: (stats) => commits.push(stats) });
    return store;
  };

  /** One transition, with the next time of this host's clock. */
  function event(actorId: string, name: string, to: string, data: EventRow['data'] = null): EventRow {
    return {
      hlc: encodeHlc({ wall: 1_700_000_000_000, counter: ++tick }),
      host: 'h1',
      actorKind: actorId.startsWith('s') ? 'send' : 'delivery',
      actorId,
      traceId: 'trace-1',
      msgId: 'm-1',
      event: name,
      fromState: null,
      toState: to,
      data,
    };
  }

  const append = (s: Store, row: EventRow, done = false) => appendEvent(s, row, { owner: 'b', done });
  const rowCount = (s: Store) => (s.db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n;

  /** A send and a delivery moving in one commit, then the delivery alone in the next. */
  async function twoCommits(s: Store): Promise<EventRow[]> {
    const written = [
      event('s-1', 'xstate.init', 'accepted', { size: 3 }),
      event('s-1', 'send.routedLocal', 'routed-local'),
      event('d-1', 'xstate.init', 'pending', { text: 'no body here' }),
      event('d-1', 'delivery.hold', 'held'),
      event('s-1', 'send.receipt', 'queued', { stage: 'queued' }),
    ];
    for (const row of written) append(s, row);
    await s.batch.flush();
    const later = event('d-1', 'delivery.handedOver', 'handed-over', { by: 'drain' });
    append(s, later, true);
    await s.batch.flush();
    return [...written, later];
  }

  it('a commit writes one row per actor that moved, and its head once; each reader gives every event back', async () => {
    const s = open();
    const written = await twoCommits(s);
    expect(rowCount(s)).toBe(3);
    // The first commit: the send's row, its head, the delivery's row, its head.
    expect(commits[0]?.ops).toBe(4);

    const strip = (rows: EventRow[]) => rows.map(({ seq: _, ...row }) => row);
    const of = (id: string) => written.filter((row) => row.actorId === id);
    expect(strip(readActorEvents(s, 'send', 's-1'))).toEqual(of('s-1'));
    expect(strip(readActorEvents(s, 'delivery', 'd-1'))).toEqual(of('d-1'));
    // A flow's events in the order they happened, not row by row.
    expect(strip(readTraceEvents(s, 'trace-1'))).toEqual(written);
    expect(readLastHlc(s)).toBe(written.at(-1)?.hlc);
    const head = s.db.prepare("SELECT state, done FROM actors WHERE actor_id = 's-1'").get();
    expect(head).toEqual({ state: 'queued', done: 0 });

    // The view, for a query by hand: one row per event, as the table was.
    const view = s.db
      .prepare('SELECT hlc, actor_id, event, to_state, data FROM event_log ORDER BY hlc')
      .all() as Array<{
      hlc: string;
      actor_id: string;
      event: string;
      to_state: string;
      data: string | null;
    }>;
    expect(view).toEqual(
      written.map((row) => ({
        hlc: row.hlc,
        actor_id: row.actorId,
        event: row.event,
        to_state: row.toState,
        data: row.data === null ? null : JSON.stringify(row.data),
      })),
    );

    // The console's flows: every event counted, the last one the latest (a send's receipt).
    const flows = await new RecentFlows(s).read(1_699_999_000_000, 10);
    expect(flows).toEqual([
      expect.objectContaining({
        traceId: 'trace-1',
        events: 6,
        firstHlc: written[0]?.hlc,
        lastHlc: written.at(-1)?.hlc,
        last: { actorKind: 'delivery', event: 'delivery.handedOver', toState: 'handed-over' },
      }),
    ]);
    await s.close();
    store = undefined;

    // Replay reads the file as a whole, in the host's order of events.
    const source = openSource(file, undefined);
    try {
      expect(source.total).toBe(6);
      expect([...source.events()].map((row) => row.hlc)).toEqual(written.map((row) => row.hlc));
    } finally {
      source.close();
    }
  });

  it('a flow read while its last commit is in: the console counts each event once, the last the latest', async () => {
    const s = open();
    const flows = new RecentFlows(s);
    expect(await flows.read(1_699_999_000_000, 10)).toEqual([]);
    const first = event('s-1', 'xstate.init', 'accepted');
    append(s, first);
    append(s, event('d-1', 'xstate.init', 'pending'));
    const last = event('s-1', 'send.receipt', 'queued');
    append(s, last);
    await s.batch.flush();
    expect(await flows.read(1_699_999_000_000, 10)).toEqual([
      expect.objectContaining({
        events: 3,
        lastHlc: last.hlc,
        last: { actorKind: 'send', event: 'send.receipt', toState: 'queued' },
      }),
    ]);
  });

  it('a log written before migration 6 reads as it did, read-only or migrated, beside new rows', async () => {
    const old = new BetterSqlite3(file);
    for (const migration of migrations.slice(0, 5)) old.exec(migration);
    old.pragma('user_version = 5');
    const insert = old.prepare(
      `INSERT INTO events (hlc, host, actor_kind, actor_id, trace_id, msg_id, event, from_state, to_state, data)
       VALUES (?, 'h1', 'delivery', 'd-0', 'trace-0', 'm-0', ?, ?, ?, NULL)`,
    );
    const before = [event('d-0', 'xstate.init', 'pending'), event('d-0', 'delivery.hold', 'held')];
    for (const row of before) insert.run(row.hlc, row.event, row.fromState, row.toState);
    old.close();

    const unmigrated = openSource(file, undefined);
    try {
      expect([...unmigrated.events()].map((row) => row.event)).toEqual(['xstate.init', 'delivery.hold']);
    } finally {
      unmigrated.close();
    }

    const s = open();
    expect(s.db.pragma('user_version', { simple: true })).toBe(migrations.length);
    expect(readActorEvents(s, 'delivery', 'd-0').map((row) => row.event)).toEqual([
      'xstate.init',
      'delivery.hold',
    ]);
    const resumed = [event('d-0', 'delivery.inject', 'injecting'), event('d-0', 'delivery.typed', 'typed')];
    for (const row of resumed) append(s, { ...row, traceId: 'trace-0', msgId: 'm-0' });
    await s.batch.flush();
    expect(rowCount(s)).toBe(3);
    expect(readActorEvents(s, 'delivery', 'd-0').map((row) => row.event)).toEqual([
      'xstate.init',
      'delivery.hold',
      'delivery.inject',
      'delivery.typed',
    ]);
    expect(readLastHlc(s)).toBe(resumed[1]?.hlc);
  });

  it('a damaged later list is named with its row by the reader that parses it, and stops no other', async () => {
    const s = open();
    await twoCommits(s);
    s.db.prepare("UPDATE events SET later = '[[\"x\"' WHERE actor_id = 's-1'").run();
    expect(() => readActorEvents(s, 'send', 's-1')).toThrow(
      /events row seq=1: its later events are not JSON/,
    );
    s.db.prepare("UPDATE events SET later = '[[\"x\", 1]]' WHERE actor_id = 's-1'").run();
    expect(() => readActorEvents(s, 'send', 's-1')).toThrow(
      /hold an entry that is not \[hlc, event, from, to, data\]/,
    );
    // The clock's start and the console's list pass over it.
    expect(readLastHlc(s)).toMatch(/^\d{15}\.\d{6}$/);
    expect(await new RecentFlows(s).read(1_699_999_000_000, 10)).toHaveLength(1);
  });

  it('a body put and purged in one commit never reaches the disk: the purge takes the put’s place', async () => {
    const s = open();
    const envelope = { msgId: 'm-9', text: 'a body' } as Envelope;
    putMessage(s, 'b', envelope);
    purgeMessage(s, envelope.msgId, 'b');
    putMessage(s, 'c', envelope);
    await s.batch.flush();
    expect(commits.map((c) => c.ops)).toEqual([2]);
    const kept = s.db.prepare('SELECT recipient FROM messages').all();
    expect(kept).toEqual([{ recipient: 'c' }]);
  });
});
