import type { PublishOutcome } from '../broker/brokerMessages.js';
import { QueueMode } from '../broker/topology.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Store } from '../store/openStore.js';
import { type Envelope, WireKind } from '../wire/envelope.js';
import type { Federation } from './Federation.js';
import type { SendCell, SendCells } from './SendCells.js';

export interface SendPublisherDeps {
  store: Store;
  metrics: Metrics;
  cells: SendCells;
  federation?: Federation | undefined;
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
    if (!federation) {
      // Single-host mode, and the recipient is not (or no longer) on this host.
      return cells.fail(
        cell,
        new BridgeError(
          ErrorCode.unknownRecipient,
          `unknown recipient ${routingKey}: it is not on this host, and this gateway runs without a broker ` +
            '(single-host mode), so nothing else can reach it',
        ),
      );
    }
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
      // A quorum inbox nacks at its cap (reject-publish), but a cluster that lost its majority
      // nacks quorum-queue publishes too, and then reads such a queue as empty (RabbitMQ answers
      // 0 when the queue's leader cannot be reached) or not at all. A full inbox holds at least
      // its cap: an empty or unreadable one was not full, and nothing is dead-lettered for it.
      if (quorumInbox && !((await federation.inboxDepth(routingKey)) ?? 0)) {
        return cells.fail(
          cell,
          new BridgeError(
            ErrorCode.brokerUnavailable,
            `the broker refused the message to ${routingKey} (${outcome.detail}) while its inbox is not ` +
              'full: a cluster that lost its majority refuses quorum-queue publishes until it is back ' +
              '(same-host messages still flow). Nothing was dead-lettered: retry later with the same ' +
              'idempotency_key',
            { retryable: true },
          ),
        );
      }
      metrics.deadLetters.inc({ reason: 'maxlen' });
      // A quorum inbox refuses with plain reject-publish (there is no -dlx variant): the broker
      // keeps no copy, so the sender's gateway puts one in bridge.dlq, as a classic inbox would.
      if (quorumInbox) {
        federation.deadLetter(
          { ...envelope, to: routingKey },
          'maxlen',
          `the inbox was full: ${outcome.detail}`,
        );
      }
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
