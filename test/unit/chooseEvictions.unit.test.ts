import { describe, expect, it } from 'vitest';
import { chooseEvictions, type SessionUse } from '../../src/interfaces/chooseEvictions.js';
import { sweepIntervalMs } from '../../src/interfaces/McpSessions.js';

const policy = { now: 100_000, idleMs: 10_000, maxPerEntity: 3 };

function session(id: string, lastUsedAt: number, entity = 'boss', inFlight = 0): SessionUse {
  return { id, entity, lastUsedAt, inFlight };
}

describe('MCP sessions are never capped or expired: which sessions to close', () => {
  it('closes nothing while every entity is within the cap and in use', () => {
    const sessions = [session('a', 95_000), session('b', 96_000), session('c', 99_000, 'other')];
    expect(chooseEvictions(sessions, policy)).toEqual([]);
  });

  it('closes a session with nothing open and no request for idleMs', () => {
    const sessions = [session('old', 90_000), session('edge', 90_001), session('fresh', 99_000)];
    expect(chooseEvictions(sessions, policy)).toEqual([{ id: 'old', entity: 'boss', reason: 'idle' }]);
  });

  it('keeps an idle-looking session while a request is open on it (a long ask, the GET stream)', () => {
    expect(chooseEvictions([session('asking', 0, 'boss', 1)], policy)).toEqual([]);
  });

  it('over the cap, closes that entity’s least recently used sessions, not the new one', () => {
    const sessions = [
      session('s1', 97_000),
      session('s2', 95_000),
      session('s3', 98_000),
      session('s4', 96_000),
      session('new', 100_000),
    ];
    expect(chooseEvictions(sessions, policy)).toEqual([
      { id: 's2', entity: 'boss', reason: 'over-cap' },
      { id: 's4', entity: 'boss', reason: 'over-cap' },
    ]);
  });

  it('counts the cap per entity: another entity’s sessions neither count nor go', () => {
    const sessions = [
      session('o1', 91_000, 'other'),
      session('o2', 91_000, 'other'),
      session('o3', 91_000, 'other'),
      session('b1', 92_000),
      session('b2', 93_000),
      session('b3', 94_000),
      session('b4', 95_000),
    ];
    expect(chooseEvictions(sessions, policy)).toEqual([{ id: 'b1', entity: 'boss', reason: 'over-cap' }]);
  });

  it('an open request does not shield a session from the cap', () => {
    const sessions = [session('streaming', 90_500, 'boss', 1), session('b', 99_000), session('c', 99_000)];
    const fourth = session('new', 100_000);
    expect(chooseEvictions([...sessions, fourth], policy)).toEqual([
      { id: 'streaming', entity: 'boss', reason: 'over-cap' },
    ]);
  });

  it('on equal times the older session goes first, so the one just initialized stays', () => {
    const sessions = ['a', 'b', 'c', 'd'].map((id) => session(id, 100_000));
    expect(chooseEvictions(sessions, policy)).toEqual([{ id: 'a', entity: 'boss', reason: 'over-cap' }]);
  });

  it('idle sessions go first and do not count toward the cap', () => {
    const sessions = [
      session('idle', 80_000),
      session('b1', 97_000),
      session('b2', 98_000),
      session('b3', 99_000),
    ];
    expect(chooseEvictions(sessions, policy)).toEqual([{ id: 'idle', entity: 'boss', reason: 'idle' }]);
  });

  it('looks for idle sessions a few times per idle period, at most once a minute', () => {
    expect(sweepIntervalMs(1_000)).toBe(250);
    expect(sweepIntervalMs(30 * 60_000)).toBe(60_000);
  });
});
