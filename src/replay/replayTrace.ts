import { BridgeError, ErrorCode } from '../errors.js';
import { initEvent } from '../kernel/parseRecordedEvent.js';
import { mergeByHlc } from './mergeByHlc.js';
import { type Divergence, Rerun } from './Rerun.js';
import { openSource, type ReplaySource } from './readSource.js';
import type { ReplayEvent } from './replayEvent.js';

export interface ReplayOptions {
  sources: readonly string[];
  traceId: string | undefined;
  /** Re-run every actor through the current machines (default true). */
  check?: boolean;
  /** Called for each event of the merged timeline, in order. */
  onEvent?: (event: ReplayEvent) => void;
  /** Called now and then with how far it got (events done, of total). */
  onProgress?: (done: number, total: number) => void;
}

export interface ReplaySummary {
  hosts: string[];
  events: number;
  /** Actors created within the replayed events. */
  actors: number;
  divergences: Divergence[];
}

/**
 * Replays a flow across hosts: merges their logs into one causal timeline and, unless told
 * not to, checks every actor against the current machine definitions. Streams: nothing holds
 * the whole timeline.
 */
export function replayTrace(options: ReplayOptions): ReplaySummary {
  const sources: ReplaySource[] = [];
  try {
    for (const path of options.sources) {
      const source = openSource(path, options.traceId);
      const twin = sources.find((s) => s.host === source.host);
      sources.push(source);
      if (twin) {
        throw new BridgeError(
          ErrorCode.badRequest,
          `${twin.path} and ${path} are both logs of host ${source.host}: give one log per host`,
        );
      }
    }
    const total = sources.reduce((sum, s) => sum + s.total, 0);
    const rerun = options.check === false ? undefined : new Rerun();
    const divergences: Divergence[] = [];
    let actors = 0;
    let events = 0;
    const every = Math.max(1, Math.floor(total / 200));
    options.onProgress?.(0, total);
    for (const event of mergeByHlc(sources.map((s) => s.events()))) {
      events++;
      if (event.event === initEvent) actors++;
      const divergence = rerun?.check(event);
      if (divergence) divergences.push(divergence);
      options.onEvent?.(event);
      if (events % every === 0) options.onProgress?.(events, total);
    }
    options.onProgress?.(events, total);
    return { hosts: [...new Set(sources.map((s) => s.host))], events, actors, divergences };
  } finally {
    for (const source of sources) source.close();
  }
}
