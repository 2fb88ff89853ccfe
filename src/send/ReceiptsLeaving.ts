import type { Federation } from '../federation/Federation.js';
import type { RuntimeDeps } from '../kernel/ActorCell.js';
import type { Metrics } from '../metrics/metrics.js';
import { readMessage, storedEnvelope } from '../store/messageBodies.js';
import {
  dropOutboxReceipt,
  type OutboxReceipt,
  putOutboxReceipt,
  readOutboxReceipts,
} from '../store/receiptOutbox.js';
import {
  type Envelope,
  maxReceiptBytesPerEnvelope,
  maxReceiptsPerEnvelope,
  schemaVersionString,
  WireKind,
} from '../wire/envelope.js';
import { gatewayAddress } from '../wire/gatewayAddress.js';
import { uuidv7 } from '../wire/ids.js';
import { type Receipt, type ReceiptRoute, type ReceiptSink, stageRank } from '../wire/receipt.js';
import type { ReceiptsArriving } from './ReceiptsArriving.js';
import type { Router } from './Router.js';

export interface ReceiptsLeavingDeps extends RuntimeDeps {
  metrics: Metrics;
  /** Where a sender lives (Router.hostOf). */
  router: Pick<Router, 'hostOf'>;
  federation?: Federation | undefined;
  /** Where a receipt for a send of this host goes: straight to its send actor. */
  arriving: Pick<ReceiptsArriving, 'recordHere' | 'recordLater'>;
  /**
   * How long committed receipts gather before they are published (default
   * `receiptGatherMs`); 0 publishes each commit's at once.
   */
  gatherMs?: number | undefined;
}
/**
 * Committed receipts gather this long before they go out: a burst of deliveries (and the
 * queued and handed-over of a message drained at once) shares one RECEIPT per host. Receipts
 * are reports, not the message: a few milliseconds more is cheap, a publish per stage is not.
 */
export const receiptGatherMs = 10;

/** A receipt waiting for the end of the tick, with where it goes. */
interface Pending {
  receipt: Receipt;
  route: ReceiptRoute;
}

function keyOf(receipt: Receipt): string {
  return `${receipt.msgId}/${receipt.recipient}`;
}

/**
 * Receipts leaving the recipient's gateway (R-RC1): the entity actors' sink for the stages their
 * deliveries reach. A receipt for a send of this host goes to the arriving half at once (same
 * tick, same batch, no broker); any other goes through a durable outbox row (written in the
 * batch of the delivery's transition), published after commit in a signed RECEIPT to
 * `control.<senderHost>` and deleted once the broker confirms it. Several stages in one tick
 * coalesce into the latest; committed receipts gather for `receiptGatherMs` and go out
 * together, one RECEIPT per host; rows left by a crash or an outage are published again when
 * the broker connects.
 */
export class ReceiptsLeaving implements ReceiptSink {
  private readonly pending = new Map<string, Pending>();
  private scheduled = false;
  /** Stage being published per delivery, so a reconnect does not publish it a second time. */
  private readonly inFlight = new Map<string, string>();
  /** Committed receipts waiting for the end of the gathering window, the furthest per delivery. */
  private readonly gathered = new Map<string, OutboxReceipt>();
  private gathering: unknown;

  constructor(private readonly deps: ReceiptsLeavingDeps) {}

  /** ReceiptSink: keeps the furthest stage of this tick per delivery; the tick's end sends them. */
  record(receipt: Receipt, route: ReceiptRoute): void {
    const key = keyOf(receipt);
    const earlier = this.pending.get(key);
    if (earlier && stageRank(earlier.receipt.stage) >= stageRank(receipt.stage)) return;
    const senderHost = route.senderHost ?? earlier?.route.senderHost;
    this.pending.set(key, { receipt, route: { ...route, senderHost } });
    if (this.scheduled) return;
    this.scheduled = true;
    // Still in this tick, before the batch commits (a commit waits for setImmediate): the
    // outbox row goes into the batch of the transition, and a same-host send has been routed.
    queueMicrotask(() => this.takePending());
  }

  /**
   * At start: records receipts for this host's own sends that a crash left in the outbox. Those
   * for other hosts wait for the broker (`republish`).
   */
  start(): void {
    for (const entry of readOutboxReceipts(this.deps.store)) {
      if (entry.senderHost === this.deps.host) void this.deps.arriving.recordLater(entry);
    }
  }

  /** Publishes every receipt the outbox still holds for other hosts (the broker is back). */
  republish(): void {
    const rows = readOutboxReceipts(this.deps.store).filter((entry) => entry.senderHost !== this.deps.host);
    if (rows.length > 0)
      this.deps.logger.info({ receipts: rows.length }, 'publishing receipts left in the outbox');
    this.publishAll(rows);
  }

  private takePending(): void {
    this.scheduled = false;
    const taken = [...this.pending.values()];
    this.pending.clear();
    const outgoing: OutboxReceipt[] = [];
    for (const { receipt, route } of taken) {
      const senderHost = route.senderHost ?? this.senderHostOf(receipt, route.sender);
      if (senderHost === undefined) {
        this.deps.metrics.receipts.inc({ outcome: 'no-route' });
        this.deps.logger.warn(
          { traceId: route.traceId, msgId: receipt.msgId, sender: route.sender, stage: receipt.stage },
          "receipt dropped: the sender's host is not known here",
        );
        continue;
      }
      const entry: OutboxReceipt = { receipt, sender: route.sender, senderHost, traceId: route.traceId };
      if (senderHost === this.deps.host) {
        this.deps.arriving.recordHere(entry);
        continue;
      }
      if (!this.deps.federation) continue;
      putOutboxReceipt(this.deps.store, entry);
      outgoing.push(entry);
    }
    if (outgoing.length === 0) return;
    this.deps.store.batch.afterCommit(() => this.gather(outgoing));
  }

