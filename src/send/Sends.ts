import type { Config } from '../config/schema.js';
import type { EntityActor } from '../deliver/EntityActor.js';
import type { Handover } from '../deliver/handover.js';
import type { Clock } from '../kernel/clock.js';
import type { Lifecycle } from '../kernel/Lifecycle.js';
import type { ParkedCalls } from '../kernel/ParkedCalls.js';
import { readActorHead } from '../store/actorHeads.js';
import type { Store } from '../store/openStore.js';
import type { Envelope } from '../wire/envelope.js';
import { endsWait, type ReceiptStage, receiptStages, type WaitableStage } from '../wire/receipt.js';
import { type Router, type SendCell, type SendRequest, type SendResult, sendKind } from './Router.js';

export interface SendOptions extends Omit<SendRequest, 'to'> {
  /** A name, `name@host` or gid. */
  to: string;
  /** How long to hold the call open for the first reply (R-DL3); 0 returns at once. */
  waitMs?: number | undefined;
  /**
   * Hold the call open until the message reached this stage (or a later one, or a dead end),
   * at most `delivery.receiptWaitMs` (R-RC1).
   */
  waitFor?: WaitableStage | undefined;
}

export interface SendOutcome extends SendResult {
  /** The reply that resolved an open send, if one came in time. */
  reply?: Envelope | null;
  /** That reply's handover: confirm it once the caller has the reply (see Handover). */
  handover?: Handover;
  /** The latest stage recorded for the message when the call returned; null: none yet. */
  stage: ReceiptStage | null;
  /** With waitFor: the stage was not reached within delivery.receiptWaitMs. */
  timedOut?: boolean;
}

export interface SendsDeps {
  store: Store;
  clock: Clock;
  config: Pick<Config, 'limits' | 'delivery'>;
  router: Router;
  lifecycle: Lifecycle;
  /** Where a send that waits parks (R-H8). */
  parked: ParkedCalls;
}

/** A wait for a stage, as it ended. */
interface StageWait {
  stage: ReceiptStage | null;
  timedOut: boolean;
}

const dropStages: readonly ReceiptStage[] = ['dead-lettered', 'too-late'];

function stageOfState(state: string | undefined): ReceiptStage | null {
  return (receiptStages as readonly string[]).includes(state ?? '') ? (state as ReceiptStage) : null;
}

/**
 * The send tool's call (R-DL3, R-RC1): the router sends; this holds the call open for the first
 * reply, for a stage its receipts report, or both, and says which stage the message reached.
 */
export class Sends {
  constructor(private readonly deps: SendsDeps) {}

  /**
   * Sends a message from a local entity. With `waitMs`, holds the call open until the first
   * message back from the recipient (or answering this one) arrives (R-DL3).
   */
  async send(sender: EntityActor, options: SendOptions): Promise<SendOutcome> {
    this.deps.lifecycle.assertRunning();
    const waits = (options.waitMs ?? 0) > 0 || options.waitFor !== undefined;
    if (!waits) return this.sendAndWait(sender, options);
    return this.deps.parked.park(sender.gid, sender.record.name, () => this.sendAndWait(sender, options));
  }

  private async sendAndWait(sender: EntityActor, options: SendOptions): Promise<SendOutcome> {
    const { config, router } = this.deps;
    const waitMs = Math.min(options.waitMs ?? 0, config.limits.maxWaitMs);
    // Waiting for a reply: resolved first, so the waiter is in place before anything can answer.
    const to = waitMs > 0 ? router.resolve(options.to) : undefined;
    const waiter = to && sender.waitForReply(to.gid, waitMs);
    let result: SendResult;
    try {
      result = await router.send(sender, { ...options, to: to ?? options.to });
    } catch (err) {
      waiter?.cancel();
      throw err;
    }
    waiter?.answering(result.msgId);
    const staging =
      options.waitFor === undefined
        ? undefined
        : this.waitForStage(result.msgId, options.waitFor, config.delivery.receiptWaitMs);
    if (!waiter) {
      if (!staging) return { ...result, stage: this.stageOf(result.msgId) };
      const ended = await staging.promise;
      return { ...result, stage: ended.stage, ...(ended.timedOut ? { timedOut: true } : {}) };
    }
    // Both: a reply ends the call at once, so does a dead end (no reply can come); otherwise it
    // returns once the stage is reached (or its wait is over) and wait_ms has passed.
    type First = { reply: Handover | null } | { staged: StageWait };
    const first: First = staging
      ? await Promise.race([
          waiter.promise.then((reply) => ({ reply })),
          staging.promise.then((staged) => ({ staged })),
        ])
      : { reply: await waiter.promise };
    let handover: Handover | null;
    let staged: StageWait | undefined;
    if ('reply' in first) {
      handover = first.reply;
      if (handover) staging?.cancel();
      staged = staging ? await staging.promise : undefined;
    } else {
      staged = first.staged;
      if (staged.stage !== null && dropStages.includes(staged.stage)) waiter.cancel();
      handover = await waiter.promise;
    }
    const stage = staged && !staged.timedOut ? staged.stage : this.stageOf(result.msgId);
    return {
      ...result,
      stage,
      ...(staged?.timedOut && !handover ? { timedOut: true } : {}),
      ...(handover ? { reply: handover.envelopes[0] ?? null, handover } : { reply: null }),
    };
  }

  /** The latest stage recorded for a message this gateway sent (null: none, or no such send). */
  private stageOf(msgId: string): ReceiptStage | null {
    const live = this.deps.router.liveSend(msgId);
    return stageOfState(live ? live.state : readActorHead(this.deps.store, sendKind, msgId)?.state);
  }

  /**
   * Resolves once the message reached `wanted` (or a later stage, or a dead end: endsWait) and
   * that is on disk, or after `ms` (timedOut, with the stage reached so far); `cancel` ends it
   * at once.
   */
  private waitForStage(
    msgId: string,
    wanted: WaitableStage,
    ms: number,
  ): { promise: Promise<StageWait>; cancel: () => void } {
    const { clock, store, router } = this.deps;
    let finish!: (timedOut: boolean) => void;
    const promise = new Promise<StageWait>((resolve) => {
      let seen = this.stageOf(msgId);
      let done = false;
      let stopWatching = () => {};
      finish = (timedOut) => {
        if (done) return;
        done = true;
        stopWatching();
        clock.clearTimeout(timer);
        // What the call reports is on disk first: bridge_status says the same after a crash. A
        // failed commit stops the gateway (the store's onWriteFailure); the call still answers.
        const ended = { stage: seen, timedOut };
        store.batch.flush().then(
          () => resolve(ended),
          () => resolve(ended),
        );
      };
      const timer = clock.setTimeout(() => finish(true), ms);
      if (endsWait(seen, wanted)) {
        finish(false);
        return;
      }
      stopWatching = router.watchSend(msgId, (cell: SendCell) => {
        seen = stageOfState(cell.state) ?? seen;
        if (endsWait(seen, wanted)) finish(false);
      });
    });
    return { promise, cancel: () => finish(false) };
  }
}
