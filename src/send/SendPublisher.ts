import { BridgeError, ErrorCode } from '../errors.js';
import type { PublishOutcome } from '../federation/brokerMessages.js';
import type { Federation } from '../federation/Federation.js';
import { QueueMode } from '../federation/topology.js';
import type { Logger } from '../log/logger.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Store } from '../store/openStore.js';
import { type Envelope, WireKind } from '../wire/envelope.js';
import { deadLetterForRoom } from './deadLetterForRoom.js';
import type { SendCell, SendCells } from './SendCells.js';

export interface SendPublisherDeps {
  store: Store;
  metrics: Metrics;
  logger: Logger;
  cells: SendCells;
  federation: Federation;
}

/**
 * Publishes a send's envelope to the broker and moves its send actor on with the outcome:
 * confirmed, or failed with the reason the sender is told. The store keeps no copy of the
 * text (R-H2): a keyed retry of a send that never got its confirm publishes the envelope its
 * own call builds again, under the same msgId.
 */
export class SendPublisher {
  constructor(private readonly deps: SendPublisherDeps) {}

  /**
   * Publishes while the send's record commits, and returns when both are done: the broker's
   * confirm and our own log. Publishing before the record is durable is safe because a keyed
   * send's msgId comes from its key: a retry after a crash carries the same msgId, which the
   * receiver drops as a duplicate.
   */
  async published(
    cell: SendCell,
    envelope: Envelope,
    routingKey: string,
    exchange: 'msg' | 'control' = 'msg',
  ): Promise<boolean> {
    const [partial] = await Promise.all([
      this.publish(cell, envelope, routingKey, exchange),
      this.deps.store.batch.flush(),
    ]);
    return partial;
  }

  /**
   * Publishes and waits for the broker's confirm. Returns whether a broadcast was only
   * partly taken; throws for a send the broker did not take, once its failure is on disk.
   */
  async publish(
    cell: SendCell,
    envelope: Envelope,
    routingKey: string,
    exchange: 'msg' | 'control' = 'msg',
  ): Promise<boolean> {
    const { federation, metrics, cells } = this.deps;
    cell.send({ type: 'send.published' });
    let outcome: PublishOutcome;
    try {
      outcome = await federation.publishMessage(envelope, routingKey, exchange);
    } catch (err) {
      const failure =
        err instanceof BridgeError
          ? err
          : new BridgeError(ErrorCode.internal, (err as Error).message, { cause: err });
      return cells.fail(cell, failure);
    }
    if (!outcome.ok && outcome.reason === 'rejected') {
      const quorumInbox =
        federation.queueMode === QueueMode.quorum &&
        exchange === 'msg' &&
        envelope.kind !== WireKind.broadcast;
      // A quorum inbox nacks at its cap, and a cluster that lost nodes nacks its publishes too
      // (Federation.nackedInboxFull tells the two apart): one that is not full dead-letters nothing.
      if (quorumInbox && !(await federation.nackedInboxFull(routingKey))) {
        return cells.fail(
          cell,
          new BridgeError(
            ErrorCode.brokerUnavailable,
            `the broker refused the message to ${routingKey} (${outcome.detail}) while its inbox is not ` +
              'full: a cluster that lost nodes refuses quorum-queue publishes until their queues have a ' +
              'leader again (same-host messages still flow). Nothing was dead-lettered: retry later with ' +
              'the same idempotency_key',
            { retryable: true },
          ),
        );
      }
      // A quorum inbox refuses with plain reject-publish (there is no -dlx variant): the broker
      // keeps no copy, so the sender's gateway keeps one, as the broker does for a classic inbox.
      deadLetterForRoom(this.deps, envelope, {
        recipient: routingKey,
        detail: `the inbox was full: ${outcome.detail}`,
        keptByBroker: !quorumInbox,
      });
    }
    // A broadcast nacked by one full inbox still reached the others (SPEC §12).
    const partial = !outcome.ok && outcome.reason === 'rejected' && envelope.kind === WireKind.broadcast;
    if (!outcome.ok && !partial) return cells.fail(cell, refusalOf(outcome, envelope, routingKey, exchange));
    cell.send({ type: 'send.confirmed' });
    metrics.accepted.inc({ route: 'broker' });
    return partial;
  }
}

/** What the sender is told when the broker did not take its message. */
function refusalOf(
  outcome: Exclude<PublishOutcome, { ok: true }>,
  envelope: Envelope,
  routingKey: string,
  exchange: 'msg' | 'control',
): BridgeError {
  if (outcome.reason === 'rejected') {
    return new BridgeError(
      ErrorCode.inboxFull,
      `the recipient's inbox is full (broker.inboxMaxLength); the message was dead-lettered: ${outcome.detail}. ` +
        'Retry later, or ask its owner to drain it',
      { retryable: true },
    );
  }
  return new BridgeError(
    ErrorCode.unknownRecipient,
    exchange === 'control'
      ? `no gateway ${routingKey} on the broker (no control.${routingKey} queue): check the host id with bridge_roster`
      : envelope.kind === WireKind.broadcast
        ? `nobody receives ${routingKey}: no inbox is bound to it; check the group name with bridge_roster`
        : `unknown recipient ${routingKey}: no inbox exists for it on the broker; call bridge_roster to see who is reachable`,
  );
}
