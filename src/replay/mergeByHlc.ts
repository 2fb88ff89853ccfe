import { compareEvents, type ReplayEvent } from './replayEvent.js';

/**
 * Merges several hosts' event streams, each in its own log order, into one timeline in causal
 * order: by hybrid-logical-clock time (a receive merged its send's time, so it sorts after it
 * even when the receiving host's wall clock is behind), ties by host and log position. A
 * binary heap over the streams' heads: memory is one event per stream.
 */
export function* mergeByHlc(streams: Iterable<Iterable<ReplayEvent>>): Generator<ReplayEvent> {
  const heads: { event: ReplayEvent; rest: Iterator<ReplayEvent> }[] = [];
  for (const stream of streams) {
    const rest = stream[Symbol.iterator]();
    const first = rest.next();
    if (!first.done) push(heads, { event: first.value, rest });
  }
  while (heads.length > 0) {
    const top = heads[0] as (typeof heads)[number];
    yield top.event;
    const next = top.rest.next();
    if (next.done) {
      const last = heads.pop() as (typeof heads)[number];
      if (heads.length > 0) {
        heads[0] = last;
        siftDown(heads, 0);
      }
    } else {
      top.event = next.value;
      siftDown(heads, 0);
    }
  }
}

interface Head {
  event: ReplayEvent;
}

function push<T extends Head>(heap: T[], item: T): void {
  heap.push(item);
  let i = heap.length - 1;
  while (i > 0) {
    const parent = (i - 1) >> 1;
    if (compareEvents((heap[parent] as T).event, item.event) <= 0) break;
    heap[i] = heap[parent] as T;
    i = parent;
  }
  heap[i] = item;
}

function siftDown<T extends Head>(heap: T[], start: number): void {
  const item = heap[start] as T;
  let i = start;
  for (;;) {
    const left = 2 * i + 1;
    if (left >= heap.length) break;
    const right = left + 1;
    const child =
      right < heap.length && compareEvents((heap[right] as T).event, (heap[left] as T).event) < 0
        ? right
        : left;
    if (compareEvents((heap[child] as T).event, item.event) >= 0) break;
    heap[i] = heap[child] as T;
    i = child;
  }
  heap[i] = item;
}
