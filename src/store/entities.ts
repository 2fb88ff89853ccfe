import { z } from 'zod';
import type { PaneTarget } from '../inject/paneInjector.js';
import { type EntityKind, entityKindSchema, isGroupName } from '../wire/envelope.js';
import type { Store } from './openStore.js';

export const paneTargetSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('tmux'), target: z.string().min(1), socket: z.string().min(1).optional() }),
  z.object({ type: z.literal('herdr'), paneId: z.string().min(1), socketPath: z.string().min(1).optional() }),
]);

/** A local entity as registered. */
export interface EntityRecord {
  gid: string;
  name: string;
  kind: EntityKind;
  groups: string[];
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

/** A stored entity, and the groups its row names that the rule refuses (an older gateway took them). */
export interface StoredEntity {
  record: EntityRecord;
  ignoredGroups: string[];
}

function toStored(raw: unknown): StoredEntity {
  const row = rowSchema.parse(raw);
  const groups = z.array(z.string()).parse(JSON.parse(row.groups));
  return {
    record: toRecord(row, groups.filter(isGroupName)),
    ignoredGroups: groups.filter((group) => !isGroupName(group)),
  };
}

function toRecord(row: z.output<typeof rowSchema>, groups: string[]): EntityRecord {
  return {
    gid: row.gid,
    name: row.name,
    kind: row.kind,
    groups,
    pane: row.pane === null ? null : (paneTargetSchema.parse(JSON.parse(row.pane)) as PaneTarget),
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

/** The local entities; a group that is no group name is left out (its binding would be a wildcard). */
export function readEntities(store: Store): StoredEntity[] {
  return store.prepare('SELECT * FROM entities ORDER BY created').all().map(toStored);
}
