import type { Clock } from '../kernel/clock.js';
import type { Envelope } from '../wire/envelope.js';
import type { Handover } from './handover.js';

/** A call parked on a reply: its promise, and the ways to end it or say what it answers. */
export interface ReplyWait {
  promise: Promise<Handover | null>;
  cancel: () => void;
  answering: (msgId: string) => void;
}

interface ReplyWaiter {
  /** Any message from this gid resolves it; undefined: only one answering `msgId`. */
  readonly peer: string | undefined;
  msgId: string | undefined;
  readonly resolve: (handover: Handover | null) => void;
}

/**
 * The calls of one entity parked until a message for it comes back (an open send, R-DL3; a
 * spawn's result): the first message that matches one is handed to it instead of held.
 */
export class ReplyWaiters {
  private readonly waiters: ReplyWaiter[] = [];

  constructor(private readonly clock: Clock) {}

  /**
   * Parks until a message from `peer` (or one answering `msgId`) arrives, or `ms` passes.
   * Register before sending, so a fast reply cannot slip past.
   */
  wait(peer: string | undefined, ms: number): ReplyWait {
    let waiter!: ReplyWaiter;
    const promise = new Promise<Handover | null>((resolve) => {
      waiter = { peer, msgId: undefined, resolve };
    });
    this.waiters.push(waiter);
    const cancel = (): void => {
      const index = this.waiters.indexOf(waiter);
      if (index >= 0) this.waiters.splice(index, 1);
      this.clock.clearTimeout(timer);
      waiter.resolve(null);
    };
    const timer = this.clock.setTimeout(cancel, ms);
    const answering = (msgId: string): void => {
      waiter.msgId = msgId;
    };
    return { promise, cancel, answering };
  }

  /** The oldest call `envelope` is the reply for, taken off the list; undefined if none. */
  take(envelope: Envelope): ((handover: Handover) => void) | undefined {
    const index = this.waiters.findIndex(
      (w) =>
        (w.peer !== undefined && w.peer === envelope.from.gid) ||
        (w.msgId !== undefined && w.msgId === envelope.inReplyTo),
    );
    if (index < 0) return undefined;
    const [waiter] = this.waiters.splice(index, 1);
    return waiter?.resolve;
  }

  /** Ends every parked call without a reply. */
  cancelAll(): void {
    for (const waiter of this.waiters.splice(0)) waiter.resolve(null);
  }
}
