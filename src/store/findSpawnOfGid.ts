import type { Store } from './openStore.js';

/**
 * The spawn request that launched `gid` on this host, if any (what a STOP after the spawn
 * left memory looks up). It reads the spawn actors' rows only (`events_by_actor`: a few per
 * spawn, never the whole log): the launch is a row of its own in a log written before schema
 * migration 6, and since then usually a later event of the spawn's first row. A row whose data
 * does not parse is passed over, not an error.
 */
export function findSpawnOfGid(store: Store, gid: string): string | undefined {
  return store.prepare<[{ gid: string }], { actor_id: string }>(findSpawnOfGidSql).get({ gid })?.actor_id;
}

/** Exported for the test that reads its query plan. */
export const findSpawnOfGidSql = `SELECT actor_id FROM events
  WHERE actor_kind = 'spawn' AND (
    (event = 'spawn.launching' AND json_valid(data) AND data ->> '$.gid' = @gid)
    OR (later IS NOT NULL AND json_valid(later) AND EXISTS (
      SELECT 1 FROM json_each(later) AS l WHERE l.value ->> 1 = 'spawn.launching' AND l.value ->> '$[4].gid' = @gid)))
  LIMIT 1`;
