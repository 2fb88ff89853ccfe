// The FIFO pump's decision (STYLE "Decide, then do"): which of an entity's deliveries, if any,
// is typed into its pane next. The entity actor asks after every delivery transition and pane
// change, and executes the verdict.

/** One delivery in an entity's FIFO, oldest first, as far as the pump looks at it. */
export interface QueuedDelivery {
  /** Its delivery machine's state (`deliveryMachine.ts`). */
  readonly state: string;
}

/** Whether the entity types into a pane now: inject mode, an injector, a pane ready for input. */
export interface PumpView {
  injecting: boolean;
  paneReady: boolean;
}

export type PumpVerdict<D extends QueuedDelivery> =
  | { verdict: 'inject'; delivery: D }
  /** Nothing to type now: why, for the reader of a trace. */
  | { verdict: 'wait'; why: 'not-injecting' | 'pane-busy' | 'head-in-flight' | 'empty' };

/**
 * The oldest pending delivery is typed when the pane can take it, one at a time, in order: a
 * head being typed, verified, retried, held or handed over keeps the rest waiting; a submitted
 * one waits only for its ack and is not in the way. Reads `queue` only up to its head.
 */
export function nextInjection<D extends QueuedDelivery>(view: PumpView, queue: Iterable<D>): PumpVerdict<D> {
  if (!view.injecting) return { verdict: 'wait', why: 'not-injecting' };
  if (!view.paneReady) return { verdict: 'wait', why: 'pane-busy' };
  for (const delivery of queue) {
    if (delivery.state === 'submitted') continue;
    if (delivery.state === 'pending') return { verdict: 'inject', delivery };
    return { verdict: 'wait', why: 'head-in-flight' };
  }
  return { verdict: 'wait', why: 'empty' };
}
