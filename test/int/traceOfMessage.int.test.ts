import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { readTraceOfMessage, traceOfMessageSql } from '../../src/store/actorHeads.js';
import { deliveryActorId } from '../../src/store/actorIds.js';
import { appendEvent } from '../../src/store/appendEvent.js';
import { openStore, type Store } from '../../src/store/openStore.js';

/**
 * The trace a reply joins (`in_reply_to`), read from the head of the message's send or of a
 * delivery of it by the actors table's key: never a scan of the log, whatever its length.
 */
describe('the trace of a message named in in_reply_to', () => {
  let home: string | undefined;
  let store: Store | undefined;
  afterEach(async () => {
    await store?.close();
    if (home) rmSync(home, { recursive: true, force: true });
  });

  it('from its send or its delivery here, by key; undefined for a message this host never had', async () => {
    home = mkdtempSync(join(tmpdir(), 'bridge-trace-of-'));
    store = openStore({ file: join(home, 'events.db') });
    const actor = (kind: string, id: string, traceId: string, msgId: string) =>
      appendEvent(
        store as Store,
        {
          hlc: '000000000000001.000001',
          host: 'h',
          actorKind: kind,
          actorId: id,
          traceId,
          msgId,
          event: 'xstate.init',
          fromState: null,
          toState: 'accepted',
          data: null,
        },
        { done: false },
      );
    actor('send', 'm-sent', 'trace-sent', 'm-sent');
    actor('delivery', deliveryActorId('m-got', 'gid-1'), 'trace-got', 'm-got');
    // Ids that share a prefix with m-got but are other messages.
    actor('delivery', deliveryActorId('m-got0', 'gid-1'), 'trace-other', 'm-got0');
    actor('delivery', deliveryActorId('m-go', 'gid-1'), 'trace-other', 'm-go');
    await store.batch.flush();

    expect(readTraceOfMessage(store, 'm-sent')).toBe('trace-sent');
    expect(readTraceOfMessage(store, 'm-got')).toBe('trace-got');
    expect(readTraceOfMessage(store, 'm-never')).toBeUndefined();
    const plan = store.db
      .prepare<[{ msgId: string; from: string; to: string }], { detail: string }>(
        `EXPLAIN QUERY PLAN ${traceOfMessageSql}`,
      )
      .all({ msgId: 'm', from: 'm/', to: 'm0' })
      .map((row) => row.detail);
    expect(plan.filter((detail) => detail.startsWith('SCAN'))).toEqual([]);
    expect(plan.filter((detail) => detail.startsWith('SEARCH actors'))).toHaveLength(2);
  });
});
