import type { Config } from '../config/schema.js';
import { deliveryKind } from '../deliver/Delivery.js';
import type { Directory } from '../deliver/Directory.js';
import { type RecentDelivery, readRecentDeliveries } from '../deliver/recentDeliveries.js';
import type { Federation } from '../federation/Federation.js';
import { dlqName, inboxName } from '../federation/topology.js';
import type { Clock } from '../kernel/clock.js';
import type { Metrics } from '../metrics/metrics.js';
import type { AgentDescription } from '../panes/paneInjector.js';
import { loadKeys } from '../security/keys.js';
import { listTrust } from '../security/TrustStore.js';
import { addressOf } from '../send/Router.js';
import { countActorsByState } from '../store/actorHeads.js';
import type { Store } from '../store/openStore.js';
import { type RecentFlow, RecentFlows } from '../store/RecentFlows.js';
import type { Address } from '../wire/envelope.js';

export interface RosterEntry extends Address {
  groups: string[];
  status: string;
  /** Queued messages, known for local entities only. */
  depth?: number;
  /** When it was last active (ms): here, up to now; another host's, as of its last presence. */
  lastActiveAt?: number;
  /** An agent its host spawned: bridge_stop (and the console's Stop) may end it. */
  spawned?: boolean;
  /**
   * A worker whose agent runs behind an agent host: its path and agent, and here, how to watch
   * it (another host's announces no attach command: it names a socket there).
   */
  agent?: AgentDescription;
}

export interface GatewayStatusDeps {
  store: Store;
  clock: Clock;
  host: string;
  /** When the gateway started (ms since epoch), for its uptime. */
  startedAt: number;
  config: Pick<Config, 'home' | 'broker' | 'security'>;
  metrics: Metrics;
  directory: Directory;
  federation: Federation | undefined;
  isSpawned(gid: string): boolean;
}

/**
 * What `agentbridge status`, `bridge_roster` and the console show of this gateway: who is here,
 * how it runs, and what went through it lately.
 */
export class GatewayStatus {
  /** The console's list of recent flows, read on from where it last read. */
  private readonly flows: RecentFlows;

  constructor(private readonly deps: GatewayStatusDeps) {
    this.flows = new RecentFlows(deps.store);
  }

  /** The latest deliveries to a local entity, newest first. */
  recentDeliveries(gid: string, limit = 50): RecentDelivery[] {
    return readRecentDeliveries(this.deps.store, gid, limit);
  }

  /** The flows with an event in this host's log in the last `withinMs`, the latest first. */
  recentFlows(withinMs: number, limit = 200): Promise<RecentFlow[]> {
    return this.flows.read(this.deps.clock.now() - withinMs, limit);
  }

  /** Local entities first, then every remote host's, as their presence announced them (U5). */
  roster(): RosterEntry[] {
    const { directory, federation, host, isSpawned } = this.deps;
    const local: RosterEntry[] = [...directory.all()].map((entity) => ({
      ...addressOf(entity, host),
      groups: entity.record.groups,
      status: entity.status,
      depth: entity.depth,
      ...(entity.lastActiveAt === undefined ? {} : { lastActiveAt: entity.lastActiveAt }),
      ...(isSpawned(entity.gid) ? { spawned: true } : {}),
      ...(entity.agent === undefined ? {} : { agent: entity.agent }),
    }));
    const remote: RosterEntry[] = (federation?.roster.entries() ?? []).map((e) => ({
      gid: e.gid,
      name: e.name,
      host: e.host,
      kind: e.kind,
      groups: e.groups,
      status: e.status,
      ...(e.lastActiveAt === undefined ? {} : { lastActiveAt: e.lastActiveAt }),
      ...(e.spawned ? { spawned: true } : {}),
      ...(e.agent === undefined ? {} : { agent: e.agent }),
    }));
    return [...local, ...remote];
  }

