import fc from 'fast-check';
import { beforeEach, describe, expect, it } from 'vitest';
import { SimulatedClock } from 'xstate';
import { RemoteRoster, unknownStatus } from '../../src/federation/RemoteRoster.js';
import { silentLogger } from '../../src/log/logger.js';
import { schemaVersionString } from '../../src/wire/envelope.js';
import { createHlc, encodeHlc } from '../../src/wire/hlc.js';
import {
  type DecodedPresence,
  decodePresence,
  encodePresence,
  judgePresenceAge,
  type Presence,
  type PresenceEntry,
  PresenceRefusal,
  presenceLimits,
} from '../../src/wire/presence.js';

/** The default limits: limits.maxPresenceEntries 10,000. */
const maxEntries = 10_000;
const decode = (bytes: Buffer): DecodedPresence => decodePresence(bytes, maxEntries);

const ttlMs = 15_000;
const hlcAt = (wall: number, counter = 0): string => encodeHlc({ wall, counter });

const alice: PresenceEntry = {
  gid: '11111111-1111-4111-8111-111111111111',
  name: 'alice',
  kind: 'worker',
  groups: ['backend'],
  status: 'idle',
};
const bob: PresenceEntry = {
  gid: '22222222-2222-4222-8222-222222222222',
  name: 'bob',
  kind: 'main',
  groups: [],
  status: 'busy',
};
const aliceOnC: PresenceEntry = {
  gid: '33333333-3333-4333-8333-333333333333',
  name: 'alice',
  kind: 'worker',
  groups: ['frontend'],
  status: 'working',
};

function presence(
  host: string,
  hlc: string,
  entities: PresenceEntry[],
  overrides: Partial<Presence> = {},
): Presence {
  return { v: schemaVersionString, kind: 'PRESENCE', host, hlc, ttlMs, entities, ...overrides };
}

function bytesOf(value: unknown): Buffer {
  return Buffer.from(JSON.stringify(value), 'utf8');
}

function detailOf(decoded: DecodedPresence): string {
  if (decoded.ok) throw new Error(`expected a refusal, got ${JSON.stringify(decoded.presence)}`);
  return decoded.detail;
}

