import { describe, expect, it } from 'vitest';
import { SimulatedClock } from 'xstate';
import { ConsoleSessions, loginCodeTtlMs, sessionIdleMs } from '../../src/interfaces/ConsoleSessions.js';
import type { Clock } from '../../src/kernel/clock.js';

function clocked(): { clock: SimulatedClock; sessions: ConsoleSessions } {
  const clock = new SimulatedClock();
  clock.set(1_000_000);
  return { clock, sessions: new ConsoleSessions(clock as unknown as Clock) };
}

describe('ConsoleSessions: one-time login codes and idle sessions', () => {
  it('a code is good once, for its operator', () => {
    const { sessions } = clocked();
    const { code } = sessions.mintCode('gid-1');
    const first = sessions.redeem(code);
    expect(first?.operator).toBe('gid-1');
    expect(sessions.redeem(code)).toBeUndefined();
    expect(sessions.operatorOf(first?.session)).toBe('gid-1');
    expect(sessions.operatorOf('forged')).toBeUndefined();
    expect(sessions.operatorOf(undefined)).toBeUndefined();
  });

  it('a code expires after loginCodeTtlMs, unspent', () => {
    const { clock, sessions } = clocked();
    const { code, expiresAt } = sessions.mintCode('gid-1');
    expect(expiresAt).toBe(1_000_000 + loginCodeTtlMs);
    clock.increment(loginCodeTtlMs);
    expect(sessions.redeem(code)).toBeUndefined();
  });

  it('a session used within sessionIdleMs lives on; one left longer is over', () => {
    const { clock, sessions } = clocked();
    const { session } = sessions.redeem(sessions.mintCode('gid-1').code)!;
    clock.increment(sessionIdleMs - 1);
    expect(sessions.operatorOf(session)).toBe('gid-1');
    clock.increment(sessionIdleMs - 1);
    expect(sessions.operatorOf(session)).toBe('gid-1');
    clock.increment(sessionIdleMs + 1);
    expect(sessions.operatorOf(session)).toBeUndefined();
  });

  it('ending a session or forgetting its operator logs it out', () => {
    const { sessions } = clocked();
    const a = sessions.redeem(sessions.mintCode('gid-1').code)!;
    const b = sessions.redeem(sessions.mintCode('gid-2').code)!;
    const pending = sessions.mintCode('gid-2').code;
    sessions.end(a.session);
    expect(sessions.operatorOf(a.session)).toBeUndefined();
    sessions.forgetOperator('gid-2');
    expect(sessions.operatorOf(b.session)).toBeUndefined();
    expect(sessions.redeem(pending)).toBeUndefined();
  });
});
