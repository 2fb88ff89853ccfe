import type { Gauge } from 'prom-client';
import { BridgeError, ErrorCode } from '../errors.js';

/** The caps on parked calls (R-H8): `limits.maxParkedPerEntity` and `limits.maxParked`. */
export interface ParkedCaps {
  perEntity: number;
  perGateway: number;
}

/** What is parked now: for one entity, and for the gateway. */
export interface ParkedCount {
  entity: number;
  gateway: number;
}

/**
 * Why one more call may not park, or undefined. Each parked call holds a connection (a file
 * descriptor) and its request in memory for as long as it waits, so both counts are capped.
 * Pure.
 */
export function parkRefusal(count: ParkedCount, caps: ParkedCaps, entity: string): string | undefined {
  if (count.entity >= caps.perEntity) {
    return (
      `${entity} has ${count.entity} calls parked already (limits.maxParkedPerEntity is ${caps.perEntity}): ` +
      'wait for one to return, or call without wait_ms (a drain without wait_ms returns at once)'
    );
  }
  if (count.gateway >= caps.perGateway) {
    return (
      `this gateway has ${count.gateway} calls parked already (limits.maxParked is ${caps.perGateway}): ` +
      'retry in a moment, or call without wait_ms'
    );
  }
  return undefined;
}

/**
 * The tool calls parked open on this gateway (a drain's long poll, an ask's turn, a send that
 * waits for its reply or a stage), counted per entity, against the caps.
 */
export class ParkedCalls {
  private readonly byEntity = new Map<string, number>();
  private total = 0;

  constructor(
    private readonly caps: ParkedCaps,
    private readonly gauge: Gauge,
  ) {}

  /**
   * Parks `run` for entity `gid` (named `name` in a refusal) if the caps allow, else throws
   * TOO_MANY_PARKED before anything is done; its place is given back when `run` settles.
   */
  async park<T>(gid: string, name: string, run: () => Promise<T>): Promise<T> {
    const count = { entity: this.byEntity.get(gid) ?? 0, gateway: this.total };
    const refusal = parkRefusal(count, this.caps, name);
    if (refusal !== undefined) {
      throw new BridgeError(ErrorCode.tooManyParked, refusal, { retryable: true, details: { ...count } });
    }
    this.byEntity.set(gid, count.entity + 1);
    this.total++;
    this.gauge.set(this.total);
    try {
      return await run();
    } finally {
      const left = (this.byEntity.get(gid) ?? 1) - 1;
      if (left === 0) this.byEntity.delete(gid);
      else this.byEntity.set(gid, left);
      this.total--;
      this.gauge.set(this.total);
    }
  }
}