describe('presence: decode', () => {
  const snapshot = presence('host-b', hlcAt(1_700_000_000_000), [alice, bob]);

  it('decode(encode(presence)) gives the snapshot back', () => {
    expect(decode(encodePresence(snapshot))).toEqual({ ok: true, presence: snapshot });
  });

  it("a worker behind an agent host comes with its path and agent (1.4), and nothing of its host's sockets", () => {
    const native = { ...bob, agent: { path: 'codex-app-server' as const, agent: 'codex' } };
    const withAgent = presence('host-b', hlcAt(2), [alice, native]);
    expect(decode(encodePresence(withAgent))).toEqual({ ok: true, presence: withAgent });
    const attach = { ...native, agent: { ...native.agent, attach: 'codex resume t --remote unix:///tmp/s' } };
    expect(decode(bytesOf({ ...withAgent, entities: [attach] }))).toEqual({
      ok: true,
      presence: { ...withAgent, entities: [native] },
    });
  });

  it('a worker whose agent asks its owner comes with the open request and what it asks (1.5)', () => {
    const permission = { request: 3, title: 'Bash: touch /tmp/x' };
    const asking = { ...bob, agent: { path: 'acp' as const, agent: 'gemini', permission } };
    const snapshotAsking = presence('host-b', hlcAt(2), [asking]);
    expect(decode(encodePresence(snapshotAsking))).toEqual({ ok: true, presence: snapshotAsking });
  });

  it('a snapshot with no entities is valid (a host with nobody on it)', () => {
    const empty = presence('host-b', hlcAt(1), []);
    expect(decode(encodePresence(empty))).toEqual({ ok: true, presence: empty });
  });

  it('not JSON → refused with a detail, not thrown', () => {
    expect(detailOf(decode(Buffer.from('{"kind":"PRES', 'utf8')))).toMatch(/^not JSON: /);
  });

  it.each([
    ['another kind', { kind: 'SEND' }],
    ['an empty host', { host: '' }],
    ['a zero ttl', { ttlMs: 0 }],
    ['a fractional ttl', { ttlMs: 1.5 }],
    ['no version', { v: undefined }],
    ['a bad version', { v: 'one' }],
    ['entities not a list', { entities: { alice } }],
    ['an entity with a bad gid', { entities: [{ ...alice, gid: 'alice' }] }],
    ['an entity of an unknown kind', { entities: [{ ...alice, kind: 'robot' }] }],
    ['an entity without groups', { entities: [{ ...bob, groups: undefined }] }],
    [
      'a worker on a path no agent host serves',
      { entities: [{ ...bob, agent: { path: 'terminal', agent: 'x' } }] },
    ],
    [
      'an agent named with a terminal escape',
      { entities: [{ ...bob, agent: { path: 'acp', agent: 'x\u001b[2J' } }] },
    ],
    [
      'a permission whose title holds a terminal escape',
      {
        entities: [
          { ...bob, agent: { path: 'acp', agent: 'x', permission: { request: 1, title: 'rm\u001b[2J' } } },
        ],
      },
    ],
    [
      'a permission with no request number',
      { entities: [{ ...bob, agent: { path: 'acp', agent: 'x', permission: { request: 0, title: 'ls' } } }] },
    ],
  ])('%s → refused', (_label, patch) => {
    expect(detailOf(decode(bytesOf({ ...snapshot, ...patch })))).not.toBe('');
  });

  it.each([
    ['null', null],
    ['a list', [snapshot]],
    ['a number', 5],
  ])('JSON that is %s → refused', (_label, value) => {
    expect(detailOf(decode(bytesOf(value)))).not.toBe('');
  });

  it('a newer major (2.0) → refused, saying it is newer', () => {
    expect(detailOf(decode(bytesOf({ ...snapshot, v: '2.0' })))).toMatch(/newer/);
  });

  it('a newer minor with extra fields is accepted; the extras are dropped', () => {
    const bytes = bytesOf({
      ...snapshot,
      v: '1.7',
      region: 'eu',
      entities: [{ ...alice, depth: 3 }, bob],
    });
    expect(decode(bytes)).toEqual({ ok: true, presence: { ...snapshot, v: '1.7' } });
  });

  it('the gateway cannot merge an hlc that is not a hybrid-logical-clock time (it throws)', () => {
    expect(() => createHlc(() => 0).receive('yesterday')).toThrow(/hybrid-logical-clock/);
  });

  // Regression: the schema once took any string as `hlc`, and hlc.receive threw inside the
  // AMQP consumer callback; RemoteRoster also orders snapshots by it.
  it('an hlc that is not a hybrid-logical-clock time → refused', () => {
    expect(decode(bytesOf({ ...snapshot, hlc: 'yesterday' })).ok).toBe(false);
  });

  it('more entries than limits.maxPresenceEntries → refused before any entry is validated', () => {
    const bytes = bytesOf({ ...snapshot, entities: [alice, bob, alice] });
    expect(detailOf(decodePresence(bytes, 2))).toBe(
      'announces 3 entities; this gateway takes at most 2 (limits.maxPresenceEntries)',
    );
    expect(decodePresence(bytes, 3).ok).toBe(true);
  });

  it('a refusal stays short however many entries are wrong', () => {
    const wrong = { ...alice, gid: 'not-a-uuid' };
    const detail = detailOf(decode(bytesOf({ ...snapshot, entities: Array(5_000).fill(wrong) })));
    expect(detail.length).toBeLessThan(600);
    expect(detail).toMatch(/and 4990 more$/);
  });

  it('the byte cap is the entry cap × 512 unless limits.maxPresenceBytes says otherwise', () => {
    expect(presenceLimits({ maxPresenceEntries: 10_000 })).toEqual({
      maxEntries: 10_000,
      maxBytes: 5_120_000,
    });
    expect(presenceLimits({ maxPresenceEntries: 10, maxPresenceBytes: 4096 })).toEqual({
      maxEntries: 10,
      maxBytes: 4096,
    });
  });

  it('property: arbitrary bytes never throw and are either a snapshot or a refusal with a detail', () => {
    const encoded = encodePresence(snapshot);
    const bytes = fc.oneof(
      fc.uint8Array({ maxLength: 512 }),
      fc.nat({ max: encoded.length }).map((n) => encoded.subarray(0, n)),
      fc.constant(encoded),
    );
    fc.assert(
      fc.property(bytes, (raw) => {
        const decoded = decode(Buffer.from(raw));
        if (decoded.ok) {
          // What it accepts is a snapshot, one it would accept again as it stands.
          expect(decoded.presence).toMatchObject({
            kind: 'PRESENCE',
            host: expect.stringMatching(/./),
            ttlMs: expect.any(Number),
            entities: expect.any(Array),
          });
          expect(decode(encodePresence(decoded.presence))).toEqual(decoded);
        } else {
          expect(decoded.detail).not.toBe('');
        }
      }),
      { numRuns: 2_000 },
    );
  });

  it('property: arbitrary JSON, and a snapshot with any field replaced, never throw', () => {
    const fields = ['v', 'kind', 'host', 'hlc', 'ttlMs', 'entities', 'extra'];
    fc.assert(
      fc.property(fc.jsonValue(), fc.constantFrom(...fields), (value, field) => {
        expect(() => decode(bytesOf(value))).not.toThrow();
        expect(() => decode(bytesOf({ ...snapshot, [field]: value }))).not.toThrow();
      }),
    );
  });
});

