import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createHlc, decodeHlc, encodeHlc, type HlcTime, isHlc } from '../../src/wire/hlc.js';

/** A wall clock the test moves by hand, backwards too. */
function manualClock(start: number): { now: () => number; set: (ms: number) => void } {
  let current = start;
  return {
    now: () => current,
    set: (ms) => {
      current = ms;
    },
  };
}

function compareNumeric(a: HlcTime, b: HlcTime): number {
  return a.wall - b.wall || a.counter - b.counter;
}

function sign(n: number): number {
  return n < 0 ? -1 : n > 0 ? 1 : 0;
}

function expectStrictlyIncreasing(times: readonly string[]): void {
  for (let i = 1; i < times.length; i++) {
    const [previous, current] = [times[i - 1] as string, times[i] as string];
    expect(current > previous, `${current} after ${previous}`).toBe(true);
  }
}

const hlcTime = fc.record({
  wall: fc.integer({ min: 0, max: 999_999_999_999_999 }),
  counter: fc.integer({ min: 0, max: 999_999 }),
});

describe('createHlc: local ticks', () => {
  it('takes the wall clock when it moves forward, with counter 0', () => {
    const clock = manualClock(1_700_000_000_000);
    const hlc = createHlc(clock.now);
    expect(decodeHlc(hlc.tick())).toEqual({ wall: 1_700_000_000_000, counter: 0 });
    clock.set(1_700_000_000_005);
    expect(decodeHlc(hlc.tick())).toEqual({ wall: 1_700_000_000_005, counter: 0 });
    expect(decodeHlc(hlc.last())).toEqual({ wall: 1_700_000_000_005, counter: 0 });
  });

  it('counts within one millisecond', () => {
    const hlc = createHlc(() => 42);
    expect([hlc.tick(), hlc.tick(), hlc.tick()].map(decodeHlc)).toEqual([
      { wall: 42, counter: 0 },
      { wall: 42, counter: 1 },
      { wall: 42, counter: 2 },
    ]);
  });

  it('stays monotonic when the wall clock goes backwards', () => {
    const clock = manualClock(10_000);
    const hlc = createHlc(clock.now);
    const times = [hlc.tick()];
    clock.set(4_000); // NTP step back by 6 s
    times.push(hlc.tick(), hlc.tick());
    clock.set(9_999);
    times.push(hlc.tick());
    clock.set(10_001);
    times.push(hlc.tick());
    expectStrictlyIncreasing(times);
    expect(times.map(decodeHlc)).toEqual([
      { wall: 10_000, counter: 0 },
      { wall: 10_000, counter: 1 },
      { wall: 10_000, counter: 2 },
      { wall: 10_000, counter: 3 },
      { wall: 10_001, counter: 0 },
    ]);
  });

  it('is strictly increasing under any sequence of wall-clock readings', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 1_000_000 }), { minLength: 2, maxLength: 200 }),
        (walls) => {
          let i = 0;
          const hlc = createHlc(() => walls[i] ?? 0);
          const times: string[] = [];
          for (; i < walls.length; i++) times.push(hlc.tick());
          expectStrictlyIncreasing(times);
        },
      ),
    );
  });

  it('resumes after a restored time even when the wall clock is behind it', () => {
    const hlc = createHlc(() => 500, encodeHlc({ wall: 2_000, counter: 7 }));
    expect(hlc.last()).toBe(encodeHlc({ wall: 2_000, counter: 7 }));
    expect(decodeHlc(hlc.tick())).toEqual({ wall: 2_000, counter: 8 });
  });

  // Regression (was a bug in hlc.ts, counterWidth = 6 and no bound in `advance`): once the wall part is
  // pinned (a peer's clock far ahead, see below, or a wall clock stepped back), every local
  // event bumps the counter; past 999999 the encoding grows to 7 digits, is no longer an HLC
  // (`isHlc` false, `decodeHlc` throws: the gateway cannot restart from readLastHlc) and sorts
  // before earlier times.
  it('stays a valid, ordered time after a million events within one wall millisecond', () => {
    const hlc = createHlc(() => 1_000);
    let previous = hlc.tick();
    for (let i = 0; i < 1_000_000; i++) {
      const next = hlc.tick();
      if (!(next > previous) || !isHlc(next)) {
        throw new Error(`after ${i + 1} ticks: ${next} does not sort after ${previous}`);
      }
      previous = next;
    }
    expect(decodeHlc(hlc.last())).toBeDefined();
  });
});

