import type { Store } from './openStore.js';

/**
 * The spawn request that launched `gid` on this host, if any (what a STOP after the spawn
 * left memory looks up). Served by `events_spawn_by_gid` (schema migration 4): the terms
 * below must match that partial index's, or SQLite scans the whole log again.
 */
export function findSpawnOfGid(store: Store, gid: string): string | undefined {
  return store.prepare<[string], { actor_id: string }>(findSpawnOfGidSql).get(gid)?.actor_id;
}

/** Exported for the test that reads its query plan. */
export const findSpawnOfGidSql =
  "SELECT actor_id FROM events WHERE actor_kind = 'spawn' AND event = 'spawn.launching' " +
  "AND json_valid(data) AND json_extract(data, '$.gid') = ? LIMIT 1";
