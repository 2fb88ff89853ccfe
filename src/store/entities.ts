import { z } from 'zod';
import { type EntityKind, entityKindSchema, isGroupName } from '../wire/envelope.js';
import type { PaneTarget } from '../wire/paneTarget.js';
import { paneTargetSchema } from '../wire/paneTarget.js';
import type { Store } from './openStore.js';
import { parseJsonColumn, parseStoredRow } from './storeDamage.js';

/** A local entity as registered. */
export interface EntityRecord {
  gid: string;
  name: string;
  kind: EntityKind;
  groups: string[];
  /** Stored groups the name rule refuses: not joined, their bindings removed (see readEntities). */
  refusedGroups?: string[];
  pane: PaneTarget | null;
  tokenHash: string;
  created: string;
}

const rowSchema = z.object({
  gid: z.string(),
  name: z.string(),
  kind: entityKindSchema,
  groups: z.string(),
  pane: z.string().nullable(),
  token_hash: z.string(),
  created: z.string(),
});

function toRecord(raw: unknown): EntityRecord {
  const row = rowSchema.parse(raw);
  const stored = z.array(z.string()).parse(parseJsonColumn('groups', row.groups));
  const refused = stored.filter((group) => !isGroupName(group));
  return {
    gid: row.gid,
    name: row.name,
    kind: row.kind,
    groups: stored.filter(isGroupName),
    ...(refused.length > 0 ? { refusedGroups: refused } : {}),
    pane:
      row.pane === null ? null : (paneTargetSchema.parse(parseJsonColumn('pane', row.pane)) as PaneTarget),
    tokenHash: row.token_hash,
    created: row.created,
  };
}

export function insertEntity(store: Store, entity: EntityRecord): void {
  store.batch.write(
    'INSERT INTO entities (gid, name, kind, groups, pane, token_hash, created) VALUES (?, ?, ?, ?, ?, ?, ?)',
    [
      entity.gid,
      entity.name,
      entity.kind,
      JSON.stringify(entity.groups),
      entity.pane === null ? null : JSON.stringify(entity.pane),
      entity.tokenHash,
      entity.created,
    ],
  );
}

export function deleteEntity(store: Store, gid: string): void {
  store.batch.write('DELETE FROM entities WHERE gid = ?', [gid]);
}

/** What an entity's row is, for the error naming a damaged one. */
const entityRowHolds =
  "that entity's registration: it registers again, and the messages held for it are " +
  'dead-lettered (recipient-gone) at the next start';

/**
 * The local entities. A stored group that is no group name (an older gateway took `#`) is left
 * out of `groups` and kept in `refusedGroups`, so that its broker binding is removed. A row that
 * does not parse is a damaged event log (the gateway does not start without its entities).
 */
export function readEntities(store: Store): EntityRecord[] {
  return store
    .prepare('SELECT * FROM entities ORDER BY created')
    .all()
    .map((raw) =>
      parseStoredRow(
        store.file,
        { table: 'entities', key: { gid: (raw as { gid?: unknown }).gid }, holds: entityRowHolds },
        () => toRecord(raw),
      ),
    );
}
