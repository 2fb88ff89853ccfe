import type { Config } from '../config/schema.js';
import { deliveryKind } from '../deliver/Delivery.js';
import type { Directory } from '../deliver/Directory.js';
import type { EntityActor } from '../deliver/EntityActor.js';
import type { Handover } from '../deliver/handover.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { Clock } from '../kernel/clock.js';
import type { Lifecycle } from '../kernel/Lifecycle.js';
import type { ParkedCalls } from '../kernel/ParkedCalls.js';
import { readActorInput } from '../kernel/readActorInput.js';
import { type Logger, newTraceId } from '../log/logger.js';
import { judgeAnswerSend } from '../machines/judgeAnswer.js';
import type { Metrics } from '../metrics/metrics.js';
import { keyedSend, type Router } from '../send/Router.js';
import { readActorHead } from '../store/actorHeads.js';
import { deliveryActorId } from '../store/actorIds.js';
import type { Store } from '../store/openStore.js';
import { type Address, type Envelope, WireKind } from '../wire/envelope.js';
import { gatewayAddress } from '../wire/gatewayAddress.js';
import { namedUuid, uuidv7 } from '../wire/ids.js';
import type { TurnOutcome, Turns } from './Turns.js';

export interface AskOptions {
  to: string;
  question: string;
  timeoutMs?: number | undefined;
  /** A retry with the same key attaches to the same turn (after a gateway restart, say). */
  idempotencyKey?: string | undefined;
  /** Aborts when the caller hangs up: the turn is abandoned. */
  signal?: AbortSignal | undefined;
}

export interface AskOutcome {
  askId: string;
  turnId: string;
  traceId: string;
  to: Address;
  answer: Envelope;
  /** Confirm once the caller has the answer (see Handover). */
  handover: Handover;
}

export interface AnswerOutcome {
  msgId: string;
  askId: string;
  turnId: string;
  traceId: string;
  /** delivered: the waiting call has it; sent: on its way to another host; too_late: the turn is over. */
  status: 'delivered' | 'sent' | 'too_late';
  duplicate: boolean;
  why?: string;
}

export interface AsksDeps {
  store: Store;
  clock: Clock;
  logger: Logger;
  host: string;
  config: Pick<Config, 'ask' | 'limits'>;
  metrics: Metrics;
  directory: Directory;
  router: Router;
  turns: Turns;
  lifecycle: Lifecycle;
  /** Where an ask parks for its turn (R-H8). */
  parked: ParkedCalls;
}

function askEnded(state: string, turnId: string): BridgeError {
  return new BridgeError(
    state === 'expired' ? ErrorCode.askExpired : ErrorCode.askAbandoned,
    `that ask (turn ${turnId}) is already ${state}: ask again with a new idempotency_key`,
  );
}

/**
 * The ask tools (U2) over the turns: `bridge_ask` opens a turn and parks the caller on it,
 * `bridge_answer` answers an ASK this host delivered, and an answer that came too late is
 * told so. What an ASK was is read from its delivery's recorded input, not from a guess.
 */
export class Asks {
  constructor(private readonly deps: AsksDeps) {}

  /**
   * Asks and parks the caller until the answer comes or the turn's deadline passes (U2).
   * Rejects with ASK_EXPIRED at the deadline, ASK_ABANDONED if the turn ends otherwise.
   */
  async ask(asker: EntityActor, options: AskOptions): Promise<AskOutcome> {
    this.deps.lifecycle.assertRunning();
    return this.deps.parked.park(asker.gid, asker.record.name, () => this.openTurn(asker, options));
  }

  private async openTurn(asker: EntityActor, options: AskOptions): Promise<AskOutcome> {
    const { config, clock, router, turns } = this.deps;
    const timeoutMs = Math.max(
      1,
      Math.min(options.timeoutMs ?? config.ask.defaultTimeoutMs, config.limits.maxWaitMs),
    );
    const to = router.resolve(options.to);
    const key = options.idempotencyKey;
    // A key another call used is refused before a turn opens for this one.
    const keyed = keyedSend({ kind: WireKind.ask, text: options.question, idempotencyKey: key }, to.gid);
    if (keyed) router.repeatOf(asker, keyed);
    const now = clock.now();
    const turnId = key === undefined ? uuidv7(now) : namedUuid(asker.gid, `turn\u0000${key}`);
    const earlier = key === undefined ? undefined : turns.stateOf(turnId);
    if (earlier) {
      // A retry of the same ask: attach to the turn if it still waits, else say how it ended.
      const context = earlier.context;
      if (earlier.state !== 'waiting' || !context) throw askEnded(earlier.state, turnId);
      this.deps.logger.info(
        { traceId: context.traceId, turnId },
        'bridge_ask retried: attached to the waiting turn',
      );
      const outcome = await turns.attach(turnId, options.signal);
      return this.askOutcome(outcome, context.askMsgId, turnId, context.traceId, to);
    }
    const askMsgId = key === undefined ? uuidv7(now) : namedUuid(asker.gid, key);
    const traceId = newTraceId();
    const deadline = now + timeoutMs;
    turns.open({
      turnId,
      askMsgId,
      traceId,
      asker: asker.gid,
      recipient: to.gid,
      startedAt: now,
      deadline,
    });
    const parked = turns.attach(turnId, options.signal);
    try {
      await router.send(asker, {
        kind: WireKind.ask,
        to,
        text: options.question,
        turnId,
        msgId: askMsgId,
        traceId,
        expiresAt: deadline,
        idempotencyKey: key,
      });
    } catch (err) {
      turns.abandon(turnId, `the ask could not be sent: ${(err as Error).message}`);
      await parked;
      throw err;
    }
    return this.askOutcome(await parked, askMsgId, turnId, traceId, to);
  }

