/**
 * Hybrid logical clock (Kulkarni et al.): wall-clock milliseconds plus a counter, advanced on
 * every local event and merged on every receive, so a receive always sorts after its send even
 * when hosts' wall clocks disagree. Encoded as a fixed-width string that sorts lexicographically.
 */
export interface HlcTime {
  readonly wall: number;
  readonly counter: number;
}

const wallWidth = 15;
const counterWidth = 6;
const counterLimit = 10 ** counterWidth;

export function encodeHlc(time: HlcTime): string {
  return `${String(time.wall).padStart(wallWidth, '0')}.${String(time.counter).padStart(counterWidth, '0')}`;
}

const hlcPattern = /^(\d{15})\.(\d{6})$/;

export function isHlc(value: string): boolean {
  return hlcPattern.test(value);
}

export function decodeHlc(value: string): HlcTime {
  const match = hlcPattern.exec(value);
  if (!match) throw new Error(`not a hybrid-logical-clock time: ${JSON.stringify(value)}`);
  return { wall: Number(match[1]), counter: Number(match[2]) };
}

export interface Hlc {
  /** Advances the clock for a local event (or a send) and returns the new time. */
  tick(): string;
  /** Merges a time seen on a received message and returns the receive time. */
  receive(remote: string): string;
  /** The last time handed out. */
  last(): string;
}

export function createHlc(physicalNow: () => number, start?: string): Hlc {
  let current: HlcTime = start ? decodeHlc(start) : { wall: 0, counter: 0 };

  const advance = (candidates: readonly HlcTime[]): string => {
    const physical = physicalNow();
    const wall = Math.max(physical, current.wall, ...candidates.map((c) => c.wall));
    let counter = 0;
    if (wall === current.wall) counter = current.counter + 1;
    for (const c of candidates) if (c.wall === wall) counter = Math.max(counter, c.counter + 1);
    // A counter that would outgrow its digits moves the clock on by a millisecond instead, so
    // every time stays valid and ordered (a peer far ahead can make one millisecond very busy).
    current = counter < counterLimit ? { wall, counter } : { wall: wall + 1, counter: 0 };
    return encodeHlc(current);
  };

  return {
    tick: () => advance([]),
    receive: (remote) => advance([decodeHlc(remote)]),
    last: () => encodeHlc(current),
  };
}
