import type { InboundHandle } from '../deliver/handover.js';
import type { RuntimeDeps } from '../kernel/ActorCell.js';
import { inFlightSendStates } from '../machines/sendMachine.js';
import type { Metrics } from '../metrics/metrics.js';
import { dropOutboxReceipt, type OutboxReceipt, putOutboxReceipt } from '../store/receiptOutbox.js';
import type { Envelope } from '../wire/envelope.js';
import type { Receipt } from '../wire/receipt.js';
import { judgeReceipt } from './judgeReceipt.js';
import type { Router } from './Router.js';
import type { SendCell } from './SendCells.js';

export interface ReceiptsArrivingDeps extends RuntimeDeps {
  metrics: Metrics;
  router: Router;
}

/**
 * Receipts arriving at the sender's gateway (R-RC1): the stages a message's deliveries reached,
 * recorded on its send actor after checking who wrote them. From the broker, a RECEIPT another
 * gateway published to this host's control queue (`receive`); from this host, a receipt the
 * leaving half (ReceiptsLeaving) hands over for a send of this host, in the batch of the
 * delivery's transition (`recordHere`), or from the outbox once the send's actor is rebuilt
 * (`recordLater`).
 */
export class ReceiptsArriving {
  constructor(private readonly deps: ReceiptsArrivingDeps) {}

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

  /**
   * A receipt for a send of this host: recorded on its send actor now, in this batch, when the
   * actor is in memory; otherwise kept in the outbox and recorded once the actor is rebuilt.
   */
  recordHere(entry: OutboxReceipt): void {
    const cell = this.deps.router.liveSend(entry.receipt.msgId);
    if (cell) {
      this.apply(cell, entry.receipt, this.deps.host);
      return;
    }
    putOutboxReceipt(this.deps.store, entry);
    this.deps.store.batch.afterCommit(() => void this.recordLater(entry));
  }

  /** A receipt for a send of this host kept in the outbox: recorded once its actor is rebuilt. */
  async recordLater(entry: OutboxReceipt): Promise<void> {
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
    const verdict = judgeReceipt(context, receipt, from, (gid) => this.deps.router.hostOf(gid));
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
}
