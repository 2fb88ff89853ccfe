import { inFlightSendStates } from '../machines/sendMachine.js';
import type { Metrics } from '../metrics/metrics.js';
import { judgeReceipt } from '../receipts/judgeReceipt.js';
import { type Receipt, type ReceiptRoute, type ReceiptSink, stageRank } from '../receipts/receipt.js';
import type { RuntimeDeps } from '../runtime/ActorCell.js';
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
import type { Federation } from './Federation.js';
import type { InboundHandle } from './handover.js';
import type { Router } from './Router.js';
import type { SendCell } from './SendCells.js';

export interface ReceiptsDeps extends RuntimeDeps {
  metrics: Metrics;
  router: Router;
  federation?: Federation | undefined;
  /** Whether `gid` is an entity of this gateway (its messages' receipts stay here). */
  isLocal(gid: string): boolean;
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
 * Receipts (R-RC1), both ways. As the recipient's gateway it is the entity actors' sink: the
 * stages their deliveries reach go to the message's send actor, directly when the sender is
 * on this host (same tick, same batch, no broker), otherwise through a durable outbox row
 * (written in the batch of the delivery's transition), published after commit in a signed
 * RECEIPT to `control.<senderHost>` and deleted once the broker confirms it. Several stages in
 * one tick coalesce into the latest; committed receipts gather for `receiptGatherMs` and go out
 * together, one RECEIPT per host; rows left by a crash or an outage are published again when
 * the broker connects. As the sender's gateway it records each receipt of a RECEIPT its control
 * queue admits on the send actor it is about, after checking who wrote it.
 */
export class Receipts implements ReceiptSink {
  private readonly pending = new Map<string, Pending>();
  private scheduled = false;
  /** Stage being published per delivery, so a reconnect does not publish it a second time. */
  private readonly inFlight = new Map<string, string>();
  /** Committed receipts waiting for the end of the gathering window, the furthest per delivery. */
  private readonly gathered = new Map<string, OutboxReceipt>();
  private gathering: ReturnType<typeof setTimeout> | undefined;

  constructor(private readonly deps: ReceiptsDeps) {}

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
      if (entry.senderHost === this.deps.host) void this.recordLater(entry);
    }
  }

  /** Publishes every receipt the outbox still holds for other hosts (the broker is back). */
  republish(): void {
    const rows = readOutboxReceipts(this.deps.store).filter((entry) => entry.senderHost !== this.deps.host);
    if (rows.length > 0)
      this.deps.logger.info({ receipts: rows.length }, 'publishing receipts left in the outbox');
    this.publishAll(rows);
  }

  /**
   * A RECEIPT admitted from this host's control queue (signature, schema, signer = the host it
   * names, clock, expiry: federation's admission). Each receipt in it is checked and recorded on
   * its send; the RECEIPT is acked once all of that is on disk. A receipt for a message this host
   * did not send, or one that fails the checks, is logged and counted; the others still count.
   */
  receive(envelope: Envelope, inbound: InboundHandle): void {
    const receipts = envelope.receipts ?? [];
    const { logger, store } = this.deps;
    const from = envelope.from.host;
    let left = receipts.length;
    const settled = () => {
      if (--left === 0) store.batch.afterCommit(() => inbound.ack());
    };
    if (left === 0) inbound.ack();
    for (const receipt of receipts) {
      this.deps.router.loadSend(receipt.msgId).then(
        (cell) => {
          if (cell) {
            this.apply(cell, receipt, from, settled);
            return;
          }
          this.deps.metrics.receipts.inc({ outcome: 'unknown-message' });
          logger.warn(
            { traceId: envelope.traceId, msgId: receipt.msgId, from, stage: receipt.stage },
            'receipt for a message this host did not send; dropped',
          );
          settled();
        },
        (err: unknown) => {
          logger.error(
            { err, traceId: envelope.traceId, msgId: receipt.msgId },
            'could not record a receipt',
          );
          settled();
        },
      );
    }
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
        this.recordHere(entry);
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
    if (this.gathering) return;
    this.gathering = setTimeout(() => {
      this.gathering = undefined;
      const due = [...this.gathered.values()];
      this.gathered.clear();
      this.publishAll(due);
    }, ms);
    // A gateway stopping does not wait for it: the rows are on disk, and go out at the next start.
    this.gathering.unref();
  }

