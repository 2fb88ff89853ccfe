import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { SimulatedClock } from 'xstate';
import { ErrorCode } from '../../src/errors.js';
import { Gateway } from '../../src/gateway/Gateway.js';
import { MemoryGateway } from '../support/MemoryGateway.js';
import { RecordingPane } from '../support/RecordingPane.js';

describe('the send and delivery flows in memory (in-memory event log, simulated clock, fake pane)', () => {
  let memory: MemoryGateway;
  let clock: SimulatedClock;
  let pane: RecordingPane;
  let gateway: Gateway;
  let logLines: Array<Record<string, unknown>>;
  /** Lets effects run and their writes commit. */
  const settle = () => memory.settle();
  /** Starts the gateway again on the same log (what a restart rebuilds from). */
  const boot = async () => {
    await memory.stop();
    return memory.boot();
  };
  const events = (sql: string) => memory.events(sql);

  beforeEach(async () => {
    pane = new RecordingPane();
    memory = new MemoryGateway({
      createInjector: () => pane,
      config: (config) => ({
        ...config,
        delivery: { ...config.delivery, ttlMs: 60_000, maxAttempts: 3, retryBaseMs: 1_000 },
      }),
    });
    clock = memory.clock;
    logLines = memory.logLines;
    gateway = await memory.boot();
  });
  afterEach(async () => {
    await memory.close();
  });

  it('retries a failing pane with backoff, then dead-letters with delivery-limit and keeps the body', async () => {
    const worker = await gateway.services.registrations.register({
      kind: 'worker',
      name: 'w',
      pane: { type: 'tmux', target: '%1' },
    });
    const main = await gateway.services.registrations.register({ kind: 'main', name: 'm' });
    const sender = gateway.directory.authenticate(main.token)!;
    pane.failing = true;
    const { msgId } = await gateway.services.sends.send(sender, { kind: 'SEND', to: 'w', text: 'doomed' });
    await settle();
    expect(gateway.services.status.roster().find((e) => e.name === 'w')?.depth).toBe(1);
    clock.increment(1_000); // first retry
    await settle();
    clock.increment(2_000); // second retry, third attempt fails: limit reached
    await settle();
    expect(gateway.services.status.roster().find((e) => e.gid === worker.gid)?.depth).toBe(0);
    expect(memory.deliveryTrail(msgId)).toEqual([
      'pending',
      'injecting',
      'backoff',
      'pending',
      'injecting',
      'backoff',
      'pending',
      'injecting',
      'dead-lettered',
    ]);
    const kept = events(`SELECT envelope FROM messages WHERE msg_id = '${msgId}'`);
    expect(JSON.parse((kept[0] as { envelope: string }).envelope)).toMatchObject({ text: 'doomed' });
    const metrics = await gateway.metrics.registry.getSingleMetricAsString('bridge_dead_letters_total');
    expect(metrics).toContain('reason="delivery-limit"} 1');
  });

  it('a worker whose agent asks its owner (its pane reports blocked) reads as blocked in the roster, and idle again after', async () => {
    await gateway.services.registrations.register({
      kind: 'worker',
      name: 'w',
      pane: { type: 'tmux', target: '%1' },
    });
    await settle();
    const statusOfW = () => gateway.services.status.roster().find((e) => e.name === 'w')?.status;
    pane.setStatus('blocked');
    await settle();
    expect(statusOfW()).toBe('active.blocked');
    pane.setStatus('working');
    await settle();
    expect(statusOfW()).toBe('active.busy');
    pane.setStatus('idle');
    await settle();
    expect(statusOfW()).toBe('active.idle');
  });

  it("the owner's answer to its agent's permission request goes to the agent host and is recorded with who gave it; none is given where none is asked", async () => {
    await gateway.services.registrations.register({
      kind: 'worker',
      name: 'w',
      pane: { type: 'tmux', target: '%1' },
    });
    await settle();
    await expect(gateway.services.ownerAnswers.answer('w', 'allow', 'ana')).rejects.toThrow(
      'asks for no permission now',
    );
    pane.openPermissions = [1, 2];
    expect(await gateway.services.ownerAnswers.answer('w', 'deny', 'ana', 2)).toEqual({
      worker: 'w',
      request: 2,
      decision: 'deny',
      said: 'w: request 2 denied',
    });
    expect(await gateway.services.ownerAnswers.answer('w@h1', 'allow', 'bo')).toMatchObject({ request: 1 });
    expect(pane.answers).toEqual([
      { decision: 'deny', request: 2 },
      { decision: 'allow', request: 1 },
    ]);
    const recorded = events(
      "SELECT data FROM event_log WHERE actor_kind = 'entity' AND event = 'entity.ownerAnswered' ORDER BY hlc",
    ) as Array<{ data: string }>;
    expect(recorded.map((r) => JSON.parse(r.data))).toEqual([
      { request: 2, decision: 'deny', by: 'ana' },
      { request: 1, decision: 'allow', by: 'bo' },
    ]);
    await expect(gateway.services.ownerAnswers.answer('w@elsewhere', 'allow', 'ana')).rejects.toThrow(
      'no worker w@elsewhere on h1 or in the roster',
    );
  });

  it('holds a message while the pane shows a dialog, types nothing, and submits it once the dialog is gone', async () => {
    await gateway.services.registrations.register({
      kind: 'worker',
      name: 'w',
      pane: { type: 'tmux', target: '%1' },
    });
    const main = await gateway.services.registrations.register({ kind: 'main', name: 'm' });
    pane.hold = { reason: 'blocked', detail: 'Claude Code shows a dialog ("Do you want to proceed?")' };
    const first = await gateway.services.sends.send(gateway.directory.authenticate(main.token)!, {
      kind: 'SEND',
      to: 'w',
      text: 'one',
    });
    const second = await gateway.services.sends.send(gateway.directory.authenticate(main.token)!, {
      kind: 'SEND',
      to: 'w',
      text: 'two',
    });
    await settle();
    for (let i = 0; i < 5; i++) {
      clock.increment(1_000); // the pane is looked at again each second, and still blocked
      await settle();
    }
    expect(pane.typed).toEqual([]);
    expect(pane.input).toBeUndefined();
    const rowsWhileHeld = events(`SELECT count(*) AS n FROM event_log WHERE actor_kind = 'delivery'`);
    pane.hold = undefined;
    clock.increment(1_000);
    await settle();
    await settle();
    expect(pane.typed.map((t) => t.slice(-3))).toEqual(['one', 'two']);
    expect(memory.deliveryTrail(first.msgId)).toEqual([
      'pending',
      'injecting',
      'waiting-pane',
      'pending',
      'injecting',
      'typed',
      'submitted',
      'acked',
    ]);
    expect(memory.deliveryTrail(second.msgId)).toEqual([
      'pending',
      'injecting',
      'typed',
      'submitted',
      'acked',
    ]);
    // Looking at a held pane writes nothing: after the five looks above, the log holds only
    // the first message's creation, injecting and waiting-pane, and the second's creation.
    expect(rowsWhileHeld).toEqual([{ n: 4 }]);
    const deferred = events(`SELECT data FROM event_log WHERE event = 'delivery.deferred'`);
    expect(JSON.parse((deferred[0] as { data: string }).data)).toMatchObject({ reason: 'blocked' });
  });

  it('a message whose Enter never takes is retried with Enter only, then dead-lettered as not-submitted', async () => {
    await gateway.services.registrations.register({
      kind: 'worker',
      name: 'w',
      pane: { type: 'tmux', target: '%1' },
    });
    const main = await gateway.services.registrations.register({ kind: 'main', name: 'm' });
    pane.swallowEnter = true;
    const { msgId } = await gateway.services.sends.send(gateway.directory.authenticate(main.token)!, {
      kind: 'SEND',
      to: 'w',
      text: 'stuck',
    });
    await settle();
    clock.increment(1_000);
    await settle();
    clock.increment(2_000);
    await settle();
    expect(memory.deliveryTrail(msgId)).toEqual([
      'pending',
      'injecting',
      'typed',
      'unsubmitted',
      'typed',
      'unsubmitted',
      'typed',
      'dead-lettered',
    ]);
    expect(pane.typed).toEqual([]);
    const details = events(
      `SELECT json_extract(data, '$.detail') AS detail FROM event_log WHERE event = 'delivery.notSubmitted'`,
    );
    expect(details).toEqual([
      { detail: 'Enter swallowed' },
      { detail: 'Enter swallowed' },
      { detail: 'Enter swallowed' },
    ]);
    const metrics = await gateway.metrics.registry.getSingleMetricAsString('bridge_dead_letters_total');
    expect(metrics).toContain('reason="not-submitted"} 1');
  });

  it('expires a held message after its TTL, across a restart of the gateway', async () => {
    const a = await gateway.services.registrations.register({ kind: 'main', name: 'a' });
    await gateway.services.registrations.register({ kind: 'main', name: 'b' });
    const { msgId } = await gateway.services.sends.send(gateway.directory.authenticate(a.token)!, {
      kind: 'SEND',
      to: 'b',
      text: 'stale soon',
    });
    clock.increment(30_000);
    await gateway.stop();
    gateway = await boot(); // the expiry timer is re-armed from the deadline in the log
    await settle();
    clock.increment(29_000);
    await settle();
    expect(gateway.services.status.roster().find((e) => e.name === 'b')?.depth).toBe(1);
    clock.increment(2_000);
    await settle();
    expect(gateway.services.status.roster().find((e) => e.name === 'b')?.depth).toBe(0);
    const last = events(
      `SELECT event, to_state, data FROM event_log WHERE msg_id = '${msgId}' AND actor_kind = 'delivery' ORDER BY hlc DESC LIMIT 1`,
    )[0] as { to_state: string };
    expect(last.to_state).toBe('dead-lettered');
  });

  it('counts a main’s held messages again after a restart, once each: held ones as they are, handed-over ones as they come back', async () => {
    const reminding = new MemoryGateway({
      createInjector: () => pane,
      config: (config) => ({ ...config, remind: { ...config.remind, firstMs: 10_000 } }),
    });
    try {
      let restarted = await reminding.boot();
      const a = await restarted.services.registrations.register({ kind: 'main', name: 'a' });
      const b = await restarted.services.registrations.register({ kind: 'main', name: 'b' });
      const sender = restarted.directory.authenticate(a.token)!;
      for (const text of ['one', 'two'])
        await restarted.services.sends.send(sender, { kind: 'SEND', to: 'b', text });
      await reminding.settle();
      // Handed over to a drain the gateway stops before it is confirmed: they come back held.
      const handed = await restarted.services.drains.drain(restarted.directory.authenticate(b.token)!);
      expect(handed.envelopes).toHaveLength(2);
      await restarted.services.sends.send(sender, { kind: 'SEND', to: 'b', text: 'three' });
      await reminding.settle();
      await reminding.stop();
      restarted = await reminding.boot();
      await reminding.settle();
      const nudges: number[] = [];
      restarted.onNudge((nudge) => nudges.push(nudge.waiting));
      await reminding.advance(10_000); // remind.firstMs
      expect(nudges).toEqual([3]);
    } finally {
      await reminding.close();
    }
  });

  it("a message's busy policy goes with it to the pane, and a held delivery looks at the pane with it", async () => {
    await gateway.services.registrations.register({
      kind: 'worker',
      name: 'w',
      pane: { type: 'agent', socketPath: '/nowhere/agent.sock', busy: 'steer' },
    });
    const main = await gateway.services.registrations.register({ kind: 'main', name: 'm' });
    const sender = gateway.directory.authenticate(main.token)!;
    await settle();
    pane.hold = { reason: 'busy', detail: 'in a turn' };
    await gateway.services.sends.send(sender, { kind: 'SEND', to: 'w', text: 'later', busy: 'queue' });
    await settle();
    expect(pane.tried.map((m) => m.busy)).toEqual(['queue']);
    await memory.advance(gateway.config.delivery.paneRecheckMs);
    await settle();
    expect(pane.inspected.at(-1)?.busy).toBe('queue');
    expect(pane.typed).toEqual([]);
    pane.hold = undefined;
    await memory.advance(gateway.config.delivery.paneRecheckMs);
    await settle();
    await settle();
    expect(pane.typed.map((t) => t.split('] ')[1])).toEqual(['later']);
  });

  it('does not type while the pane is busy, keeps order, and purges bodies once typed', async () => {
    await gateway.services.registrations.register({
      kind: 'worker',
      name: 'w',
      pane: { type: 'herdr', paneId: 'p1' },
    });
    const main = await gateway.services.registrations.register({ kind: 'main', name: 'm' });
    const sender = gateway.directory.authenticate(main.token)!;
    await settle();
    pane.setStatus('working');
    for (const text of ['one', 'two', 'three'])
      await gateway.services.sends.send(sender, { kind: 'SEND', to: 'w', text });
    await settle();
    expect(pane.typed).toEqual([]);
    expect(gateway.services.status.roster().find((e) => e.name === 'w')?.status).toBe('active.busy');
    pane.setStatus('idle');
    await settle();
    await settle();
    expect(pane.typed.map((t) => t.split('] ')[1])).toEqual(['one', 'two', 'three']);
    expect(events('SELECT count(*) AS n FROM messages')).toEqual([{ n: 0 }]);
    const digests = events(
      "SELECT data FROM event_log WHERE actor_kind = 'delivery' AND event = 'xstate.init'",
    ) as Array<{ data: string }>;
    for (const row of digests) {
      const data = JSON.parse(row.data) as Record<string, unknown>;
      expect(data).toMatchObject({
        digest: expect.stringMatching(/^[0-9a-f]{32}$/),
        size: expect.any(Number),
      });
      expect(JSON.stringify(data)).not.toMatch(/one|two|three/);
    }
  });

  const crashes = {
    'submitted before the crash: found in the transcript, not typed again': {
      before: (pane: RecordingPane, msgId: string) =>
        pane.typed.push(`[bridge SEND from m@h1 msg ${msgId}] hello`),
      trail: ['pending', 'injecting', 'verifying', 'submitted', 'acked'],
    },
    'typed but not submitted before the crash: found in the input, submitted once': {
      before: (pane: RecordingPane, msgId: string) => {
        pane.input = { text: `[bridge SEND from m@h1 msg ${msgId}] hello`, marker: `msg ${msgId}` };
      },
      trail: ['pending', 'injecting', 'verifying', 'typed', 'submitted', 'acked'],
    },
    'absent after the crash: typed once': {
      before: () => {},
      trail: ['pending', 'injecting', 'verifying', 'pending', 'injecting', 'typed', 'submitted', 'acked'],
    },
  } as const;
  for (const [name, crash] of Object.entries(crashes)) {
    it(`recovers a delivery interrupted mid-typing: ${name}`, async () => {
      await gateway.services.registrations.register({
        kind: 'worker',
        name: 'w',
        pane: { type: 'tmux', target: '%1' },
      });
      const main = await gateway.services.registrations.register({ kind: 'main', name: 'm' });
      pane.hanging = true;
      const { msgId } = await gateway.services.sends.send(gateway.directory.authenticate(main.token)!, {
        kind: 'SEND',
        to: 'w',
        text: 'hello',
      });
      await settle();
      // The crash: `injecting` is on disk; whether the text reached the pane is unknown.
      await gateway.stop();
      pane.hanging = false;
      crash.before(pane, msgId);
      gateway = await boot();
      await settle();
      await settle();
      expect(pane.typed.filter((t) => t.includes(msgId))).toHaveLength(1);
      expect(pane.input).toBeUndefined();
      expect(gateway.services.status.roster().find((e) => e.name === 'w')?.depth).toBe(0);
      expect(memory.deliveryTrail(msgId)).toEqual(crash.trail);
    });
  }

  it('deregistering a recipient dead-letters what it had not received', async () => {
    const main = await gateway.services.registrations.register({ kind: 'main', name: 'm' });
    await gateway.services.registrations.register({ kind: 'main', name: 'gone-soon' });
    await gateway.services.sends.send(gateway.directory.authenticate(main.token)!, {
      kind: 'SEND',
      to: 'gone-soon',
      text: 'left behind',
    });
    await gateway.services.registrations.deregister('gone-soon');
    const rows = events(
      "SELECT reason FROM (SELECT json_extract(data, '$.reason') AS reason FROM event_log WHERE event = 'delivery.deadLettered')",
    );
    expect(rows).toEqual([{ reason: 'recipient-gone' }]);
    expect(() => gateway.directory.resolve('gone-soon')).toThrow(/unknown recipient/);
  });

  it('deregistering a recipient counts and logs each dead letter, as any other dead letter is', async () => {
    const main = await gateway.services.registrations.register({ kind: 'main', name: 'm' });
    await gateway.services.registrations.register({ kind: 'main', name: 'gone-soon' });
    const sender = gateway.directory.authenticate(main.token)!;
    const sent = await gateway.services.sends.send(sender, {
      kind: 'SEND',
      to: 'gone-soon',
      text: 'left behind',
    });
    await gateway.services.registrations.deregister('gone-soon');
    await settle();
    const metrics = await gateway.metrics.registry.getSingleMetricAsString('bridge_dead_letters_total');
    expect(metrics).toContain('reason="recipient-gone"} 1');
    expect(
      logLines.filter((line) => line.msg === 'message dead-lettered; its body is kept for the operator'),
    ).toEqual([
      expect.objectContaining({
        msgId: sent.msgId,
        recipient: 'gone-soon',
        reason: 'recipient-gone',
        level: 50,
      }),
    ]);
  });

  it('an idempotency key returns the first msgId and sends nothing new', async () => {
    const main = await gateway.services.registrations.register({ kind: 'main', name: 'm' });
    await gateway.services.registrations.register({ kind: 'main', name: 'r' });
    const sender = gateway.directory.authenticate(main.token)!;
    const first = await gateway.services.sends.send(sender, {
      kind: 'SEND',
      to: 'r',
      text: 'once',
      idempotencyKey: 'k1',
    });
    const again = await gateway.services.sends.send(sender, {
      kind: 'SEND',
      to: 'r',
      text: 'once',
      idempotencyKey: 'k1',
    });
    expect(again).toMatchObject({ msgId: first.msgId, duplicate: true, traceId: first.traceId });
    expect(gateway.services.status.roster().find((e) => e.name === 'r')?.depth).toBe(1);
  });

  it('two calls at once under one key: the first is sent, the other refused (IDEMPOTENCY_CONFLICT), not both', async () => {
    const main = await gateway.services.registrations.register({ kind: 'main', name: 'm' });
    await gateway.services.registrations.register({ kind: 'main', name: 'r' });
    await gateway.services.registrations.register({ kind: 'main', name: 'q' });
    const sender = gateway.directory.authenticate(main.token)!;
    const [toR, toQ] = await Promise.allSettled([
      gateway.services.sends.send(sender, { kind: 'SEND', to: 'r', text: 'one', idempotencyKey: 'k' }),
      gateway.services.sends.send(sender, { kind: 'SEND', to: 'q', text: 'two', idempotencyKey: 'k' }),
    ]);
    expect(toR).toMatchObject({ status: 'fulfilled', value: { duplicate: false } });
    expect(toQ).toMatchObject({ status: 'rejected', reason: { code: 'IDEMPOTENCY_CONFLICT' } });
    expect(gateway.services.status.roster().find((e) => e.name === 'q')?.depth).toBe(0);
    // The same call twice at once: one send, and the retry is its duplicate.
    const [a, b] = await Promise.all([
      gateway.services.sends.send(sender, { kind: 'SEND', to: 'q', text: 'same', idempotencyKey: 'k2' }),
      gateway.services.sends.send(sender, { kind: 'SEND', to: 'q', text: 'same', idempotencyKey: 'k2' }),
    ]);
    expect([a.duplicate, b.duplicate]).toEqual([false, true]);
    expect(b.msgId).toBe(a.msgId);
    expect(gateway.services.status.roster().find((e) => e.name === 'q')?.depth).toBe(1);
  });

  describe('a long-poll drain (wait_ms)', () => {
    const mains = async () => {
      const a = await gateway.services.registrations.register({ kind: 'main', name: 'a' });
      const b = await gateway.services.registrations.register({ kind: 'main', name: 'b' });
      return { a: gateway.directory.authenticate(a.token)!, b: gateway.directory.authenticate(b.token)! };
    };
    const texts = (handover: { envelopes: Array<{ text: string }> }) => handover.envelopes.map((e) => e.text);
    /** Whether `promise` has settled, after the event loop had a turn. */
    const settled = async (promise: Promise<unknown>) => {
      let done = false;
      void promise.then(() => (done = true));
      await settle();
      return done;
    };

    it('stays parked while nothing is held and returns as soon as a message is, without the clock moving', async () => {
      const { a, b } = await mains();
      const parked = gateway.services.drains.drain(b, undefined, 60_000);
      expect(await settled(parked)).toBe(false);
      const { msgId } = await gateway.services.sends.send(a, { kind: 'SEND', to: 'b', text: 'wake up' });
      const handover = await parked;
      expect(handover.envelopes.map((e) => [e.msgId, e.text])).toEqual([[msgId, 'wake up']]);
      handover.confirm();
      await settle();
      expect(gateway.services.status.roster().find((e) => e.name === 'b')?.depth).toBe(0);
    });

    it('returns no messages once its wait is over, and never waits past limits.maxWaitMs', async () => {
      const { b } = await mains();
      const parked = gateway.services.drains.drain(b, undefined, 5_000);
      clock.increment(4_999);
      expect(await settled(parked)).toBe(false);
      clock.increment(1);
      expect((await parked).envelopes).toEqual([]);
      // Asked for more than the cap (600,000 ms by default): it returns at the cap.
      const capped = gateway.services.drains.drain(b, undefined, 10_000_000);
      clock.increment(600_000);
      expect((await capped).envelopes).toEqual([]);
    });

    it('a drain whose caller hung up (its signal aborted) takes nothing: the message waits for the next drain', async () => {
      const { a, b } = await mains();
      const hangUp = new AbortController();
      const parked = gateway.services.drains.drain(b, undefined, 60_000, hangUp.signal);
      expect(await settled(parked)).toBe(false);
      hangUp.abort();
      expect((await parked).envelopes).toEqual([]);
      const { msgId } = await gateway.services.sends.send(a, {
        kind: 'SEND',
        to: 'b',
        text: 'for the next drain',
      });
      await settle();
      const next = await gateway.services.drains.drain(b);
      expect(next.envelopes.map((e) => e.msgId)).toEqual([msgId]);
      next.confirm();
    });

    it('two drains parked on one entity: each message goes to one of them, once, and the other parks on', async () => {
      const { a, b } = await mains();
      const drains = [
        gateway.services.drains.drain(b, undefined, 60_000),
        gateway.services.drains.drain(b, undefined, 60_000),
      ];
      await gateway.services.sends.send(a, { kind: 'SEND', to: 'b', text: 'one' });
      const [index, winner] = await Promise.race(drains.map((d, i) => d.then((h) => [i, h] as const)));
      expect(texts(winner)).toEqual(['one']);
      winner.confirm();
      const other = drains[1 - index]!;
      expect(await settled(other)).toBe(false);
      await gateway.services.sends.send(a, { kind: 'SEND', to: 'b', text: 'two' });
      const late = await other;
      expect(texts(late)).toEqual(['two']);
      late.confirm();
    });

    it('a message already held returns at once; an open send still takes its reply before a parked drain sees it', async () => {
      const { a, b } = await mains();
      await gateway.services.sends.send(a, { kind: 'SEND', to: 'b', text: 'already here' });
      await settle();
      const now = await gateway.services.drains.drain(b, undefined, 60_000);
      expect(texts(now)).toEqual(['already here']);
      now.confirm();
      // a waits for b's answer with an open send while a's own drain is parked too.
      const parked = gateway.services.drains.drain(a, undefined, 60_000);
      const open = gateway.services.sends.send(a, {
        kind: 'SEND',
        to: 'b',
        text: 'question',
        waitMs: 60_000,
      });
      await settle();
      await gateway.services.sends.send(b, { kind: 'SEND', to: 'a', text: 'answer' });
      expect((await open).reply?.text).toBe('answer');
      expect(await settled(parked)).toBe(false);
      await gateway.services.sends.send(b, { kind: 'SEND', to: 'a', text: 'for the drain' });
      const drained = await parked;
      expect(texts(drained)).toEqual(['for the drain']);
      drained.confirm();
    });

    it('a gateway stopping ends a parked drain, with nothing taken', async () => {
      const { b } = await mains();
      const parked = gateway.services.drains.drain(b, undefined, 60_000);
      expect(await settled(parked)).toBe(false);
      await gateway.stop();
      expect((await parked).envelopes).toEqual([]);
      gateway = await boot();
    });

    it('a call that waits parks against the limits: one past limits.maxParkedPerEntity is refused, retryable', async () => {
      const { a } = await mains();
      const { maxParkedPerEntity } = gateway.config.limits;
      const parked = Array.from({ length: maxParkedPerEntity }, () =>
        gateway.services.drains.drain(a, undefined, 60_000),
      );
      await expect(gateway.services.drains.drain(a, undefined, 60_000)).rejects.toMatchObject({
        code: ErrorCode.tooManyParked,
        retryable: true,
      });
      // A call that does not wait does not park.
      expect((await gateway.services.drains.drain(a)).envelopes).toEqual([]);
      await gateway.stop();
      await Promise.all(parked);
      gateway = await boot();
    });
  });

  it('a gateway that is stopping refuses every call that acts (retryable), and one not started refuses all', async () => {
    const main = await gateway.services.registrations.register({ kind: 'main', name: 'm' });
    const sender = gateway.directory.authenticate(main.token)!;
    const { services } = gateway;
    await gateway.stop();
    const shuttingDown = { code: ErrorCode.shuttingDown, retryable: true };
    await expect(services.registrations.register({ kind: 'main', name: 'late' })).rejects.toMatchObject(
      shuttingDown,
    );
    await expect(services.sends.send(sender, { kind: 'SEND', to: 'm', text: 'late' })).rejects.toMatchObject(
      shuttingDown,
    );
    await expect(services.asks.ask(sender, { to: 'm', question: 'late?' })).rejects.toMatchObject(
      shuttingDown,
    );
    await expect(services.drains.drain(sender)).rejects.toMatchObject(shuttingDown);
    await expect(services.router.broadcast(sender, { group: 'all', text: 'late' })).rejects.toMatchObject(
      shuttingDown,
    );
    await expect(
      services.spawnRequests.spawn(sender, { host: 'h1', profile: 'p', brief: 'late' }),
    ).rejects.toMatchObject(shuttingDown);
    await expect(services.messageStatus(sender, 'no-such-message')).rejects.toMatchObject(shuttingDown);
    await expect(services.registrations.deregister('m')).rejects.toMatchObject(shuttingDown);
    // Reads go on while it stops.
    expect(services.status.roster().map((e) => e.name)).toContain('m');

    const unstarted = new Gateway({
      config: gateway.config,
      logger: gateway.logger,
      createInjector: () => pane,
      eventLog: memory.store,
    });
    expect(() => unstarted.services).toThrow(
      expect.objectContaining({ code: ErrorCode.notAvailable, retryable: true }),
    );
    gateway = await boot();
  });
});
