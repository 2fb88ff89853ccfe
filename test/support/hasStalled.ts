/** The moments a stall is judged from, in ms since the epoch. */
export interface StreamClock {
  now: number;
  /** When the receiver last got something of the stream. */
  lastArrival: number;
  /** When the receiving gateway was last (re)started and up again. */
  lastUp: number;
}

/**
 * Whether a stream has stalled: nothing arrived for `windowMs`, counted from the later of the
 * last arrival and the receiving gateway's last restart. Time while a test has the receiver
 * down is an outage it made, not a stall: under load eight SIGKILL restarts took 7-9 s each,
 * so a window counted from the last arrival alone closed as the gateway came back, before its
 * messages came off the broker, and the test reported them missing (or drained them in its
 * last look and read their states before they were recorded).
 */
export function hasStalled(at: StreamClock, windowMs: number): boolean {
  return at.now - Math.max(at.lastArrival, at.lastUp) > windowMs;
}
