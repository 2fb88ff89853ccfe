import type { ServerResponse } from 'node:http';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { Gauge } from 'prom-client';
import type { EntityActor } from '../deliver/EntityActor.js';
import type { Clock } from '../kernel/clock.js';
import type { Logger } from '../log/logger.js';
import { chooseEvictions, type Eviction, EvictionReason } from './chooseEvictions.js';

/** One MCP session: everything it holds is freed when its transport closes. */
export interface McpSession {
  readonly id: string;
  readonly entity: EntityActor;
  readonly transport: StreamableHTTPServerTransport;
  readonly server: McpServer;
  lastUsedAt: number;
  inFlight: number;
}

export interface McpSessionsOptions {
  readonly clock: Clock;
  readonly logger: Logger;
  /** `bridge_mcp_sessions{entity}`, kept equal to the table. */
  readonly gauge: Gauge<'entity'>;
  /** `mcp.maxSessionsPerEntity`. */
  readonly maxPerEntity: number;
  /** `mcp.sessionIdleMs`. */
  readonly idleMs: number;
}

/** How often idle sessions are looked for: a few times per idle period, at most once a minute. */
export function sweepIntervalMs(idleMs: number): number {
  return Math.min(60_000, Math.max(100, Math.floor(idleMs / 4)));
}

/**
 * The gateway's open MCP sessions. Closing a session is closing its transport: the transport's
 * `onclose` (a DELETE, an eviction here, the gateway stopping) calls `forget`, and the HTTP
 * server frees its own per-session subscriptions there too. What to close is `chooseEvictions`'
 * call; this table only does it.
 */
export class McpSessions {
  private readonly sessions = new Map<string, McpSession>();
  private readonly sweeper: ReturnType<typeof setInterval>;

  constructor(private readonly options: McpSessionsOptions) {
    this.sweeper = setInterval(() => this.evict(), sweepIntervalMs(options.idleMs));
    this.sweeper.unref();
  }

  get(id: string): McpSession | undefined {
    return this.sessions.get(id);
  }

  get size(): number {
    return this.sessions.size;
  }

  /** A session whose initialize succeeded; the cap is applied at once. */
  add(session: Omit<McpSession, 'lastUsedAt' | 'inFlight'>): void {
    this.sessions.set(session.id, { ...session, lastUsedAt: this.options.clock.now(), inFlight: 0 });
    this.publish(session.entity);
    this.evict();
  }

  /** A request on `session` is open until its response closes (finished, or the client went). */
  use(session: McpSession, res: ServerResponse): void {
    session.inFlight++;
    session.lastUsedAt = this.options.clock.now();
    res.once('close', () => {
      session.inFlight--;
      session.lastUsedAt = this.options.clock.now();
    });
  }

  /** The session's transport has closed. */
  forget(id: string): void {
    const session = this.sessions.get(id);
    if (!session) return;
    this.sessions.delete(id);
    this.publish(session.entity);
  }

  /** Closes every session (the gateway is stopping). */
  async closeAll(): Promise<void> {
    clearInterval(this.sweeper);
    for (const session of [...this.sessions.values()]) await this.close(session);
    this.sessions.clear();
  }

  private evict(): void {
    const { clock, idleMs, maxPerEntity } = this.options;
    const sessions = [...this.sessions.values()].map((s) => ({
      id: s.id,
      entity: s.entity.gid,
      lastUsedAt: s.lastUsedAt,
      inFlight: s.inFlight,
    }));
    for (const eviction of chooseEvictions(sessions, { now: clock.now(), idleMs, maxPerEntity })) {
      const session = this.sessions.get(eviction.id);
      if (!session) continue;
      this.report(eviction, session);
      void this.close(session);
    }
  }

  private report(eviction: Eviction, session: McpSession): void {
    const { logger, clock, idleMs, maxPerEntity } = this.options;
    const fields = {
      entity: session.entity.record.name,
      session: session.id,
      reason: eviction.reason,
      idleForMs: clock.now() - session.lastUsedAt,
    };
    if (eviction.reason === EvictionReason.idle) {
      logger.info(fields, `MCP session closed: idle for more than mcp.sessionIdleMs (${idleMs} ms)`);
    } else {
      // A client that keeps initializing without closing (DELETE) its sessions: say so.
      logger.warn(
        { ...fields, maxSessionsPerEntity: maxPerEntity },
        `MCP session closed: over mcp.maxSessionsPerEntity (${maxPerEntity}) for ${fields.entity}, ` +
          'its least recently used one goes; a client should reuse its session or end it with DELETE',
      );
    }
  }

  private async close(session: McpSession): Promise<void> {
    try {
      await session.transport.close();
    } catch (err) {
      this.options.logger.warn({ err, session: session.id }, 'closing an MCP session failed');
    } finally {
      // The transport's onclose normally did this already; a failed close must not leave it.
      this.forget(session.id);
    }
  }

  /** Sets the gauge for `entity`'s name, the label it goes by (as in bridge_inbox_depth). */
  private publish(entity: EntityActor): void {
    const name = entity.record.name;
    let count = 0;
    for (const s of this.sessions.values()) if (s.entity.record.name === name) count++;
    const labels = { entity: name };
    if (count === 0) this.options.gauge.remove(labels);
    else this.options.gauge.set(labels, count);
  }
}
