import { execFile } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

/**
 * `npm run bench` is plain ESM over dist/ that no test ran: its no-op pane kept an injector
 * interface gone for several releases, and every delivery to it failed until the run's timeout.
 * A tiny router run must finish with each of its rows (a partial run leaves bench/results.* alone).
 */
const repo = resolve(dirname(new URL(import.meta.url).pathname), '../..');

describe('bench smoke', () => {
  it('the router rows run to the end with a few messages', async () => {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, ['bench/run.mjs'], {
      cwd: repo,
      env: {
        ...process.env,
        BENCH_ONLY: 'router',
        BENCH_ROUTER_MESSAGES: '40',
        BENCH_WARMUP: '5',
        BENCH_PROGRESS: '0',
        BENCH_TIMEOUT_MS: '90000',
      },
      timeout: 120_000,
    });
    const output = `${stdout}\n${stderr}`;
    const rows = output.split('\n').filter((line) => / vs sqlite floor: \d+ vs \d+ msg\/s/.test(line));
    expect(rows.map((line) => line.slice(0, line.indexOf(' vs ')))).toEqual([
      'router: main → main (held), accept',
      'router: main → main, delivered to drain',
      'router: main → main, delivered to open send',
      'router: main → worker (no-op pane), injected',
    ]);
    expect(output).toContain('partial run (BENCH_ONLY): bench/results.* left as they were');
  }, 150_000);
});
