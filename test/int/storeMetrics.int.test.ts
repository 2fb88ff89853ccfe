import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/loadConfig.js';
import { Gateway } from '../../src/gateway/Gateway.js';
import { createLogger } from '../../src/log/logger.js';
import { RecordingPane } from '../support/RecordingPane.js';

/** A metric's value in Prometheus text (the first sample whose name and labels match). */
function sample(text: string, name: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('the event log’s metrics on /metrics, and Node’s own with metrics.runtime', () => {
  const homes: string[] = [];
  const gateways: Gateway[] = [];
  afterEach(async () => {
    for (const gateway of gateways.splice(0)) await gateway.stop();
    for (const home of homes.splice(0)) rmSync(home, { recursive: true, force: true });
  });

  const boot = async (file: Record<string, unknown> = {}) => {
    const home = mkdtempSync(join(tmpdir(), 'bridge-metrics-'));
    homes.push(home);
    const configFile = join(home, 'config.json');
    writeFileSync(configFile, JSON.stringify(file));
    const { config } = loadConfig({ env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: 'm1' }, file: configFile });
    const gateway = new Gateway({
      config,
      logger: createLogger({ level: 'silent' }),
      createInjector: () => new RecordingPane(),
    });
    await gateway.start();
    gateways.push(gateway);
    return gateway;
  };

  it('counts each commit: its statements, its wait and its commit time', async () => {
    const gateway = await boot();
    const a = gateway.directory.authenticate(
      (await gateway.services.registrations.register({ kind: 'main', name: 'a' })).token,
    )!;
    await gateway.services.registrations.register({ kind: 'main', name: 'b' });
    const before = await gateway.metrics.registry.metrics();
    const rowsBefore = sample(before, 'bridge_store_rows_written_total') ?? 0;
    const commitsBefore = sample(before, 'bridge_store_commit_ops_count') ?? 0;
    for (let i = 0; i < 5; i++)
      await gateway.services.sends.send(a, { kind: 'SEND', to: 'b', text: `m${i}` });
    await gateway.store.batch.flush();
    const after = await gateway.metrics.registry.metrics();
    const rows = (sample(after, 'bridge_store_rows_written_total') ?? 0) - rowsBefore;
    const commits = (sample(after, 'bridge_store_commit_ops_count') ?? 0) - commitsBefore;
    // Each send writes its rows (events, heads, body) in a commit of its own here: one at a time.
    expect(commits).toBeGreaterThanOrEqual(1);
    expect(rows).toBeGreaterThanOrEqual(5 * 2);
    expect(sample(after, 'bridge_store_commit_seconds_count')).toBe(
      sample(after, 'bridge_store_commit_ops_count'),
    );
    expect(sample(after, 'bridge_store_commit_wait_seconds_sum')).toBeGreaterThan(0);
    // Off by default: no event-loop monitor waking an idle gateway.
    expect(after).not.toContain('nodejs_eventloop_lag');
  });

  it('with metrics.runtime: true, /metrics has the event-loop delay and GC pauses too', async () => {
    const gateway = await boot({ metrics: { runtime: true } });
    const text = await gateway.metrics.registry.metrics();
    expect(sample(text, 'nodejs_eventloop_lag_p99_seconds')).toBeGreaterThanOrEqual(0);
    expect(text).toContain('nodejs_gc_duration_seconds');
    expect(text).toContain('bridge_store_commit_ops');
  });
});
