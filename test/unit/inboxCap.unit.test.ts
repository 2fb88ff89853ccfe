import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  brokerInboxFull,
  brokerMayDeliver,
  inboxPrefetch,
  inboxRefusal,
  senderShareRefusal,
} from '../../src/wire/inboxCap.js';

const cap = { maxLength: 10, maxBytes: 1_000 };

describe('same-host holds are unbounded: a local inbox has the caps of a broker inbox (inboxRefusal)', () => {
  it('takes a message that fits', () => {
    expect(inboxRefusal({ count: 9, bytes: 900 }, cap, 100)).toBeUndefined();
  });

  it('refuses one message over the count, naming the key', () => {
    expect(inboxRefusal({ count: 10, bytes: 0 }, cap, 1)).toMatch(
      /holds 10 undelivered messages \(broker.inboxMaxLength is 10\)/,
    );
  });

  it('refuses one that would pass the bytes, naming the key', () => {
    expect(inboxRefusal({ count: 1, bytes: 950 }, cap, 51)).toMatch(/limits.inboxMaxBytes is 1000/);
  });
});

describe('the broker stops delivering to a full inbox (brokerMayDeliver)', () => {
  it('never lets what may be on its way take the inbox past its count', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 500 }),
        fc.integer({ min: 1, max: 1_000 }),
        fc.integer({ min: 0, max: 600 }),
        fc.boolean(),
        fc.double({ min: 0.01, max: 1, noNaN: true }),
        (maxLength, prefetch, count, delivering, share) => {
          const c = { maxLength, maxBytes: 1e12 };
          const inFlight = inboxPrefetch(prefetch, c, share);
          if (brokerMayDeliver({ count, bytes: 0 }, c, inFlight, delivering)) {
            expect(count + inFlight).toBeLessThanOrEqual(Math.max(maxLength, inFlight));
          }
        },
      ),
    );
  });

  it('resumes only well below where it paused, so a full inbox does not flap', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 500 }), fc.integer({ min: 0, max: 600 }), (maxLength, count) => {
        const c = { maxLength, maxBytes: 1e12 };
        const inFlight = inboxPrefetch(200, c, 1);
        const resumes = brokerMayDeliver({ count, bytes: 0 }, c, inFlight, false);
        // Whatever resumes keeps delivering: no state pauses and resumes at one load.
        if (resumes) expect(brokerMayDeliver({ count, bytes: 0 }, c, inFlight, true)).toBe(true);
      }),
    );
    expect(brokerMayDeliver({ count: 6, bytes: 0 }, cap, 2, true)).toBe(true);
    expect(brokerMayDeliver({ count: 8, bytes: 0 }, cap, 2, true)).toBe(false);
    expect(brokerMayDeliver({ count: 6, bytes: 0 }, cap, 2, false)).toBe(false);
    expect(brokerMayDeliver({ count: 4, bytes: 0 }, cap, 2, false)).toBe(true);
  });

  it('pauses on bytes too, and resumes under half of them', () => {
    expect(brokerMayDeliver({ count: 1, bytes: 1_000 }, cap, 2, true)).toBe(false);
    expect(brokerMayDeliver({ count: 1, bytes: 600 }, cap, 2, false)).toBe(false);
    expect(brokerMayDeliver({ count: 1, bytes: 400 }, cap, 2, false)).toBe(true);
  });

  it("one sender's whole share never pauses an inbox: its further copies come to be dead-lettered", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 3, max: 20_000 }),
        fc.integer({ min: 1, max: 65_535 }),
        fc.double({ min: 0.001, max: 0.49, noNaN: true }),
        (maxLength, prefetch, share) => {
          const c = { maxLength, maxBytes: 1e12 };
          const most = Math.max(1, Math.floor(maxLength * share));
          const inFlight = inboxPrefetch(prefetch, c, share);
          expect(brokerMayDeliver({ count: most, bytes: 0 }, c, inFlight, true)).toBe(true);
        },
      ),
    );
  });

  it('an inbox of one still receives', () => {
    const one = { maxLength: 1, maxBytes: 1_000 };
    const inFlight = inboxPrefetch(200, one, 0.25);
    expect(inFlight).toBe(1);
    expect(brokerMayDeliver({ count: 0, bytes: 0 }, one, inFlight, false)).toBe(true);
    expect(brokerMayDeliver({ count: 1, bytes: 10 }, one, inFlight, true)).toBe(false);
  });
});

describe('a sender’s share of an inbox (limits.senderInboxShare)', () => {
  const cap = { maxLength: 40, maxBytes: 4_000 };

  it('refuses the message past a quarter of the count, naming the key', () => {
    expect(senderShareRefusal({ count: 9, bytes: 90 }, cap, 0.25, 10)).toBeUndefined();
    expect(senderShareRefusal({ count: 10, bytes: 100 }, cap, 0.25, 10)).toMatch(
      /^it holds 10 of your undelivered messages, your whole share of it \(limits.senderInboxShare 0.25/,
    );
  });

  it('refuses by bytes past the share of limits.inboxMaxBytes', () => {
    expect(senderShareRefusal({ count: 1, bytes: 900 }, cap, 0.25, 100)).toBeUndefined();
    expect(senderShareRefusal({ count: 1, bytes: 900 }, cap, 0.25, 101)).toMatch(/limits.inboxMaxBytes 4000/);
  });

  it('a share of 1 leaves the inbox caps alone; a tiny inbox still takes one message of each sender', () => {
    expect(senderShareRefusal({ count: 39, bytes: 3_900 }, cap, 1, 100)).toBeUndefined();
    expect(
      senderShareRefusal({ count: 0, bytes: 0 }, { maxLength: 2, maxBytes: 4_000 }, 0.25, 1),
    ).toBeUndefined();
  });
});

describe('a nacked publish to a broker inbox is called full only when the inbox holds its cap (brokerInboxFull)', () => {
  it('full at and past the cap', () => {
    expect(brokerInboxFull(10, 10)).toBe(true);
    expect(brokerInboxFull(12, 10)).toBe(true);
  });

  it('not full below it: a cluster that lost nodes nacks a quorum inbox holding a backlog (37 of 1,000)', () => {
    expect(brokerInboxFull(37, 1_000)).toBe(false);
  });

  it('not full when it reads empty (no leader reachable) or cannot be read', () => {
    expect(brokerInboxFull(0, 1_000)).toBe(false);
    expect(brokerInboxFull(undefined, 1_000)).toBe(false);
  });
});
