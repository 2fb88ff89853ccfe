import { BridgeError, ErrorCode } from '../errors.js';

/**
 * Whether the gateway still takes calls that act. Every service an interface calls to act (to
 * register, send, ask, answer, spawn, broadcast, drain) asks it first, so a call that comes in
 * while the gateway stops is refused with a retryable error instead of half-done.
 */
export class Lifecycle {
  private stopping = false;

  /** From now on, calls that act are refused. */
  stop(): void {
    this.stopping = true;
  }

  get stopped(): boolean {
    return this.stopping;
  }

  /** Throws SHUTTING_DOWN (retryable) once the gateway has begun to stop. */
  assertRunning(): void {
    if (this.stopping) {
      throw new BridgeError(ErrorCode.shuttingDown, 'the gateway is shutting down; retry in a moment', {
        retryable: true,
      });
    }
  }
}
