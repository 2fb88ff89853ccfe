import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SimulatedClock } from 'xstate';
import { createRemindMachine, type Nudge, Reminder, type ReminderDeps } from '../../src/deliver/Reminder.js';
import { silentLogger } from '../../src/log/logger.js';
import { createMetrics } from '../../src/metrics/metrics.js';
import { remindActorId } from '../../src/store/actorIds.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { readActorEvents } from '../../src/store/readEvents.js';
import { createHlc } from '../../src/wire/hlc.js';

describe('Reminder: driven by the held count alone (real SQLite, simulated clock)', () => {
  let dir: string;
  let store: Store;
  let clock: SimulatedClock;
  let nudges: Nudge[];
  /** What the owner reports as held; the reminder only ever hears the count. */
  let oldest: { acceptedAt: number; from: string } | undefined;
  let reminder: Reminder;

  /** Lets effects run: they wait for the commit, then a microtask. */
  const settle = async (): Promise<void> => {
    for (let i = 0; i < 3; i++) {
      await store.batch.flush();
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  };
  const states = (): string[] =>
    readActorEvents(store, 'remind', remindActorId('lead-gid')).map((row) => row.toState);

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'bridge-reminder-int-'));
    store = openStore({ file: join(dir, 'events.db') });
    clock = new SimulatedClock();
    clock.set(1_700_000_000_000);
    nudges = [];
    oldest = undefined;
    const deps: ReminderDeps = {
      store,
      hlc: createHlc(() => clock.now()),
      clock,
      host: 'h1',
      logger: silentLogger(),
      config: { remind: { enabled: true, firstMs: 1_000, maxMs: 4_000 } },
      metrics: createMetrics(() => []),
      onNudge: (nudge) => nudges.push(nudge),
      machines: { remind: createRemindMachine(clock) },
    };
    reminder = Reminder.open(
      { gid: 'lead-gid', name: 'lead', oldestHeld: () => oldest, readyPane: () => undefined },
      deps,
    );
  });
  afterEach(async () => {
    reminder.stop();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('nudges at growing intervals while the count is above 0, and stops when it drops to 0', async () => {
    oldest = { acceptedAt: clock.now(), from: 'w@h2' };
    reminder.heldChanged(2);
    await settle();
    clock.increment(1_000);
    await settle();
    expect(nudges.map((n) => [n.waiting, n.oldestFrom])).toEqual([[2, 'w@h2']]);
    clock.increment(1_000); // the second interval is 2 s: not yet
    await settle();
    expect(nudges).toHaveLength(1);
    clock.increment(1_000);
    await settle();
    expect(nudges).toHaveLength(2);
    oldest = undefined;
    reminder.heldChanged(0);
    await settle();
    clock.increment(60_000);
    await settle();
    expect(nudges).toHaveLength(2);
    expect(states()).toEqual(['quiet', 'waiting', 'nudging', 'waiting', 'nudging', 'waiting', 'quiet']);
  });

  it('a count that goes up and back down in one tick starts no round and writes nothing', async () => {
    await settle();
    const before = states();
    expect(before).toEqual(['quiet']);
    reminder.heldChanged(1);
    reminder.heldChanged(0);
    await settle();
    clock.increment(60_000);
    await settle();
    expect(states()).toEqual(before);
    expect(nudges).toEqual([]);
  });
});
