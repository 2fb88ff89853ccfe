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
  nodeVms,
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
  /** Seconds before the nodes take a hung peer for down (net_ticktime); default 10, not 60. */
  netTicktime?: number;
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
  /**
   * Every node running in the cluster again, whatever a test did to it: a stopped VM
   * (SIGSTOP) is woken, a killed or shut-down node started. For tests that share the cluster.
   */
  restore(): Promise<void>;
  /** Stops every node and removes the directory. Safe to call twice, and after a failed start. */
  stop(): Promise<void>;
}

/** Signals a node's VM (a test stops, wakes or kills one); one that is gone has nothing to signal. */
export function signalNode(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
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
  unstopped.add(dir);
  const port = await findFreePortBase(nodes, 5800);
  try {
    const started = await startCluster({
      ...opts,
      nodes,
      port,
      name: `bridge-test-${process.pid}`,
      // A hung node is found out in seconds, as a test can wait for, not in a minute.
      netTicktime: options.netTicktime ?? 10,
    });
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
      restore: async () => {
        // From the pid files alone (a `rabbitmqctl` look boots an Erlang VM): a node whose VM
        // is alive is woken; one that is gone is started, and startNode waits until it runs in
        // the cluster.
        const all = nodeVms(opts);
        for (const node of all) if (node.pid !== null) signalNode(node.pid, 'SIGCONT');
        for (const node of all) {
          if (node.pid !== null) continue;
          log(`restoring ${node.name}`);
          await startNode(node.index, opts);
        }
      },
      stop: () => stopAndRemove(dir, log),
    };
  } catch (err) {
    await stopAndRemove(dir, log);
    throw err;
  }
}

/** The dirs of clusters this process started and has not stopped yet. */
const unstopped = new Set<string>();

async function stopAndRemove(dir: string, log: (line: string) => void): Promise<void> {
  await stopCluster({ dir, log });
  rmSync(dir, { recursive: true, force: true });
  unstopped.delete(dir);
}

/**
 * Stops every cluster this process started and did not stop: for an afterAll whose beforeAll
 * timed out while `startTestCluster` was still starting one (it has no cluster to stop then).
 */
export async function stopUnstoppedClusters(): Promise<void> {
  for (const dir of [...unstopped]) await stopAndRemove(dir, () => {});
}
