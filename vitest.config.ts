import { defineConfig } from 'vitest/config';
import CostSequencer from './test/support/CostSequencer.js';

// Projects named by cost (STYLE.md): unit tests are pure and fast; int tests use real SQLite
// files, tmux and RabbitMQ; e2e tests run the CLI and daemon as separate processes; chaos tests
// inject faults (kills, cut links, a cluster's node loss); alone tests stop the shared broker or
// change a broker-wide setting, so they run last, by themselves.
// The shared topology on the test broker, as an operator's `agentbridge broker setup` would make it.
const sharedTopology = './test/support/sharedTopology.ts';

// Test files in parallel, three at a time by default (BRIDGE_TEST_WORKERS): on two cores most
// int and e2e time is spent waiting on processes, the broker and panes, not computing, and
// vitest's own default (cores − 1) would run them one after another.
const workers = Number(process.env.BRIDGE_TEST_WORKERS ?? 3);

export default defineConfig({
  test: {
    pool: 'forks',
    maxWorkers: workers,
    minWorkers: 1,
    reporters: ['default', './test/support/SummaryReporter.ts'],
    // FUZZ_SEED replays every property test (test/support/propertySeed.ts).
    setupFiles: ['./test/support/propertySeed.ts'],
    sequence: { sequencer: CostSequencer },
    projects: [
      { extends: true, test: { name: 'unit', include: ['test/**/*.unit.test.ts'] } },
      {
        extends: true,
        test: {
          name: 'int',
          include: ['test/**/*.int.test.ts'],
          testTimeout: 60_000,
          hookTimeout: 60_000,
          globalSetup: [sharedTopology],
        },
      },
      {
        // Faults under traffic on links, gateways and a RabbitMQ cluster of their own (names of
        // their own on the shared broker): beside the other projects.
        extends: true,
        test: {
          name: 'chaos',
          include: ['test/**/*.chaos.test.ts'],
          testTimeout: 300_000,
          hookTimeout: 180_000,
          globalSetup: [sharedTopology],
        },
      },
      {
        // Tests that stop the shared broker or change a broker-wide setting: alone, one file at a
        // time, after everything else.
        extends: true,
        test: {
          name: 'alone',
          include: ['test/**/*.alone.test.ts'],
          testTimeout: 300_000,
          hookTimeout: 120_000,
          sequence: { groupOrder: 1 },
          globalSetup: [sharedTopology],
          poolOptions: { forks: { singleFork: true } },
        },
      },
      {
        extends: true,
        test: {
          name: 'e2e',
          include: ['test/**/*.e2e.test.ts'],
          testTimeout: 180_000,
          hookTimeout: 60_000,
          globalSetup: [sharedTopology],
        },
      },
    ],
  },
});
