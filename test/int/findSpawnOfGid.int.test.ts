import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { appendEvent } from '../../src/store/appendEvent.js';
import { findSpawnOfGid, findSpawnOfGidSql } from '../../src/store/findSpawnOfGid.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { migrations } from '../../src/store/schema.js';

const insertEvent = `INSERT INTO events (hlc, host, actor_kind, actor_id, trace_id, msg_id, event, from_state, to_state, data)
  VALUES ('0', 'h', ?, ?, 't', NULL, ?, 'requested', 'launching', ?)`;

/**
 * The lookup a STOP makes for a spawn no longer in memory, on a real events.db written by an
 * older schema (a launch a row of its own, damaged rows among them): the lookup reads the spawn
 * actors' rows only, and finds old launches and new ones (a later event of a spawn's row).
 */
describe('findSpawnOfGid', () => {
  let home: string;
  let store: Store | undefined;

  beforeEach(() => {
    home = mkdtempSync(join(tmpdir(), 'bridge-spawn-gid-'));
  });

  afterEach(async () => {
    await store?.close();
    rmSync(home, { recursive: true, force: true });
  });

  /** An events.db as the schema of three migrations left it. */
  function oldLog(
    file: string,
    rows: [kind: string, id: string, event: string, data: string | null][],
  ): void {
    const db = new BetterSqlite3(file);
    for (const migration of migrations.slice(0, 3)) db.exec(migration);
    db.pragma('user_version = 3');
    for (const row of rows) db.prepare(insertEvent).run(...row);
    db.close();
  }

  it('the lookup reads spawn rows only and finds old and new launches', async () => {
    const file = join(home, 'events.db');
    oldLog(file, [
      ['spawn', 'req-old', 'spawn.launching', JSON.stringify({ gid: 'gid-old', name: 'w1' })],
      ['spawn', 'req-damaged', 'spawn.launching', '{"gid": "gid-dam'],
      ['delivery', 'msg/gid-new', 'delivery.injected', JSON.stringify({ gid: 'gid-new' })],
    ]);
    store = openStore({ file });

    expect(store.db.pragma('user_version', { simple: true })).toBe(migrations.length);
    const plan = store.db
      .prepare<[string], { detail: string }>(`EXPLAIN QUERY PLAN ${findSpawnOfGidSql}`)
      .all({ gid: 'gid-old' } as never)
      .map((row) => row.detail);
    expect(plan[0]).toBe('SEARCH events USING INDEX events_by_actor (actor_kind=?)');

    expect(findSpawnOfGid(store, 'gid-old')).toBe('req-old');
    expect(findSpawnOfGid(store, 'gid-damaged')).toBeUndefined();
    // Another actor's event carrying the same field is not a launch.
    expect(findSpawnOfGid(store, 'gid-new')).toBeUndefined();

    // A spawn's creation and its launch in one commit: one row, the launch in its later events.
    const row = { host: 'h', actorKind: 'spawn', actorId: 'req-new', traceId: 't', msgId: null };
    appendEvent(
      store,
      { ...row, hlc: '1', event: 'xstate.init', fromState: null, toState: 'requested', data: null },
      { done: false },
    );
    appendEvent(
      store,
      {
        ...row,
        hlc: '2',
        event: 'spawn.launching',
        fromState: 'requested',
        toState: 'launching',
        data: { gid: 'gid-new', name: 'w2' },
      },
      { done: false },
    );
    await store.batch.flush();
    expect(store.db.prepare("SELECT count(*) AS n FROM events WHERE actor_id = 'req-new'").get()).toEqual({
      n: 1,
    });
    expect(findSpawnOfGid(store, 'gid-new')).toBe('req-new');
  });
});
