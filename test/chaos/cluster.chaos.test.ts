import { afterAll, afterEach, beforeAll } from 'vitest';
import { startTestCluster, stopUnstoppedClusters, type TestCluster } from '../support/cluster.js';
import { brokerClusterSuite } from './cluster/brokerCluster.js';
import { clusterNodeLossSuite } from './cluster/clusterNodeLoss.js';
import { quorumInboxesSuite } from './cluster/quorumInboxes.js';
import { sealedQuorumSuite } from './cluster/sealedQuorum.js';

/**
 * Every test that needs a RabbitMQ cluster, on one cluster (tools/cluster.mjs: three nodes on
 * ports of their own, the shared broker on 5672 untouched) started once for all of them: a
 * start takes about 30 s here. After each test every node runs in the cluster again, whatever
 * the test did (killed, shut down or SIGSTOPped a node) and however it ended, so one failure
 * never leaves the next test a node short. Each suite's queues and hosts are names of its own.
 */
let cluster: TestCluster | undefined;

function sharedCluster(): TestCluster {
  if (!cluster) throw new Error('the shared cluster did not start (see the beforeAll hook)');
  return cluster;
}

beforeAll(async () => {
  cluster = await startTestCluster({ log: (line) => console.log(`cluster: ${line}`) });
}, 180_000);

afterEach(async () => {
  await cluster?.restore();
}, 120_000);

afterAll(async () => {
  await cluster?.stop();
  // A start the beforeAll gave up on is still under way: its nodes are stopped too.
  await stopUnstoppedClusters();
}, 120_000);

brokerClusterSuite(sharedCluster);
// Before the quorum suite, which dead-letters a message on purpose: node loss asserts that
// nothing was dead-lettered on the cluster.
clusterNodeLossSuite(sharedCluster);
quorumInboxesSuite(sharedCluster);
// After it: bridge.dlq on the cluster is a quorum queue by then.
sealedQuorumSuite(sharedCluster);
