import { z } from 'zod';
import type { PaneTarget } from '../inject/paneInjector.js';
import { type EntityKind, entityKindSchema } from '../wire/envelope.js';
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

function toRecord(raw: unknown): EntityRecord {
  const row = rowSchema.parse(raw);
  return {
    gid: row.gid,
    name: row.name,
    kind: row.kind,
    groups: z.array(z.string()).parse(JSON.parse(row.groups)),
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

export function readEntities(store: Store): EntityRecord[] {
  return store.prepare('SELECT * FROM entities ORDER BY created').all().map(toRecord);
}