  private askOutcome(
    outcome: TurnOutcome,
    askId: string,
    turnId: string,
    traceId: string,
    to: Address,
  ): AskOutcome {
    this.deps.metrics.asks.inc({ outcome: outcome.state });
    if (outcome.state !== 'answered') {
      throw new BridgeError(
        outcome.state === 'expired' ? ErrorCode.askExpired : ErrorCode.askAbandoned,
        outcome.state === 'expired'
          ? `${to.name}@${to.host} did not answer in time (${outcome.why}; ask ${askId}): carry on without the answer or ask again; ` +
              'an answer that still comes is not injected anywhere, and its sender is told it came too late'
          : `the ask ended without an answer: ${outcome.why} (ask ${askId})`,
        { details: { askId, turnId, traceId } },
      );
    }
    const answer = outcome.handover.envelopes[0] as Envelope;
    return { askId, turnId, traceId, to, answer, handover: outcome.handover };
  }

  /**
   * Answers an ASK this entity received. Only the first answer counts (a repeat returns the
   * first one's msgId). When this gateway can tell the turn is over (the ask's deadline has
   * passed, or the asker is here and no longer waiting), it says `too_late`.
   */
  async answer(main: EntityActor, askId: string, text: string): Promise<AnswerOutcome> {
    const { store, clock, logger, router, directory, lifecycle } = this.deps;
    lifecycle.assertRunning();
    await store.batch.flush();
    const input = readActorInput(store, 'delivery', deliveryActorId(askId, main.gid));
    if (!input) {
      throw new BridgeError(
        ErrorCode.unknownAsk,
        `no ask ${askId} was delivered to ${main.record.name}: ask_id is the msgId of an ASK you received (bridge_drain shows it)`,
      );
    }
    if (input.kind !== WireKind.ask || input.turnId === undefined) {
      throw new BridgeError(
        ErrorCode.unknownAsk,
        `message ${askId} is a ${input.kind ?? 'message'}, not an ASK: answer it with bridge_reply`,
      );
    }
    const { turnId, traceId, sender, deadline } = input;
    const msgId = namedUuid(main.gid, `answer\u0000${askId}`);
    const verdict = judgeAnswerSend({ deadline }, clock.now());
    if (verdict.verdict === 'too-late') {
      const why = `the ask expired at ${new Date(verdict.expiredAt).toISOString()}`;
      logger.warn({ traceId, askId, turnId }, `answer not sent: ${why}`);
      router.recordRefusal(main, {
        msgId,
        traceId,
        kind: WireKind.answer,
        to: sender,
        text,
        code: ErrorCode.askExpired,
        detail: why,
      });
      await store.batch.flush();
      return { msgId, askId, turnId, traceId, status: 'too_late', duplicate: false, why };
    }
    const sent = await router.send(main, {
      kind: WireKind.answer,
      to: sender,
      text,
      inReplyTo: askId,
      turnId,
      traceId,
      idempotencyKey: `answer\u0000${askId}`,
    });
    const asker = directory.byGidOrUndefined(sender);
    if (!asker)
      return { msgId: sent.msgId, askId, turnId, traceId, status: 'sent', duplicate: sent.duplicate };
    await store.batch.flush();
    const state = readActorHead(store, deliveryKind, deliveryActorId(sent.msgId, asker.gid))?.state;
    const tooLate = state === 'too-late';
    return {
      msgId: sent.msgId,
      askId,
      turnId,
      traceId,
      status: tooLate ? 'too_late' : 'delivered',
      duplicate: sent.duplicate,
      ...(tooLate ? { why: 'the asking turn was no longer waiting' } : {}),
    };
  }

  /** Tells an answer's sender that it came too late for its turn (TOO_LATE, U2). */
  async tellTooLate(answer: Envelope, why: string): Promise<void> {
    const { router, logger } = this.deps;
    const notice = router.compose(
      gatewayAddress(this.deps.host),
      WireKind.tooLate,
      answer.from.gid,
      `your answer ${answer.msgId} came too late and was not given to anyone: ${why}`,
      {
        msgId: namedUuid(answer.msgId, 'too-late'),
        traceId: answer.traceId,
        inReplyTo: answer.msgId,
        turnId: answer.turnId ?? answer.msgId,
      },
    );
    await router
      .routeEnvelope(notice)
      .catch((err: unknown) =>
        logger.warn({ err, traceId: answer.traceId }, 'could not send a TOO_LATE notice'),
      );
  }
}