  async status(): Promise<Record<string, unknown>> {
    const { federation, config, directory, metrics, store, clock } = this.deps;
    const broker = federation
      ? {
          state: federation.broker.state,
          lastError: federation.broker.lastError,
          node: federation.broker.currentNode,
          nodes: federation.broker.nodeStates(),
          // Inbox consumers share channels and channels a few connections: what this gateway holds.
          usage: federation.broker.usage(),
          // Recipients whose last publish the broker holds unconfirmed (a cluster without its majority).
          unconfirmed: federation.broker.unconfirmedKeys(),
          queueMode: config.broker.queueMode,
          peers: federation.roster.hostIds(),
          // Hosts heard but not believed: not trusted here, a clock off, a replay.
          ignoredPeers: federation.ignoredPeers(),
          deadLetterQueue: await federation.broker.queueDepth(dlqName),
          inboxes: Object.fromEntries(
            await Promise.all(
              [...directory.all()].map(
                async (e) => [e.record.name, await federation.broker.queueDepth(inboxName(e.gid))] as const,
              ),
            ),
          ),
        }
      : null;
    const deadLetters = Object.fromEntries(
      (await metrics.deadLetters.get()).values.map((v) => [String(v.labels.reason), v.value]),
    );
    const sessionsByEntity = (await metrics.mcpSessions.get()).values.map(
      (v) => [String(v.labels.entity), v.value] as const,
    );
    return {
      host: this.deps.host,
      pid: process.pid,
      uptimeSeconds: Math.round((clock.now() - this.deps.startedAt) / 1000),
      mode: federation ? 'federated' : 'single-host',
      broker,
      signing: federation ? this.signingStatus() : null,
      store: store.file,
      entities: this.roster(),
      deliveries: countActorsByState(store, deliveryKind),
      deadLetters,
      mcpSessions: {
        total: sessionsByEntity.reduce((sum, [, n]) => sum + n, 0),
        byEntity: Object.fromEntries(sessionsByEntity),
      },
    };
  }

  /**
   * What the operator console shows of this gateway, cheap enough to read every few seconds
   * with a thousand entities (no per-inbox broker query, unlike `status`): the broker's state,
   * the dead-letter queue's depth, dead letters by reason, deliveries by state, and the
   * delivery latency histogram (per bucket, not cumulative).
   */
  async overview(): Promise<Record<string, unknown>> {
    const { federation, config, metrics, store } = this.deps;
    const latency = (await metrics.deliveryLatency.get()).values.filter(
      (v) => v.metricName === 'bridge_delivery_latency_seconds_bucket',
    );
    // Summed over the `mode` label, by bucket bound; then each bucket's own count.
    const cumulative = new Map<number, number>();
    for (const v of latency) {
      const bound = (v.labels as { le?: string | number }).le;
      const le = bound === '+Inf' ? Number.POSITIVE_INFINITY : Number(bound);
      cumulative.set(le, (cumulative.get(le) ?? 0) + v.value);
    }
    const bounds = [...cumulative.keys()].sort((a, b) => a - b);
    const buckets = bounds.map((le, i) => ({
      le: Number.isFinite(le) ? le : null,
      count: (cumulative.get(le) ?? 0) - (i === 0 ? 0 : (cumulative.get(bounds[i - 1] as number) ?? 0)),
    }));
    return {
      host: this.deps.host,
      // Not an uptime: the console sends the overview again only when it changed.
      startedAt: this.deps.startedAt,
      mode: federation ? 'federated' : 'single-host',
      broker: federation
        ? {
            state: federation.broker.state,
            lastError: federation.broker.lastError,
            node: federation.broker.currentNode,
            queueMode: config.broker.queueMode,
            peers: federation.roster.hostIds(),
            deadLetterQueue: await federation.broker.queueDepth(dlqName),
          }
        : null,
      deadLetters: Object.fromEntries(
        (await metrics.deadLetters.get()).values.map((v) => [String(v.labels.reason), v.value]),
      ),
      deliveries: countActorsByState(store, deliveryKind),
      deliveryLatency: buckets,
    };
  }

  /** This gateway's signing key and the hosts it trusts, for `agentbridge status`. */
  private signingStatus(): {
    mode: string;
    publicKey: string | null;
    trustedHosts: string[];
    problem: string | null;
  } {
    const { config } = this.deps;
    const mode = config.security.signing;
    if (mode === 'off') return { mode, publicKey: null, trustedHosts: [], problem: null };
    try {
      return {
        mode,
        publicKey: loadKeys(config.home).publicKeyString,
        trustedHosts: listTrust(config.home).map((entry) => entry.host),
        problem: null,
      };
    } catch (err) {
      return { mode, publicKey: null, trustedHosts: [], problem: (err as Error).message };
    }
  }
}
