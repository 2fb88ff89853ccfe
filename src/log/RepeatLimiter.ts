/**
 * One log line per key per window: a warning that peers can repeat every heartbeat (an untrusted
 * host's PRESENCE, say) is written the first time, then at most once a window, with how many were
 * left out since. Keys come from peers, so at most `maxKeys` are remembered (the oldest goes);
 * a forgotten key is written again on its next occurrence, never silently lost for longer.
 */
export class RepeatLimiter {
  private readonly seen = new Map<string, { loggedAt: number; suppressed: number }>();

  constructor(
    private readonly windowMs: number,
    private readonly maxKeys = 1_000,
  ) {}

  /** Whether to write this occurrence now, and how many of its key were left out before it. */
  admit(key: string, now: number): { write: true; suppressed: number } | { write: false } {
    const entry = this.seen.get(key);
    if (entry !== undefined && now - entry.loggedAt < this.windowMs) {
      entry.suppressed += 1;
      return { write: false };
    }
    const suppressed = entry?.suppressed ?? 0;
    this.seen.delete(key);
    if (this.seen.size >= this.maxKeys) {
      const oldest = this.seen.keys().next().value;
      if (oldest !== undefined) this.seen.delete(oldest);
    }
    this.seen.set(key, { loggedAt: now, suppressed: 0 });
    return { write: true, suppressed };
  }
}