describe('RemoteRoster', () => {
  let clock: SimulatedClock;
  let roster: RemoteRoster;

  beforeEach(() => {
    clock = new SimulatedClock();
    clock.set(1_700_000_000_000);
    roster = new RemoteRoster('host-a', clock, silentLogger());
    roster.setReachable(true);
  });

  const names = (): string[] => roster.entries().map((e) => `${e.name}@${e.host}:${e.status}`);

  describe('apply', () => {
    it('lists the announced entities with their host', () => {
      roster.apply(presence('host-b', hlcAt(1), [alice, bob]));
      expect(roster.entries()).toEqual([
        { ...alice, host: 'host-b' },
        { ...bob, host: 'host-b' },
      ]);
      expect(roster.hostIds()).toEqual(['host-b']);
    });

    it('a newer snapshot replaces the host’s entities (someone left, someone changed)', () => {
      roster.apply(presence('host-b', hlcAt(1), [alice, bob]));
      roster.apply(presence('host-b', hlcAt(2), [{ ...alice, status: 'working' }]));
      expect(names()).toEqual(['alice@host-b:working']);
    });

    it('keeps hosts apart: one host’s snapshot does not touch another’s', () => {
      roster.apply(presence('host-b', hlcAt(5), [alice, bob]));
      roster.apply(presence('host-c', hlcAt(1), [aliceOnC]));
      expect(names()).toEqual(['alice@host-b:idle', 'bob@host-b:busy', 'alice@host-c:working']);
      expect(roster.hostIds()).toEqual(['host-b', 'host-c']);
    });

    it('ignores its own host (local entities come from the directory, not the broker)', () => {
      roster.apply(presence('host-a', hlcAt(1), [alice]));
      expect(roster.entries()).toEqual([]);
      expect(roster.hostIds()).toEqual([]);
    });

    it('ignores a snapshot older (by hlc) than the last one, even when it arrives later', () => {
      roster.apply(presence('host-b', hlcAt(2_000), [alice, bob]));
      roster.apply(presence('host-b', hlcAt(1_000), [alice]));
      expect(names()).toEqual(['alice@host-b:idle', 'bob@host-b:busy']);
    });

    it('orders by the whole hlc: same wall time, lower counter is older', () => {
      roster.apply(presence('host-b', hlcAt(2_000, 7), [alice, bob]));
      roster.apply(presence('host-b', hlcAt(2_000, 6), []));
      expect(names()).toEqual(['alice@host-b:idle', 'bob@host-b:busy']);
      roster.apply(presence('host-b', hlcAt(2_000, 8), []));
      expect(names()).toEqual([]);
    });

    it('an ignored older snapshot does not extend the host’s life', () => {
      roster.apply(presence('host-b', hlcAt(2), [alice]));
      clock.increment(ttlMs - 1_000);
      roster.apply(presence('host-b', hlcAt(1), [alice]));
      clock.increment(1_000);
      expect(roster.entries()).toEqual([]);
    });
  });

  describe('inbox caps', () => {
    it('gives the cap an entity’s host announced, and none for a host that did not say or an entity not listed', () => {
      roster.apply(presence('host-b', hlcAt(1), [alice], { inboxMaxLength: 250 }));
      roster.apply(presence('host-c', hlcAt(1), [aliceOnC]));
      expect(roster.inboxMaxLength(alice.gid)).toBe(250);
      expect(roster.inboxMaxLength(aliceOnC.gid)).toBeUndefined();
      expect(roster.inboxMaxLength(bob.gid)).toBeUndefined();
    });

    it('a newer snapshot’s cap replaces the older one', () => {
      roster.apply(presence('host-b', hlcAt(1), [alice], { inboxMaxLength: 250 }));
      roster.apply(presence('host-b', hlcAt(2), [alice], { inboxMaxLength: 40 }));
      expect(roster.inboxMaxLength(alice.gid)).toBe(40);
    });
  });

  describe('expiry', () => {
    it('drops a host whose presence is older than its ttl', () => {
      roster.apply(presence('host-b', hlcAt(1), [alice]));
      clock.increment(ttlMs - 1);
      expect(names()).toEqual(['alice@host-b:idle']);
      clock.increment(1);
      expect(roster.entries()).toEqual([]);
      expect(roster.hostIds()).toEqual([]);
    });

    it('each host lives by its own snapshot’s ttl', () => {
      roster.apply(presence('host-b', hlcAt(1), [alice], { ttlMs: 5_000 }));
      roster.apply(presence('host-c', hlcAt(1), [aliceOnC], { ttlMs: 30_000 }));
      clock.increment(10_000);
      expect(names()).toEqual(['alice@host-c:working']);
    });

    it('every heartbeat pushes the expiry out by the ttl', () => {
      roster.apply(presence('host-b', hlcAt(1), [alice]));
      clock.increment(10_000);
      roster.apply(presence('host-b', hlcAt(2), [alice]));
      clock.increment(10_000);
      expect(names()).toEqual(['alice@host-b:idle']);
      clock.increment(ttlMs - 10_000);
      expect(roster.entries()).toEqual([]);
    });

    it('hostsOfGid: by gid alone, never a name that looks like one; the last host kept after it expired', () => {
      const lookalike = { ...bob, gid: '44444444-4444-4444-8444-444444444444', name: alice.gid };
      roster.apply(presence('host-b', hlcAt(1), [alice]));
      roster.apply(presence('host-c', hlcAt(1), [lookalike], { ttlMs: 60_000 }));
      expect(roster.hostsOfGid(alice.gid)).toEqual(['host-b']);
      roster.apply(presence('host-c', hlcAt(2), [lookalike, alice], { ttlMs: 60_000 }));
      expect(roster.hostsOfGid(alice.gid)).toEqual(['host-b', 'host-c']);
      clock.increment(ttlMs);
      roster.expire();
      expect(roster.hostsOfGid(alice.gid)).toEqual(['host-c']);
      roster.apply(presence('host-c', hlcAt(3), [lookalike], { ttlMs: 60_000 }));
      // Gone from every PRESENCE: the host that announced it last.
      expect(roster.hostsOfGid(alice.gid)).toEqual(['host-c']);
      expect(roster.hostsOfGid(bob.gid)).toEqual([]);
    });

    it('find and inboxMaxLength follow each snapshot: an entity a newer one leaves out is found no more there', () => {
      roster.apply(presence('host-b', hlcAt(1), [alice, bob], { inboxMaxLength: 500 }));
      roster.apply(presence('host-c', hlcAt(1), [aliceOnC], { ttlMs: 60_000 }));
      expect(roster.find(bob.gid).map((e) => e.host)).toEqual(['host-b']);
      expect(roster.find('alice').map((e) => e.host)).toEqual(['host-b', 'host-c']);
      expect(roster.find('alice@host-c')).toEqual([{ ...aliceOnC, host: 'host-c' }]);
      expect(roster.inboxMaxLength(bob.gid)).toBe(500);
      roster.apply(presence('host-b', hlcAt(2), [alice], { inboxMaxLength: 400 }));
      expect(roster.find(bob.gid)).toEqual([]);
      expect(roster.find('bob@host-b')).toEqual([]);
      expect(roster.inboxMaxLength(bob.gid)).toBeUndefined();
      expect(roster.inboxMaxLength(alice.gid)).toBe(400);
      clock.increment(ttlMs);
      expect(roster.find('alice').map((e) => e.host)).toEqual(['host-c']);
    });

    it('expire() drops expired hosts without being asked for entries', () => {
      roster.apply(presence('host-b', hlcAt(1), [alice]));
      roster.apply(presence('host-c', hlcAt(1), [aliceOnC], { ttlMs: 60_000 }));
      clock.increment(ttlMs);
      roster.expire();
      expect(roster.hostIds()).toEqual(['host-c']);
    });

    it('a host that comes back after expiring is listed again', () => {
      roster.apply(presence('host-b', hlcAt(1), [alice]));
      clock.increment(ttlMs);
      expect(roster.entries()).toEqual([]);
      roster.apply(presence('host-b', hlcAt(2), [alice]));
      expect(names()).toEqual(['alice@host-b:idle']);
    });

    it('the same snapshot again does not extend the host’s life (a replay of the last one)', () => {
      expect(roster.apply(presence('host-b', hlcAt(1), [alice]))).toBe(true);
      clock.increment(ttlMs - 1);
      expect(roster.apply(presence('host-b', hlcAt(1), [alice]))).toBe(false);
      clock.increment(1);
      expect(roster.entries()).toEqual([]);
    });

    it('a replayed PRESENCE cannot resurrect a host that expired: its newest stamp is remembered', () => {
      roster.apply(presence('host-b', hlcAt(1), [alice]));
      roster.apply(presence('host-b', hlcAt(2), [alice, bob]));
      clock.increment(ttlMs);
      expect(roster.entries()).toEqual([]);
      expect(roster.lastSeenHlc('host-b')).toBe(hlcAt(2));
      expect(roster.apply(presence('host-b', hlcAt(2), [alice, bob]))).toBe(false);
      expect(roster.apply(presence('host-b', hlcAt(1), [alice]))).toBe(false);
      expect(roster.entries()).toEqual([]);
    });
  });

  describe('reachability (R-H5)', () => {
    it('while the broker is unreachable every remote status reads unknown; the entities stay listed', () => {
      roster.apply(presence('host-b', hlcAt(1), [alice, bob]));
      roster.setReachable(false);
      expect(names()).toEqual([`alice@host-b:${unknownStatus}`, `bob@host-b:${unknownStatus}`]);
      expect(roster.find('bob@host-b').map((e) => e.status)).toEqual(['unknown']);
      roster.setReachable(true);
      expect(names()).toEqual(['alice@host-b:idle', 'bob@host-b:busy']);
    });

    it('while unreachable, hosts do not expire: their silence is the broker’s, not theirs', () => {
      roster.apply(presence('host-b', hlcAt(1), [alice]));
      roster.setReachable(false);
      clock.increment(ttlMs * 10);
      roster.expire();
      expect(names()).toEqual([`alice@host-b:${unknownStatus}`]);
      expect(roster.find('alice')).toHaveLength(1);
    });

    it('when the broker is back, every host gets a fresh ttl from then, and expires after it', () => {
      roster.apply(presence('host-b', hlcAt(1), [alice]));
      roster.apply(presence('host-c', hlcAt(1), [aliceOnC], { ttlMs: 30_000 }));
      roster.setReachable(false);
      clock.increment(60_000);
      roster.setReachable(true);
      expect(names()).toEqual(['alice@host-b:idle', 'alice@host-c:working']);
      clock.increment(ttlMs);
      expect(names()).toEqual(['alice@host-c:working']);
      clock.increment(30_000 - ttlMs);
      expect(roster.entries()).toEqual([]);
    });

    it('after a reconnect a host may stay silent for the reconnect grace beyond its ttl: it may have lost the broker too', () => {
      const graceMs = 15_000;
      const graced = new RemoteRoster('host-a', clock, silentLogger(), graceMs);
      graced.setReachable(true);
      graced.apply(presence('host-b', hlcAt(1), [alice]));
      graced.setReachable(false);
      clock.increment(60_000);
      graced.setReachable(true);
      clock.increment(ttlMs + graceMs - 1);
      expect(graced.entries().map((e) => e.name)).toEqual(['alice']);
      clock.increment(1);
      expect(graced.entries()).toEqual([]);
      // A host's own silence while the broker is reachable gets no grace.
      graced.apply(presence('host-b', hlcAt(2), [alice]));
      clock.increment(ttlMs);
      expect(graced.entries()).toEqual([]);
    });

    it('saying reachable again while reachable does not extend anyone’s life', () => {
      roster.apply(presence('host-b', hlcAt(1), [alice]));
      clock.increment(ttlMs - 1);
      roster.setReachable(true);
      clock.increment(1);
      expect(roster.entries()).toEqual([]);
    });

    it('a new roster is unreachable until told otherwise', () => {
      const fresh = new RemoteRoster('host-a', clock, silentLogger());
      fresh.apply(presence('host-b', hlcAt(1), [alice]));
      expect(fresh.entries().map((e) => e.status)).toEqual(['unknown']);
    });
  });

  describe('find', () => {
    beforeEach(() => {
      roster.apply(presence('host-b', hlcAt(1), [alice, bob]));
      roster.apply(presence('host-c', hlcAt(1), [aliceOnC]));
    });

    it('by gid', () => {
      expect(roster.find(bob.gid)).toEqual([{ ...bob, host: 'host-b' }]);
      expect(roster.find(aliceOnC.gid)).toEqual([{ ...aliceOnC, host: 'host-c' }]);
    });

    it('by name@host', () => {
      expect(roster.find('alice@host-c')).toEqual([{ ...aliceOnC, host: 'host-c' }]);
      expect(roster.find('alice@host-b')).toEqual([{ ...alice, host: 'host-b' }]);
    });

    it('by a bare name that is unique', () => {
      expect(roster.find('bob')).toEqual([{ ...bob, host: 'host-b' }]);
    });

    it('by an ambiguous bare name: every match, so the caller can ask which one', () => {
      const found = roster.find('alice');
      expect(found.map((e) => `${e.gid}@${e.host}`).sort()).toEqual([
        `${alice.gid}@host-b`,
        `${aliceOnC.gid}@host-c`,
      ]);
    });

    it.each([
      ['an unknown gid', '44444444-4444-4444-8444-444444444444'],
      ['a name on the wrong host', 'bob@host-c'],
      ['an unknown host', 'alice@host-z'],
      ['an unknown name', 'carol'],
      ['own-host entities (never in the remote roster)', 'dave@host-a'],
    ])('nothing for %s', (_label, address) => {
      expect(roster.find(address)).toEqual([]);
    });

    it('finds nothing on a host that expired', () => {
      clock.increment(ttlMs);
      expect(roster.find('bob')).toEqual([]);
      expect(roster.find(alice.gid)).toEqual([]);
    });
  });
});

