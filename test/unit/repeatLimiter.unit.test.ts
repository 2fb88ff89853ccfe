import { describe, expect, it } from 'vitest';
import { RepeatLimiter } from '../../src/log/RepeatLimiter.js';

describe('a warning peers repeat every heartbeat is written once a window per key', () => {
  it('writes the first, leaves out the rest of the window, then writes again with the count left out', () => {
    const limiter = new RepeatLimiter(60_000);
    expect(limiter.admit('bad-signature roster.a', 0)).toEqual({ write: true, suppressed: 0 });
    for (let t = 5_000; t < 60_000; t += 5_000)
      expect(limiter.admit('bad-signature roster.a', t).write).toBe(false);
    expect(limiter.admit('bad-signature roster.a', 60_000)).toEqual({ write: true, suppressed: 11 });
    expect(limiter.admit('bad-signature roster.a', 61_000).write).toBe(false);
  });

  it('keeps keys apart: another host, or another reason of the same host, is written at once', () => {
    const limiter = new RepeatLimiter(60_000);
    expect(limiter.admit('bad-signature roster.a', 0).write).toBe(true);
    expect(limiter.admit('bad-signature roster.b', 1).write).toBe(true);
    expect(limiter.admit('stale roster.a', 2).write).toBe(true);
  });

  it('remembers at most maxKeys (peers choose the keys): the oldest is forgotten and written again', () => {
    const limiter = new RepeatLimiter(60_000, 3);
    for (const key of ['a', 'b', 'c']) limiter.admit(key, 0);
    expect(limiter.admit('d', 1).write).toBe(true); // forgets a
    expect(limiter.admit('b', 2).write).toBe(false);
    expect(limiter.admit('a', 3)).toEqual({ write: true, suppressed: 0 });
  });

  it('a window of 0 writes every one', () => {
    const limiter = new RepeatLimiter(0);
    expect(limiter.admit('k', 0).write).toBe(true);
    expect(limiter.admit('k', 0).write).toBe(true);
  });
});