  /** Where the message came from, when the delivery's envelope is no longer in memory. */
  private senderHostOf(receipt: Receipt, sender: string): string | undefined {
    if (this.deps.isLocal(sender)) return this.deps.host;
    const stored = storedEnvelope(readMessage(this.deps.store, receipt.msgId, receipt.recipient));
    if (stored) return stored.from.host;
    return this.deps.federation?.roster.find(sender)[0]?.host;
  }

  /**
   * A receipt for a send of this host: recorded on its send actor now, in this batch, when the
   * actor is in memory; otherwise kept in the outbox and recorded once the actor is rebuilt.
   */
  private recordHere(entry: OutboxReceipt): void {
    const cell = this.deps.router.liveSend(entry.receipt.msgId);
    if (cell) {
      this.apply(cell, entry.receipt, this.deps.host);
      return;
    }
    putOutboxReceipt(this.deps.store, entry);
    this.deps.store.batch.afterCommit(() => void this.recordLater(entry));
  }

  private async recordLater(entry: OutboxReceipt): Promise<void> {
    const { receipt } = entry;
    try {
      const cell = await this.deps.router.loadSend(receipt.msgId);
      // In the batch of the receipt's own event: recorded and dropped together.
      const drop = () => dropOutboxReceipt(this.deps.store, receipt.msgId, receipt.recipient, receipt.stage);
      if (cell) {
        this.apply(cell, receipt, this.deps.host, drop);
        return;
      }
      this.deps.metrics.receipts.inc({ outcome: 'unknown-message' });
      this.deps.logger.debug(
        { traceId: entry.traceId, msgId: receipt.msgId },
        'receipt for a message with no send actor here (a gateway-written one); dropped',
      );
      drop();
    } catch (err) {
      this.deps.logger.error(
        { err, traceId: entry.traceId, msgId: receipt.msgId },
        'could not record a receipt',
      );
    }
  }

  /**
   * Checks who wrote the receipt, then lets the send machine decide whether it is news; `then`
   * runs once that is done (in the same tick as the receipt's event, if any). A receipt that
   * overtook its send's confirm (or, same host, its routing) waits until the send has left
   * accepted or published.
   */
  private apply(cell: SendCell, receipt: Receipt, from: string, then?: () => void): void {
    if (inFlightSendStates.includes(cell.state)) {
      const stop = this.deps.router.watchSend(receipt.msgId, (next) => {
        if (inFlightSendStates.includes(next.state)) return;
        stop();
        // Not inside the send's own transition: next in this tick, after it.
        queueMicrotask(() => this.apply(next, receipt, from, then));
      });
      return;
    }
    this.decide(cell, receipt, from);
    then?.();
  }

  private decide(cell: SendCell, receipt: Receipt, from: string): void {
    const { context } = cell;
    const { metrics, logger } = this.deps;
    const verdict = judgeReceipt(context, receipt, from, (gid) =>
      this.deps.isLocal(gid) ? this.deps.host : this.deps.federation?.roster.find(gid)[0]?.host,
    );
    if (verdict.kind === 'refuse') {
      metrics.receipts.inc({ outcome: verdict.reason });
      logger.error(
        {
          traceId: context.traceId,
          msgId: receipt.msgId,
          from,
          stage: receipt.stage,
          reason: verdict.reason,
        },
        `refused a receipt: ${verdict.detail}`,
      );
      return;
    }
    const event = {
      type: 'send.receipt' as const,
      stage: receipt.stage,
      recipient: receipt.recipient,
      at: receipt.at,
      ...(receipt.reason === undefined ? {} : { reason: receipt.reason }),
      ...(receipt.detail === undefined ? {} : { detail: receipt.detail }),
    };
    if (!cell.can(event)) {
      metrics.receipts.inc({ outcome: 'stale' });
      logger.debug(
        { traceId: context.traceId, msgId: receipt.msgId, stage: receipt.stage, state: cell.state },
        'receipt says nothing new',
      );
      return;
    }
    cell.send(event);
    metrics.receipts.inc({ outcome: 'recorded' });
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
