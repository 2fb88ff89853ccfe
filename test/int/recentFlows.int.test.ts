import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { appendEvent } from '../../src/store/appendEvent.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { RecentFlows } from '../../src/store/RecentFlows.js';
import { encodeHlc } from '../../src/wire/hlc.js';

/** The console's flow list over a real event log: only the flows with an event in the window. */
describe('RecentFlows', () => {
  let dir: string | undefined;
  let store: Store | undefined;

  afterEach(async () => {
    await store?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  interface LoggedEvent {
    wall: number;
    trace: string;
    kind: string;
    to: string;
    event?: string;
    data?: Record<string, unknown>;
  }

  async function logWith(events: LoggedEvent[]): Promise<Store> {
    dir = mkdtempSync(join(tmpdir(), 'bridge-flows-'));
    store = openStore({ file: join(dir, 'events.db') });
    await append(store, events);
    return store;
  }

  async function append(log: Store, events: LoggedEvent[]): Promise<void> {
    events.forEach(({ wall, trace, kind, to, event, data }, i) => {
      appendEvent(
        log,
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
    await log.batch.flush();
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
    const flows = await new RecentFlows(log).read(now - hour, 10);
    expect(flows.map((flow) => flow.traceId)).toEqual(['t1', 't2']);
    expect(flows[0]).toMatchObject({ events: 2, last: { actorKind: 'delivery', toState: 'acked' } });
    expect(flows[0]?.actorKinds.sort()).toEqual(['delivery', 'send']);
    expect(flows.map((flow) => flow.hosts)).toEqual([['h', 'beta'], ['h']]);
    expect(await new RecentFlows(log).read(now - 4 * hour, 3)).toHaveLength(3);
    expect(await new RecentFlows(log).read(now, 10)).toEqual([]);
  });

  it('reads on from where it left: new events update their flows, flows that left the window go', async () => {
    const minute = 60_000;
    const log = await logWith([
      { wall: 10 * minute, trace: 'early', kind: 'send', to: 'accepted' },
      { wall: 20 * minute, trace: 'later', kind: 'send', to: 'accepted' },
    ]);
    const flows = new RecentFlows(log);
    expect((await flows.read(0, 10)).map((flow) => flow.traceId)).toEqual(['later', 'early']);
    await append(log, [
      { wall: 30 * minute, trace: 'early', kind: 'delivery', to: 'acked', event: 'delivery.acked' },
      { wall: 31 * minute, trace: 'newest', kind: 'turn', to: 'waiting' },
    ]);
    const again = await flows.read(0, 10);
    expect(again.map((flow) => flow.traceId)).toEqual(['newest', 'early', 'later']);
    expect(again[1]).toMatchObject({ events: 2, last: { actorKind: 'delivery', event: 'delivery.acked' } });
    expect(again[1]?.actorKinds).toEqual(['send', 'delivery']);
    // The window moves on: 'later' had nothing since minute 20.
    expect((await flows.read(25 * minute, 10)).map((flow) => flow.traceId)).toEqual(['newest', 'early']);
    // A flow's figures go on counting from where this reader began: 'early' keeps its first event.
    expect((await flows.read(25 * minute, 10))[1]).toMatchObject({
      events: 2,
      firstHlc: encodeHlc({ wall: 10 * minute, counter: 0 }),
    });
  });

  it('groups a long window in slices: a flow split across them is counted whole', async () => {
    const events = Array.from({ length: 45_000 }, (_, i) => ({
      wall: 1_000 + i,
      trace: i % 3 === 0 ? 'long' : `short-${i}`,
      kind: i % 2 === 0 ? 'send' : 'delivery',
      to: 's',
    }));
    const log = await logWith(events);
    const flows = await new RecentFlows(log).read(0, 50_000);
    const long = flows.find((flow) => flow.traceId === 'long');
    expect(long).toMatchObject({ events: 15_000, firstHlc: encodeHlc({ wall: 1_000, counter: 0 }) });
    expect(long?.actorKinds.sort()).toEqual(['delivery', 'send']);
    expect(flows).toHaveLength(1 + 30_000);
    expect(flows[0]?.traceId).toBe('short-44999');
  });

  it('unread for longer than its window, it starts over from the window', async () => {
    const hour = 60 * 60_000;
    const log = await logWith([{ wall: hour, trace: 'yesterday', kind: 'send', to: 'accepted' }]);
    const flows = new RecentFlows(log);
    expect((await flows.read(0, 10)).map((flow) => flow.traceId)).toEqual(['yesterday']);
    await append(log, [
      { wall: 2 * hour, trace: 'yesterday', kind: 'delivery', to: 'acked' },
      { wall: 30 * hour, trace: 'today', kind: 'send', to: 'accepted' },
      { wall: 30 * hour + 1, trace: 'today', kind: 'delivery', to: 'held' },
    ]);
    const now = await flows.read(29 * hour, 10);
    expect(now.map((flow) => flow.traceId)).toEqual(['today']);
    expect(now[0]).toMatchObject({ events: 2, firstHlc: encodeHlc({ wall: 30 * hour, counter: 1 }) });
  });

  it('an empty log has no flows', async () => {
    const flows = new RecentFlows(await logWith([]));
    expect(await flows.read(0, 10)).toEqual([]);
    await append(store as Store, [{ wall: 1_000, trace: 'first', kind: 'send', to: 'accepted' }]);
    expect((await flows.read(0, 10)).map((flow) => flow.traceId)).toEqual(['first']);
  });
});