describe('createHlc: receive', () => {
  it('adopts a remote time far ahead and counts past it', () => {
    const clock = manualClock(1_000);
    const hlc = createHlc(clock.now);
    hlc.tick();
    const remote = encodeHlc({ wall: 3_601_000, counter: 4 }); // a peer one hour ahead
    const received = hlc.receive(remote);
    expect(received > remote).toBe(true);
    expect(decodeHlc(received)).toEqual({ wall: 3_601_000, counter: 5 });
    // Local events keep sorting after the receive while our wall clock catches up...
    clock.set(2_000);
    expect(decodeHlc(hlc.tick())).toEqual({ wall: 3_601_000, counter: 6 });
    // ...and go back to the wall clock with counter 0 once it passes the remote time.
    clock.set(3_601_001);
    expect(decodeHlc(hlc.tick())).toEqual({ wall: 3_601_001, counter: 0 });
  });

  it('a receive sorts after both the remote send and the previous local time', () => {
    fc.assert(
      fc.property(hlcTime, hlcTime, fc.integer({ min: 0, max: 999_999_999_999 }), (local, remote, wall) => {
        const start = encodeHlc({ wall: local.wall, counter: Math.min(local.counter, 999_998) });
        const hlc = createHlc(() => wall, start);
        const sent = encodeHlc({ wall: remote.wall, counter: Math.min(remote.counter, 999_998) });
        const received = hlc.receive(sent);
        expect(received > sent).toBe(true);
        expect(received > start).toBe(true);
      }),
    );
  });

  it('takes the larger counter when the remote has the same wall time', () => {
    const hlc = createHlc(() => 100);
    hlc.tick(); // 100.0
    expect(decodeHlc(hlc.receive(encodeHlc({ wall: 100, counter: 9 })))).toEqual({ wall: 100, counter: 10 });
    expect(decodeHlc(hlc.receive(encodeHlc({ wall: 100, counter: 2 })))).toEqual({ wall: 100, counter: 11 });
  });

  it('a remote time behind ours changes nothing but the counter', () => {
    const hlc = createHlc(() => 5_000);
    hlc.tick();
    expect(decodeHlc(hlc.receive(encodeHlc({ wall: 10, counter: 3 })))).toEqual({ wall: 5_000, counter: 1 });
  });

  it('rejects a remote time that is not an HLC', () => {
    const hlc = createHlc(() => 1);
    expect(() => hlc.receive('2024-01-01T00:00:00Z')).toThrow(/not a hybrid-logical-clock time/);
  });
});

describe('encodeHlc / decodeHlc', () => {
  it('encodes as fixed-width wall.counter', () => {
    expect(encodeHlc({ wall: 1_700_000_000_123, counter: 45 })).toBe('001700000000123.000045');
    expect(isHlc('001700000000123.000045')).toBe(true);
  });

  it('round-trips every time in range', () => {
    fc.assert(
      fc.property(hlcTime, (time) => {
        const encoded = encodeHlc(time);
        expect(isHlc(encoded)).toBe(true);
        expect(decodeHlc(encoded)).toEqual(time);
      }),
    );
  });

  it('orders lexicographically exactly as it orders numerically', () => {
    fc.assert(
      fc.property(hlcTime, hlcTime, (a, b) => {
        const [ea, eb] = [encodeHlc(a), encodeHlc(b)];
        const lexical = ea < eb ? -1 : ea > eb ? 1 : 0;
        expect(lexical).toBe(sign(compareNumeric(a, b)));
      }),
    );
  });

  it('sorting encoded times sorts the times', () => {
    fc.assert(
      fc.property(fc.array(hlcTime, { maxLength: 50 }), (times) => {
        const byString = times.map(encodeHlc).sort().map(decodeHlc);
        const byNumber = [...times].sort(compareNumeric);
        expect(byString).toEqual(byNumber);
      }),
    );
  });

  it.each(['', '1.1', '00000000000000a.000000', '000000000000001.0000001', ' 000000000000001.000000'])(
    'decodeHlc rejects %j',
    (value) => {
      expect(isHlc(value)).toBe(false);
      expect(() => decodeHlc(value)).toThrow(/not a hybrid-logical-clock time/);
    },
  );
});
