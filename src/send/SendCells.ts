import { BridgeError, ErrorCode } from '../errors.js';
import { ActorCell, type RuntimeDeps, type Transition } from '../kernel/ActorCell.js';
import type { ActorKind } from '../machines/index.js';
import { sendMachine } from '../machines/sendMachine.js';
import { readActorEvents } from '../store/readEvents.js';
import { digestText } from '../wire/digest.js';
import { type Envelope, WireKind } from '../wire/envelope.js';

export const sendKind: ActorKind = 'send';

export type SendCell = ActorCell<typeof sendMachine>;

/**
 * Send actors kept in memory after their call, for the receipts that follow (R-RC1). Beyond
 * this many the oldest is dropped; a receipt for it rebuilds it from the log.
 */
export const recentSendLimit = 4096;

/**
 * The kinds whose deliveries report receipts: not a broadcast (its recipient is a routing
 * key, not an entity), nor a SPAWN or STOP (a control request, answered by SPAWN_RESULT).
 */
const receiptKinds: ReadonlySet<string> = new Set([
  WireKind.send,
  WireKind.reply,
  WireKind.ask,
  WireKind.answer,
  WireKind.tooLate,
  WireKind.spawnResult,
]);

/**
 * This host's send actors: one cell per actor, whoever asks for it (the call that sends, a
 * retry, the receipts that follow), created here or rebuilt from the log.
 */
export class SendCells {
  /** Live send actors by msgId, oldest first. */
  private readonly sends = new Map<string, SendCell>();
  /** Send actors being rebuilt from the log, so that two receipts rebuild one cell, not two. */
  private readonly loading = new Map<string, Promise<SendCell | undefined>>();
  /** Who waits for a send's next transition (bridge_send wait_for). */
  private readonly watchers = new Map<string, Set<(cell: SendCell) => void>>();

  constructor(private readonly deps: RuntimeDeps) {}

  /** A new send actor for `envelope`, on record (in this batch) before anything is sent. */
  create(envelope: Envelope, recipient: string, size: number, recipientHost?: string | undefined): SendCell {
    const sender = envelope.from;
    const cell = ActorCell.create(
      sendMachine,
      {
        msgId: envelope.msgId,
        traceId: envelope.traceId,
        kind: envelope.kind,
        sender: sender.gid,
        recipient,
        digest: digestText(envelope.text),
        size,
        ...(recipientHost === undefined ? {} : { recipientHost }),
      },
      {
        kind: sendKind,
        id: envelope.msgId,
        traceId: envelope.traceId,
        msgId: envelope.msgId,
        owner: sender.gid,
      },
      this.deps,
    );
    this.keep(cell);
    // The message's clock stamp comes after its send actor's creation, so on every host the
    // receive (which merges this stamp) sorts after the send in a replayed timeline.
    envelope.hlc = this.deps.hlc.tick();
    return cell;
  }

  /**
   * A send actor in memory, or rebuilt from its log (a retry goes on under it, a receipt is
   * recorded on it); undefined if none. Callers flush the batch first, so the log is complete.
   */
  open(msgId: string): SendCell | undefined {
    const live = this.sends.get(msgId);
    if (live) return live;
    const rows = readActorEvents(this.deps.store, sendKind, msgId);
    const first = rows[0];
    if (!first) return undefined;
    const owner = typeof first.data?.sender === 'string' ? first.data.sender : null;
    const cell = ActorCell.rehydrate(
      sendMachine,
      rows,
      { kind: sendKind, id: msgId, traceId: first.traceId, msgId, owner },
      this.deps,
    );
    if (!cell.done) this.keep(cell);
    return cell;
  }

  /** The send actor of `msgId` if it is in memory (sent lately, or rebuilt for a receipt). */
  live(msgId: string): SendCell | undefined {
    return this.sends.get(msgId);
  }

  /**
   * The send actor of `msgId`: in memory, or rebuilt from the log once everything written so
   * far is on disk. Concurrent callers get the same cell. Undefined: this host sent no such
   * message.
   */
  load(msgId: string): Promise<SendCell | undefined> {
    const live = this.sends.get(msgId);
    if (live) return Promise.resolve(live);
    let loading = this.loading.get(msgId);
    if (!loading) {
      loading = this.deps.store.batch
        .flush()
        .then(() => this.open(msgId))
        .finally(() => this.loading.delete(msgId));
      this.loading.set(msgId, loading);
    }
    return loading;
  }

  /**
   * Calls `listener` with the send actor after each of its transitions, until the returned
   * function is called.
   */
  watch(msgId: string, listener: (cell: SendCell) => void): () => void {
    let listeners = this.watchers.get(msgId);
    if (!listeners) {
      listeners = new Set();
      this.watchers.set(msgId, listeners);
    }
    listeners.add(listener);
    return () => {
      const set = this.watchers.get(msgId);
      set?.delete(listener);
      if (set?.size === 0) this.watchers.delete(msgId);
    };
  }

  /** Drops a send no receipt will come for (refused here) from memory. */
  forget(msgId: string): void {
    this.sends.delete(msgId);
  }

  /**
   * Ends a send that did not go in `failed`, with why, and throws `err` once that is on disk:
   * a refused or unpublished send never stays `accepted`.
   */
  async fail(cell: SendCell, err: unknown): Promise<never> {
    const code = err instanceof BridgeError ? err.code : ErrorCode.internal;
    cell.send({ type: 'send.failed', code, detail: (err as Error).message });
    await this.deps.store.batch.flush();
    throw err;
  }

  /** Keeps a live send cell in memory (bounded), and tells watchers of its transitions. */
  private keep(cell: SendCell): void {
    if (!receiptKinds.has(cell.context.kind)) return;
    const msgId = cell.context.msgId;
    this.sends.set(msgId, cell);
    cell.onTransition = (transition) => this.onTransition(msgId, cell, transition);
    if (this.sends.size <= recentSendLimit) return;
    // The oldest goes, unless its call still holds it (accepted, published): a second cell for
    // the same actor would write a log that contradicts the first.
    let looked = 0;
    for (const [id, oldest] of this.sends) {
      if (++looked > 16) break;
      if (oldest.state === 'accepted' || oldest.state === 'published') continue;
      this.sends.delete(id);
      break;
    }
  }

  private onTransition(msgId: string, cell: SendCell, transition: Transition): void {
    if (transition.done && this.sends.get(msgId) === cell) this.sends.delete(msgId);
    const listeners = this.watchers.get(msgId);
    if (listeners) for (const listener of [...listeners]) listener(cell);
  }
}
