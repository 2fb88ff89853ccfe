import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { encodeHlc } from '../../src/clock/hlc.js';
import { appendEvent } from '../../src/store/appendEvent.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { readRecentFlows } from '../../src/store/recentFlows.js';

/** The console's flow list over a real event log: only the flows with an event in the window. */
describe('readRecentFlows', () => {
  let dir: string | undefined;
  let store: Store | undefined;

  afterEach(async () => {
    await store?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function logWith(
    events: Array<{
      wall: number;
      trace: string;
      kind: string;
      to: string;
      event?: string;
      data?: Record<string, unknown>;
    }>,
  ): Promise<Store> {
    dir = mkdtempSync(join(tmpdir(), 'bridge-flows-'));
    store = openStore({ file: join(dir, 'events.db') });
    events.forEach(({ wall, trace, kind, to, event, data }, i) => {
      appendEvent(
        store as Store,
        {
          hlc: encodeHlc({ wall, counter: i }),
          host: 'h',
          actorKind: kind,
          actorId: `${kind}-${trace}`,
          traceId: trace,
          msgId: null,
          event: event ?? (i === 0 ? 'xstate.init' : 'step'),
          fromState: null,
          toState: to,
          data: data ?? null,
        },
        { done: false },
      );
    });
    await store.batch.flush();
    return store;
  }

  it('finds the window by HLC: older flows are left out, the latest first, each with its last event', async () => {
    const hour = 60 * 60_000;
    const now = 10 * hour;
    const log = await logWith([
      ...Array.from({ length: 500 }, (_, i) => ({
        wall: now - 3 * hour + i,
        trace: `old-${i % 7}`,
        kind: 'send',
        to: 'confirmed',
      })),
      // t1's send went to another host; its init names it.
      {
        wall: now - hour / 2,
        trace: 't1',
        kind: 'send',
        to: 'accepted',
        event: 'xstate.init',
        data: { recipientHost: 'beta' },
      },
      { wall: now - hour / 2 + 1, trace: 't2', kind: 'delivery', to: 'held' },
      { wall: now - hour / 4, trace: 't1', kind: 'delivery', to: 'acked' },
    ]);
    const flows = readRecentFlows(log, now - hour, 10);
    expect(flows.map((flow) => flow.traceId)).toEqual(['t1', 't2']);
    expect(flows[0]).toMatchObject({ events: 2, last: { actorKind: 'delivery', toState: 'acked' } });
    expect(flows[0]?.actorKinds.sort()).toEqual(['delivery', 'send']);
    expect(flows.map((flow) => flow.hosts)).toEqual([['h', 'beta'], ['h']]);
    expect(readRecentFlows(log, now - 4 * hour, 3)).toHaveLength(3);
    expect(readRecentFlows(log, now, 10)).toEqual([]);
  });

  it('an empty log has no flows', async () => {
    expect(readRecentFlows(await logWith([]), 0, 10)).toEqual([]);
  });
});
