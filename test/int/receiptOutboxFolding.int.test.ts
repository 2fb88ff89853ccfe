import BetterSqlite3 from 'better-sqlite3';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/openStore.js';
import { dropOutboxReceipt, putOutboxReceipt } from '../../src/store/receiptOutbox.js';
import { migrations } from '../../src/store/schema.js';
import type { CommitStats } from '../../src/store/WriteBatch.js';
import { type Receipt, receiptStages, stageRank } from '../../src/wire/receipt.js';
import '../support/propertySeed.js';

type Step = { put: Receipt['stage'] } | { drop: Receipt['stage'] };

const stage = fc.constantFrom(...receiptStages);
const step: fc.Arbitrary<Step> = fc.oneof(
  stage.map((put) => ({ put })),
  stage.map((drop) => ({ drop })),
);

/**
 * A delivery's outbox writes of one batch fold (the later of two stages written once, a later
 * stage in place of the drop of an earlier one, a drop that a later stage makes empty not
 * written): whatever the puts and drops of a batch, on a committed row of any stage or none,
 * the table ends as the same statements one by one leave it, and the batch has fewer of them.
 */
describe('the receipt outbox’s writes of one batch fold without changing what they leave', () => {
  const commits: CommitStats[] = [];
  const store = openStore({ file: ':memory:', onCommitted: (stats) => commits.push(stats) });
  const plain = new BetterSqlite3(':memory:');
  for (const migration of migrations) plain.exec(migration);
  const upsert = plain.prepare(
    `INSERT INTO receipt_outbox (msg_id, recipient, stage, rank, reason, detail, at, sender, sender_host, trace_id)
     VALUES (?, 'r', ?, ?, NULL, NULL, ?, 's', 'h', 't')
     ON CONFLICT (msg_id, recipient) DO UPDATE SET stage = excluded.stage, rank = excluded.rank, at = excluded.at
     WHERE excluded.rank > receipt_outbox.rank`,
  );
  const remove = plain.prepare(
    "DELETE FROM receipt_outbox WHERE msg_id = ? AND recipient = 'r' AND stage = ?",
  );
  const rowsOf = (db: BetterSqlite3.Database) =>
    db.prepare('SELECT msg_id, recipient, stage, rank, at FROM receipt_outbox ORDER BY msg_id').all();
  afterAll(async () => {
    plain.close();
    await store.close();
  });

  it('any puts and drops of one batch, on any committed stage or none', async () => {
    let round = 0;
    let steps = 0;
    let written = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.option(stage, { nil: undefined }),
        fc.array(step, { minLength: 1, maxLength: 6 }),
        async (committed, sequence) => {
          const msgId = `m${round++}`;
          const at = (s: Receipt['stage']) => 1_000 + stageRank(s);
          const put = (s: Receipt['stage']) => {
            putOutboxReceipt(store, {
              receipt: { msgId, recipient: 'r', stage: s, at: at(s) },
              sender: 's',
              senderHost: 'h',
              traceId: 't',
            });
            upsert.run(msgId, s, stageRank(s), at(s));
          };
          if (committed) {
            put(committed);
            await store.batch.flush();
          }
          const before = commits.length;
          for (const next of sequence) {
            if ('put' in next) put(next.put);
            else {
              dropOutboxReceipt(store, msgId, 'r', next.drop);
              remove.run(msgId, next.drop);
            }
          }
          await store.batch.flush();
          steps += sequence.length;
          written += commits.slice(before).reduce((sum, c) => sum + c.ops, 0);
          expect(rowsOf(store.db)).toEqual(rowsOf(plain));
        },
      ),
      { numRuns: 400 },
    );
    expect(written).toBeLessThan(steps);
  });
});
