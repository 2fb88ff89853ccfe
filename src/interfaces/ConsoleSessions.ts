import { randomBytes } from 'node:crypto';
import type { Clock } from '../kernel/clock.js';

/** A login URL's code: good once, for this long. */
export const loginCodeTtlMs = 5 * 60_000;
/** A console session with no request for this long is over; the operator logs in again. */
export const sessionIdleMs = 12 * 60 * 60_000;

interface Pending {
  readonly operator: string;
  readonly expiresAt: number;
}

interface Session {
  readonly operator: string;
  lastUsedAt: number;
}

/**
 * The operator console's logins: one-time codes minted for `agentbridge console` (over the admin
 * socket, so only whoever may run the CLI gets one), each exchanged once for a session whose id
 * becomes an HttpOnly cookie. A session stands for its operator entity, by gid: the page never
 * names who it is (R-ID2). Both live in memory only; a gateway restart logs every console out.
 */
export class ConsoleSessions {
  private readonly codes = new Map<string, Pending>();
  private readonly sessions = new Map<string, Session>();

  constructor(private readonly clock: Clock) {}

  /** A code for `operator` (a gid), for the login URL. */
  mintCode(operator: string): { code: string; expiresAt: number } {
    this.sweep();
    const code = randomBytes(24).toString('base64url');
    const expiresAt = this.clock.now() + loginCodeTtlMs;
    this.codes.set(code, { operator, expiresAt });
    return { code, expiresAt };
  }

  /** Spends a code: a new session id for its operator, or undefined (unknown, used or expired). */
  redeem(code: string): { session: string; operator: string } | undefined {
    const pending = this.codes.get(code);
    this.codes.delete(code);
    if (!pending || pending.expiresAt <= this.clock.now()) return undefined;
    const session = randomBytes(32).toString('base64url');
    this.sessions.set(session, { operator: pending.operator, lastUsedAt: this.clock.now() });
    return { session, operator: pending.operator };
  }

  /** The operator gid a session id stands for, or undefined; a use keeps the session alive. */
  operatorOf(session: string | undefined): string | undefined {
    if (session === undefined) return undefined;
    const found = this.sessions.get(session);
    if (!found) return undefined;
    const now = this.clock.now();
    if (now - found.lastUsedAt > sessionIdleMs) {
      this.sessions.delete(session);
      return undefined;
    }
    found.lastUsedAt = now;
    return found.operator;
  }

  /** Ends one session (log out). */
  end(session: string): void {
    this.sessions.delete(session);
  }

  /** Ends every session of an operator that is gone (deregistered). */
  forgetOperator(operator: string): void {
    for (const [id, session] of this.sessions) if (session.operator === operator) this.sessions.delete(id);
    for (const [code, pending] of this.codes) if (pending.operator === operator) this.codes.delete(code);
  }

  private sweep(): void {
    const now = this.clock.now();
    for (const [code, pending] of this.codes) if (pending.expiresAt <= now) this.codes.delete(code);
    for (const [id, session] of this.sessions)
      if (now - session.lastUsedAt > sessionIdleMs) this.sessions.delete(id);
  }
}
