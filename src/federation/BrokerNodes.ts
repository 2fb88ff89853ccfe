import { redactUri } from '../config/schema.js';

// Which broker node a gateway connects to next (R-TOP3): a pure record of the nodes' recent
// failures, kept by the broker actor, which performs the connections. No I/O, no clock: the
// actor passes the time in.

/** One broker node as `agentbridge status` shows it. */
export interface BrokerNodeView {
  /** The node's URI without its password. */
  node: string;
  /** connected: the gateway is on it; standby: not failing (tried or not); failing: in backoff. */
  state: 'connected' | 'standby' | 'failing';
  /** Failed attempts since it last connected. */
  failures: number;
  lastError: string | null;
  /** When it may be tried again (epoch ms), while it is failing. */
  retryAt: number | null;
}

interface NodeRecord {
  uri: string;
  failures: number;
  retryAt: number;
  lastError: string | null;
}

/** The next node to connect to, and how long to wait before (0: now). */
export interface NodeChoice {
  index: number;
  uri: string;
  waitMs: number;
}

export interface BrokerNodesOptions {
  /** The reconnect backoff of one node: first delay and cap (broker.retryBaseMs, retryMaxMs). */
  retryBaseMs: number;
  retryMaxMs: number;
  /** Where in the list a gateway starts (random in production, so gateways spread over nodes). */
  start: number;
}

/**
 * The broker's nodes in the order they are tried: from a starting node round the list. A node
 * that failed waits out its own backoff (doubling per failure, capped) while the others are
 * tried at once; when all are waiting, the one free soonest is next. Connecting resets a node.
 */
export class BrokerNodes {
  private readonly nodes: NodeRecord[];
  private current: number | undefined;
  private cursor: number;

  constructor(
    uris: readonly string[],
    private readonly options: BrokerNodesOptions,
  ) {
    if (uris.length === 0) throw new Error('BrokerNodes needs at least one broker URI');
    this.nodes = uris.map((uri) => ({ uri, failures: 0, retryAt: 0, lastError: null }));
    this.cursor = ((options.start % uris.length) + uris.length) % uris.length;
  }

  get size(): number {
    return this.nodes.length;
  }

  /** The node to try next at `now`: the first free one from the cursor, else the soonest free. */
  next(now: number): NodeChoice {
    let soonest = this.cursor;
    for (let step = 0; step < this.nodes.length; step++) {
      const index = (this.cursor + step) % this.nodes.length;
      const node = this.nodes[index] as NodeRecord;
      if (node.retryAt <= now) return { index, uri: node.uri, waitMs: 0 };
      if (node.retryAt < (this.nodes[soonest] as NodeRecord).retryAt) soonest = index;
    }
    const node = this.nodes[soonest] as NodeRecord;
    return { index: soonest, uri: node.uri, waitMs: node.retryAt - now };
  }

  /** Connected to node `index`: it is the current one, its failures forgotten. */
  connected(index: number): void {
    const node = this.nodes[index] as NodeRecord;
    node.failures = 0;
    node.retryAt = 0;
    node.lastError = null;
    this.current = index;
    this.cursor = index;
  }

  /**
   * Node `index` could not be reached, or its connection was lost: it waits out its backoff,
   * and the node after it is tried first.
   */
  failed(index: number, error: string, now: number): void {
    const node = this.nodes[index] as NodeRecord;
    node.failures += 1;
    const { retryBaseMs, retryMaxMs } = this.options;
    node.retryAt = now + Math.min(retryMaxMs, retryBaseMs * 2 ** Math.min(node.failures - 1, 20));
    node.lastError = error;
    if (this.current === index) this.current = undefined;
    this.cursor = (index + 1) % this.nodes.length;
  }

  /** The node the gateway is connected to, if any. */
  currentNode(): string | null {
    return this.current === undefined ? null : redactUri((this.nodes[this.current] as NodeRecord).uri);
  }

  view(): BrokerNodeView[] {
    return this.nodes.map((node, index) => ({
      node: redactUri(node.uri),
      state: index === this.current ? 'connected' : node.failures > 0 ? 'failing' : 'standby',
      failures: node.failures,
      lastError: node.lastError,
      retryAt: node.failures > 0 ? node.retryAt : null,
    }));
  }
}
