/** Types for tools/cluster.mjs (a plain Node script, so the TS tests can import it). */

export const DEFAULT_DIR: string;
export const DEFAULT_NODES: number;
export const DEFAULT_PORT: number;
export const DEFAULT_NAME: string;

/** An error whose message says what happened and what to do. */
export class ClusterError extends Error {}

export interface ClusterOptions {
  /** Where the cluster lives; default $BRIDGE_CLUSTER_DIR or /tmp/bridge-cluster. */
  dir?: string;
  /** Progress lines (starting, joining, stopping); silent by default. */
  log?: (line: string) => void;
}

export interface StartClusterOptions extends ClusterOptions {
  /** How many nodes (default 3). */
  nodes?: number;
  /** AMQP port of node 1; node k gets port + k - 1, distribution on that + 20000 (default 5701). */
  port?: number;
  /** Node k is `<name>-k@localhost` (default bridge-cluster). */
  name?: string;
  /**
   * Seconds without a sign of life before the nodes take a peer for down (Erlang's
   * net_ticktime, default 60); for a new cluster only.
   */
  netTicktime?: number;
}

export interface NodeStatus {
  /** 1..N */
  index: number;
  /** `<name>-k@localhost`: manage it with `rabbitmqctl -n <name>` (with the cluster's cookie). */
  name: string;
  /** `amqp://guest:guest@127.0.0.1:<amqpPort>` */
  uri: string;
  amqpPort: number;
  distPort: number;
  /** The Erlang VM's OS pid while it is alive. */
  pid: number | null;
  /** The VM is alive and its AMQP port answers. */
  running: boolean;
  /** A running node's `cluster_status` lists it as running. */
  inCluster: boolean;
}

export interface ClusterStatus {
  dir: string;
  /** The cluster's name, when a node answered. */
  cluster: string | null;
  /** Empty when there is no cluster in `dir`. */
  nodes: NodeStatus[];
}

/** NODE: its number (1..N) or its name. */
export type NodeRef = number | string;

export function startCluster(opts?: StartClusterOptions): Promise<ClusterStatus & { ms: number }>;
export function stopCluster(
  opts?: ClusterOptions & { keep?: boolean },
): Promise<{ dir: string; removed: boolean }>;
export function killNode(node: NodeRef, opts?: ClusterOptions): Promise<{ node: string; pid: number }>;
export function startNode(node: NodeRef, opts?: ClusterOptions): Promise<{ node: string; ms: number }>;
export function stopNode(node: NodeRef, opts?: ClusterOptions): Promise<{ node: string }>;
/** Runs `rabbitmqctl -n NODE ...args` with the cluster's cookie; resolves to its stdout. */
export function clusterCtl(node: NodeRef, args: string[], opts?: ClusterOptions): Promise<string>;
export function clusterStatus(opts?: ClusterOptions): Promise<ClusterStatus>;
/** Each node's Erlang VM from its pid file, without asking the cluster: `pid` null when it is gone. */
export function nodeVms(opts?: ClusterOptions): Array<{ index: number; name: string; pid: number | null }>;
/** The lowest base ≥ `from` whose `count` AMQP ports and distribution ports are all free. */
export function findFreePortBase(count?: number, from?: number): Promise<number>;
