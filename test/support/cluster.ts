import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type ClusterStatus,
  clusterCtl,
  clusterStatus,
  findFreePortBase,
  killNode,
  type NodeRef,
  type NodeStatus,
  startCluster,
  startNode,
  stopCluster,
  stopNode,
} from '../../tools/cluster.mjs';

export type { ClusterStatus, NodeStatus };

export interface TestClusterOptions {
  /** How many nodes (default 3). */
  nodes?: number;
  /** Progress lines; default none. */
  log?: (line: string) => void;
}

/** A RabbitMQ cluster of its own, started by tools/cluster.mjs for one test file. */
export interface TestCluster {
  readonly dir: string;
  /** Node k's `amqp://guest:guest@127.0.0.1:<port>`, k = 1..N. */
  readonly uris: readonly string[];
  /** How long start() took, spawn to every node running in the cluster. */
  readonly startMs: number;
  status(): Promise<ClusterStatus>;
  /** kill -9 of node k's Erlang VM. */
  kill(node: NodeRef): Promise<void>;
  /** Brings node k back and waits until it runs in the cluster; resolves to how long that took. */
  startNode(node: NodeRef): Promise<number>;
  stopNode(node: NodeRef): Promise<void>;
  /** `rabbitmqctl -n <node k> ...args` with the cluster's cookie; resolves to its stdout. */
  rabbitmqctl(node: NodeRef, ...args: string[]): Promise<string>;
  /** Stops every node and removes the directory. Safe to call twice, and after a failed start. */
  stop(): Promise<void>;
}

/**
 * Starts a cluster that clashes with nothing else on the machine: a fresh temp dir, node names
 * of its own (`bridge-test-<pid>-k@localhost`) and the first free ports from 5800, so a user's
 * cluster on the defaults (5701.., /tmp/bridge-cluster) and the shared broker on 5672 stay as
 * they are.
 */
export async function startTestCluster(options: TestClusterOptions = {}): Promise<TestCluster> {
  const nodes = options.nodes ?? 3;
  const dir = mkdtempSync(join(tmpdir(), 'bridge-test-cluster-'));
  const log = options.log ?? (() => {});
  const opts = { dir, log };
  const port = await findFreePortBase(nodes, 5800);
  try {
    const started = await startCluster({ ...opts, nodes, port, name: `bridge-test-${process.pid}` });
    return {
      dir,
      uris: started.nodes.map((node) => node.uri),
      startMs: started.ms,
      status: () => clusterStatus(opts),
      kill: async (node) => {
        await killNode(node, opts);
      },
      startNode: async (node) => (await startNode(node, opts)).ms,
      stopNode: async (node) => {
        await stopNode(node, opts);
      },
      rabbitmqctl: (node, ...args) => clusterCtl(node, args, opts),
      stop: async () => {
        await stopCluster(opts);
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await stopCluster(opts);
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}
