import { defineConfig } from 'vitest/config';

// Three projects, named by cost (STYLE.md): unit tests are pure and fast; int tests use real
// SQLite files, tmux and RabbitMQ; e2e tests run the CLI and daemon as separate processes.
export default defineConfig({
  test: {
    pool: 'forks',
    reporters: ['default', './test/support/summaryReporter.ts'],
    projects: [
      { extends: true, test: { name: 'unit', include: ['test/**/*.unit.test.ts'] } },
      {
        extends: true,
        test: { name: 'int', include: ['test/**/*.int.test.ts'], testTimeout: 60_000, hookTimeout: 60_000 },
      },
      {
        extends: true,
        test: {
          name: 'e2e',
          include: ['test/**/*.e2e.test.ts'],
          testTimeout: 180_000,
          hookTimeout: 60_000,
        },
      },
    ],
  },
});
