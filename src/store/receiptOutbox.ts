import { z } from 'zod';
import { type Receipt, receiptStages, stageRank } from '../wire/receipt.js';
import type { Store } from './openStore.js';

/** A receipt waiting to be told to its sender's gateway, and where it goes. */
export interface OutboxReceipt {
  readonly receipt: Receipt;
  readonly sender: string;
  readonly senderHost: string;
  readonly traceId: string;
}

const upsert = `INSERT INTO receipt_outbox
    (msg_id, recipient, stage, rank, reason, detail, at, sender, sender_host, trace_id)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
  ON CONFLICT (msg_id, recipient) DO UPDATE SET
    stage = excluded.stage, rank = excluded.rank, reason = excluded.reason, detail = excluded.detail,
    at = excluded.at, sender = excluded.sender, sender_host = excluded.sender_host, trace_id = excluded.trace_id
  WHERE excluded.rank > receipt_outbox.rank`;

const drop = 'DELETE FROM receipt_outbox WHERE msg_id = ? AND recipient = ? AND stage = ?';

/** Where the stage's rank sits in the upsert's parameters, and the stage in the drop's. */
const rankParam = 3;
const droppedStageParam = 2;

/** A delivery's outbox writes of one batch go by its row's key, so that they can fold (below). */
const rowKey = (msgId: string, recipient: string) => `receipt\0${msgId}\0${recipient}`;

/**
 * Keeps the receipt to tell, in the current batch: the delivery's row now holds this stage,
 * unless it already holds a later one (stages only move forward). In one batch, the later of
 * two stages is the one written, and a later stage takes the place of the drop of an earlier
 * one told meanwhile: the rows they leave are the same, with one statement fewer.
 */
export function putOutboxReceipt(store: Store, entry: OutboxReceipt): void {
  const { receipt } = entry;
  const rank = stageRank(receipt.stage);
  const params = [
    receipt.msgId,
    receipt.recipient,
    receipt.stage,
    rank,
    receipt.reason ?? null,
    receipt.detail ?? null,
    receipt.at,
    entry.sender,
    entry.senderHost,
    entry.traceId,
  ];
  store.batch.write(upsert, params, rowKey(receipt.msgId, receipt.recipient), (pending) => {
    if (pending.sql === upsert) {
      // The later stage stays, as the upsert's WHERE would keep it.
      if ((pending.params[rankParam] as number) < rank) pending.params = params;
      return true;
    }
    // The pending write drops a told stage: a later one takes its place, an earlier one follows it.
    if (stageRank(pending.params[droppedStageParam] as Receipt['stage']) >= rank) return false;
    pending.sql = upsert;
    pending.params = params;
    return true;
  });
}

/**
 * Drops a delivery's row once `stage` is told, in the current batch; a row that has moved on to
 * a later stage meanwhile stays, to be told in turn (and when that later stage is written in
 * this same batch, the drop would delete nothing: it is not written).
 */
export function dropOutboxReceipt(
  store: Store,
  msgId: string,
  recipient: string,
  stage: Receipt['stage'],
): void {
  store.batch.write(
    drop,
    [msgId, recipient, stage],
    rowKey(msgId, recipient),
    (pending) => pending.sql === upsert && (pending.params[rankParam] as number) > stageRank(stage),
  );
}

const rowSchema = z.object({
  msg_id: z.string(),
  recipient: z.string(),
  stage: z.enum(receiptStages),
  reason: z.string().nullable(),
  detail: z.string().nullable(),
  at: z.number(),
  sender: z.string(),
  sender_host: z.string(),
  trace_id: z.string(),
});

/** Every receipt not yet told (committed rows), oldest stage time first. */
export function readOutboxReceipts(store: Store): OutboxReceipt[] {
  return store
    .prepare('SELECT * FROM receipt_outbox ORDER BY at, rowid')
    .all()
    .map((raw) => {
      const row = rowSchema.parse(raw);
      return {
        receipt: {
          msgId: row.msg_id,
          recipient: row.recipient,
          stage: row.stage,
          at: row.at,
          ...(row.reason === null ? {} : { reason: row.reason }),
          ...(row.detail === null ? {} : { detail: row.detail }),
        },
        sender: row.sender,
        senderHost: row.sender_host,
        traceId: row.trace_id,
      };
    });
}