describe('judgePresenceAge: a live announcement, not a captured one played back', () => {
  const now = 1_700_000_000_000;
  const maxSkewMs = 60_000;
  const at = (wall: number, counter = 0) => presence('host-b', hlcAt(wall, counter), [alice]);

  it('a fresh snapshot from a host never seen is believed', () => {
    expect(judgePresenceAge(at(now), { now, maxSkewMs, lastSeenHlc: undefined })).toEqual({ ok: true });
  });

  it('one stamped up to its TTL plus the skew ago is still believed (a slow clock, a slow queue)', () => {
    expect(judgePresenceAge(at(now - ttlMs - maxSkewMs), { now, maxSkewMs, lastSeenHlc: undefined })).toEqual(
      { ok: true },
    );
  });

  it('one stamped longer ago than its TTL plus the skew → stale, saying how old', () => {
    const verdict = judgePresenceAge(at(now - ttlMs - maxSkewMs - 1), {
      now,
      maxSkewMs,
      lastSeenHlc: undefined,
    });
    expect(verdict).toMatchObject({ ok: false, reason: PresenceRefusal.stale });
    expect(verdict.ok ? '' : verdict.detail).toMatch(/stamped 75 s ago, older than its TTL/);
  });

  it('one stamped beyond the skew in the future → clock-skew', () => {
    expect(
      judgePresenceAge(at(now + maxSkewMs + 1), { now, maxSkewMs, lastSeenHlc: undefined }),
    ).toMatchObject({
      ok: false,
      reason: PresenceRefusal.clockSkew,
    });
  });

  it('the last one seen again, or an older one → replayed, naming both stamps', () => {
    const lastSeenHlc = hlcAt(now - 1_000, 3);
    for (const replay of [at(now - 1_000, 3), at(now - 1_000, 2), at(now - 5_000)]) {
      const verdict = judgePresenceAge(replay, { now, maxSkewMs, lastSeenHlc });
      expect(verdict).toMatchObject({ ok: false, reason: PresenceRefusal.replayed });
      expect(verdict.ok ? '' : verdict.detail).toContain(lastSeenHlc);
    }
    expect(judgePresenceAge(at(now - 1_000, 4), { now, maxSkewMs, lastSeenHlc })).toEqual({ ok: true });
  });

  it('property: believed exactly when within [now − ttl − skew, now + skew] and newer than the last seen', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: -10 * ttlMs, max: 10 * ttlMs }),
        fc.option(fc.integer({ min: -10 * ttlMs, max: 10 * ttlMs })),
        (offset, lastOffset) => {
          const snapshot = at(now + offset);
          const lastSeenHlc = lastOffset === null ? undefined : hlcAt(now + lastOffset);
          const verdict = judgePresenceAge(snapshot, { now, maxSkewMs: 5_000, lastSeenHlc });
          const inWindow = offset <= 5_000 && offset >= -ttlMs - 5_000;
          const newer = lastOffset === null || offset > lastOffset;
          expect(verdict.ok).toBe(inWindow && newer);
        },
      ),
    );
  });
});
