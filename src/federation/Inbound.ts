import type { Clock } from '../kernel/clock.js';
import type { Logger } from '../log/logger.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Sealer } from '../security/messageSealing.js';
import type { Signer } from '../security/messageSigning.js';
import { type AdmissionLimits, type AdmissionTarget, admitInbound } from '../wire/admitInbound.js';
import type { DeadLetterReason } from '../wire/deadLetterReason.js';
import { type Envelope, type SpawnHeader, WireKind } from '../wire/envelope.js';
import type { Hlc } from '../wire/hlc.js';
import { judgeSender } from '../wire/judgeSender.js';
import type { InboundMessage } from './brokerMessages.js';
import type { DeadLetters } from './DeadLetters.js';

/** Where an arrival goes once admitted: an entity's inbox, or this gateway's control queue. */
export interface Destination {
  readonly queue: string;
  /** Groups arrivals for the unknown-sender grace, per destination and sender. */
  readonly id: string;
  readonly target: AdmissionTarget;
  /** Why a reply may not name the message it answers, or undefined (inboxes). */
  refusesReply?: ((envelope: Envelope) => string | undefined) | undefined;
  /** Why the destination takes no more of this sender's messages now (its share, R-H8), or undefined. */
  refusesSender?(envelope: Envelope): string | undefined;
  accept(envelope: Envelope, message: InboundMessage): void;
  /** A SPAWN refused for its content, dead-lettered; the control queue answers its requester. */
  answerSpawn?(request: SpawnHeader, why: string): void;
}

export interface InboundDeps {
  hlc: Hlc;
  clock: Clock;
  logger: Logger;
  metrics: Metrics;
  signer: Signer;
  sealer: Sealer;
  deadLetters: DeadLetters;
  /** The limits of the gateway's config, read for every arrival. */
  limits(): AdmissionLimits & { unknownSenderGraceMs: number };
  /** Whether the roster places entity `gid` on `host` (invariant 6: the sender lives on the signer). */
  livesOn(gid: string, host: string): boolean;
}

/** A message that passed admission, and the host that signed it. */
interface Admitted {
  envelope: Envelope;
  signer: string;
}

interface Arrival {
  message: InboundMessage;
  admitted: Admitted;
  graceUntil: number | undefined;
}

/** How often a message from a sender not yet in the roster is checked again during its grace. */
const unknownSenderRecheckMs = 200;

/**
 * What the broker hands this gateway, executed: `admitInbound` decides, this acks,
 * dead-letters (with metrics and an error line) or hands over. Arrivals from one sender wait
 * in line behind one whose sender the roster does not know yet, so the grace never reorders a
 * sender's messages (R-DL4) and a stranger cannot hold up anyone else's.
 */
export class Inbound {
  /** Per destination and sender: arrivals held in order behind one whose sender is not in the roster yet. */
  private readonly waiting = new Map<string, { destination: Destination; arrivals: Arrival[] }>();

  constructor(private readonly deps: InboundDeps) {}

  /**
   * Every message ends here and ends acked (delivered, or dead-lettered with its reason) or
   * left to the broker to redeliver; nothing in it throws.
   */
  receive(destination: Destination, message: InboundMessage): void {
    const { signer, clock } = this.deps;
    const admission = admitInbound(
      {
        content: message.content,
        verify: () => signer.verify(message.content, message.headers),
        open: (sealed, aad) => this.deps.sealer.open(sealed, aad),
        target: destination.target,
        now: clock.now(),
        refusesReply: destination.refusesReply,
      },
      this.deps.limits(),
    );
    if (admission.verdict === 'own-copy') {
      message.ack();
      return;
    }
    if (admission.verdict === 'refused') {
      this.reject(message, destination.queue, admission.reason, admission.detail);
      const spawn = admission.answerSpawn;
      if (spawn) destination.answerSpawn?.(spawn.request, spawn.why);
      return;
    }
    const admitted = { envelope: admission.envelope, signer: admission.signer };
    const key = `${destination.id}/${admitted.envelope.from.gid}`;
    const line = this.waiting.get(key);
    if (line) {
      line.arrivals.push({ message, admitted, graceUntil: undefined });
      return;
    }
    const deadline = this.deliver(destination, message, admitted, undefined);
    if (deadline === undefined) return;
    this.waiting.set(key, { destination, arrivals: [{ message, admitted, graceUntil: deadline }] });
    this.scheduleWaiting(key);
  }

  /** The roster changed: every held line goes forward as far as it now allows. */
  retryAll(): void {
    for (const key of [...this.waiting.keys()]) this.retryWaiting(key);
  }

  private scheduleWaiting(key: string): void {
    this.deps.clock.setTimeout(() => this.retryWaiting(key), unknownSenderRecheckMs);
  }

  /** Takes one sender's line forward as far as the roster now allows. */
  private retryWaiting(key: string): void {
    const line = this.waiting.get(key);
    if (!line) return;
    const { destination, arrivals } = line;
    while (arrivals.length > 0) {
      const head = arrivals[0] as Arrival;
      const deadline = this.deliver(destination, head.message, head.admitted, head.graceUntil);
      if (deadline !== undefined) {
        head.graceUntil = deadline;
        this.scheduleWaiting(key);
        return;
      }
      arrivals.shift();
    }
    this.waiting.delete(key);
  }

  /**
   * The roster check (the sender lives on the signing host), then the hand-over to the
   * destination. Returns the end of the grace while the roster does not know the sender yet.
   */
  private deliver(
    destination: Destination,
    message: InboundMessage,
    { envelope, signer }: Admitted,
    graceUntil: number | undefined,
  ): number | undefined {
    const { metrics, logger } = this.deps;
    const judgement = judgeSender({
      envelope,
      signer,
      signingRequired: this.deps.signer.enabled,
      livesOn: this.deps.livesOn,
      now: this.deps.clock.now(),
      graceUntil,
      graceMs: this.deps.limits().unknownSenderGraceMs,
    });
    if (judgement.verdict === 'wait') return judgement.until;
    if (judgement.verdict === 'refused') {
      this.reject(message, destination.queue, judgement.reason, judgement.detail);
      return undefined;
    }
    this.deps.hlc.receive(envelope.hlc);
    const overShare = destination.refusesSender?.(envelope);
    if (overShare !== undefined) {
      this.reject(message, destination.queue, 'maxlen', overShare);
      return undefined;
    }
    try {
      destination.accept(envelope, message);
      if (envelope.kind !== WireKind.receipt) metrics.accepted.inc({ route: 'broker' });
    } catch (err) {
      logger.error(
        { err, traceId: envelope.traceId, msgId: envelope.msgId },
        'could not accept a message from the broker',
      );
      this.reject(message, destination.queue, 'rejected', (err as Error).message);
    }
    return undefined;
  }

  private reject(message: InboundMessage, queue: string, reason: DeadLetterReason, detail: string): void {
    this.deps.metrics.deadLetters.inc({ reason });
    this.deps.logger.error(
      { queue, reason, detail, msgId: message.messageId, routingKey: message.routingKey },
      'refused a message from the broker; dead-lettered with its reason',
    );
    void this.deps.deadLetters
      .publish(message.content, {
        reason,
        detail,
        queue,
        routingKey: message.routingKey,
        messageId: message.messageId,
        signedBy: message.headers,
      })
      .then((outcome) => {
        if (outcome.ok) message.ack();
      });
  }
}
