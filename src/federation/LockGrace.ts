import { type BridgeError, ErrorCode } from '../errors.js';

/**
 * Whether a queue found "in use" may still be held by this gateway's own lost connection. An
 * exclusive lock queue lives on one node; a node that hung or was cut off (not killed: then its
 * peers see it go at once) still holds it until the cluster declares it down, after
 * `net_ticktime` (60 s by default, so 45 to 75 s). For that long after a working connection was
 * lost, a refusal is retried; after it, or at start, it is another gateway's. Pure: the broker
 * actor passes the time in.
 */
export class LockGrace {
  private until: number | undefined;

  constructor(private readonly graceMs: number) {}

  /** When the grace ends, while one runs. */
  get deadline(): number | undefined {
    return this.until;
  }

  /** A working connection was lost at `now`: the grace starts (once per loss). */
  lost(now: number): void {
    this.until ??= now + this.graceMs;
  }

  /** Connected with every consumer open: nothing of ours is held elsewhere any more. */
  connected(): void {
    this.until = undefined;
  }

  /** A refusal of a queue in use (not a denied permission) while the grace runs. */
  mayBeOwn(err: BridgeError, now: number): boolean {
    return (
      err.code === ErrorCode.consumerRefused && err.retryable && this.until !== undefined && now < this.until
    );
  }
}