  /** Holds committed receipts for the gathering window, then publishes what is there. */
  private gather(entries: readonly OutboxReceipt[]): void {
    const ms = this.deps.gatherMs ?? receiptGatherMs;
    if (ms <= 0) {
      this.publishAll(entries);
      return;
    }
    for (const entry of entries) {
      const key = keyOf(entry.receipt);
      const earlier = this.gathered.get(key);
      if (!earlier || stageRank(entry.receipt.stage) > stageRank(earlier.receipt.stage))
        this.gathered.set(key, entry);
    }
    if (this.gathering !== undefined) return;
    // A gateway stopping does not wait for it (the clock's timers do not hold the process): the
    // rows are on disk, and go out at the next start.
    this.gathering = this.deps.clock.setTimeout(() => {
      this.gathering = undefined;
      const due = [...this.gathered.values()];
      this.gathered.clear();
      this.publishAll(due);
    }, ms);
  }

  /** Where the message came from, when the delivery's envelope is no longer in memory. */
  private senderHostOf(receipt: Receipt, sender: string): string | undefined {
    const placed = this.deps.router.hostOf(sender);
    if (placed === this.deps.host) return placed;
    const stored = storedEnvelope(readMessage(this.deps.store, receipt.msgId, receipt.recipient));
    return stored ? stored.from.host : placed;
  }

  /**
   * Publishes receipts to their senders' hosts: one RECEIPT per host (up to 64 receipts or
   * 12 KiB), so a commit's receipts cost one signature and one publish per host, not one per
   * delivery.
   */
  private publishAll(entries: readonly OutboxReceipt[]): void {
    if (!this.deps.federation?.broker.connected) return; // the rows wait for the broker (republish)
    const byHost = new Map<string, { entries: OutboxReceipt[]; bytes: number }>();
    for (const entry of entries) {
      const key = keyOf(entry.receipt);
      if (this.inFlight.get(key) === entry.receipt.stage) continue;
      this.inFlight.set(key, entry.receipt.stage);
      const bytes = Buffer.byteLength(JSON.stringify(entry.receipt)) + 1;
      let batch = byHost.get(entry.senderHost);
      if (
        !batch ||
        batch.entries.length >= maxReceiptsPerEnvelope ||
        batch.bytes + bytes > maxReceiptBytesPerEnvelope
      ) {
        if (batch) void this.publish(batch.entries);
        batch = { entries: [], bytes: 0 };
        byHost.set(entry.senderHost, batch);
      }
      batch.entries.push(entry);
      batch.bytes += bytes;
    }
    for (const batch of byHost.values()) void this.publish(batch.entries);
  }

  /** Publishes one RECEIPT (receipts for one host); drops their rows once the broker has it. */
  private async publish(batch: readonly OutboxReceipt[]): Promise<void> {
    const federation = this.deps.federation;
    const [first] = batch;
    if (!federation || !first) return;
    const { logger, metrics, store } = this.deps;
    const drop = () => {
      for (const { receipt } of batch)
        dropOutboxReceipt(store, receipt.msgId, receipt.recipient, receipt.stage);
    };
    const where = { traceId: first.traceId, senderHost: first.senderHost, receipts: batch.length };
    try {
      const outcome = await federation.publishMessage(this.envelopeOf(batch), first.senderHost, 'control');
      if (outcome.ok) {
        metrics.receipts.inc({ outcome: 'sent' }, batch.length);
        drop();
      } else if (outcome.reason === 'unroutable') {
        metrics.receipts.inc({ outcome: 'unroutable' }, batch.length);
        logger.warn(
          { ...where, msgIds: batch.map((e) => e.receipt.msgId) },
          `receipts dropped: no control.${first.senderHost} queue on the broker (that gateway is gone)`,
        );
        drop();
      } else {
        logger.warn(
          { ...where, detail: outcome.detail },
          'the broker refused receipts; they are sent again when the broker reconnects',
        );
      }
    } catch (err) {
      // The broker went away: the rows stay, and go out again on reconnect.
      logger.debug({ err, ...where }, 'receipts wait for the broker');
    } finally {
      for (const { receipt } of batch) {
        const key = keyOf(receipt);
        if (this.inFlight.get(key) === receipt.stage) this.inFlight.delete(key);
      }
    }
  }

  /**
   * The RECEIPT as it travels: from this gateway, to the senders' host, in the trace of its
   * first receipt (each receipt's own send knows its trace).
   */
  private envelopeOf(batch: readonly OutboxReceipt[]): Envelope {
    const [first] = batch as [OutboxReceipt, ...OutboxReceipt[]];
    return {
      v: schemaVersionString,
      kind: WireKind.receipt,
      msgId: uuidv7(this.deps.clock.now()),
      traceId: first.traceId,
      hlc: this.deps.hlc.tick(),
      from: gatewayAddress(this.deps.host),
      to: first.senderHost,
      text: '',
      receipts: batch.map((entry) => entry.receipt),
    };
  }
}
