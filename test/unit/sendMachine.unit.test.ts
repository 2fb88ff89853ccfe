import { describe, expect, it } from 'vitest';
import { type ExecutableActionsFrom, initialTransition, type SnapshotFrom, transition } from 'xstate';
import {
  type SendEvent,
  type SendInput,
  sendMachine,
  unconfirmedSendStates,
} from '../../src/machines/sendMachine.js';
import { type ReceiptStage, receiptStages } from '../../src/wire/receipt.js';
import {
  allStateIds,
  createMachineCoverage,
  unreachedStateIds,
  unsampledEventTypes,
} from '../support/machineCoverage.js';

type Snapshot = SnapshotFrom<typeof sendMachine>;
type Actions = ExecutableActionsFrom<typeof sendMachine>[];

const input: SendInput = {
  msgId: 'msg-7',
  traceId: 'trace-7',
  kind: 'message',
  sender: 'main-gid',
  recipient: 'worker-gid',
  digest: 'sha256:def',
  size: 42,
};

// Every step records the (state, transition) pair it took; the last test compares that with the
// graph (test/support/machineCoverage.ts).
const coverage = createMachineCoverage(sendMachine);
const step = (snapshot: Snapshot, event: SendEvent): [Snapshot, Actions] => coverage.step(snapshot, event);

const routedLocal: SendEvent = { type: 'send.routedLocal' };
const published: SendEvent = { type: 'send.published' };
const confirmed: SendEvent = { type: 'send.confirmed' };
const failed = (code = 'UNKNOWN_RECIPIENT', detail?: string): SendEvent =>
  detail === undefined ? { type: 'send.failed', code } : { type: 'send.failed', code, detail };
const rehydrated: SendEvent = { type: 'actor.rehydrated' };
const receipt = (stage: ReceiptStage, extra: { reason?: string; detail?: string; recipient?: string } = {}) =>
  ({ type: 'send.receipt', stage, recipient: input.recipient, at: 1_000, ...extra }) as SendEvent;
const receipts: SendEvent[] = receiptStages.map((stage) => receipt(stage));
const sampleEvents: SendEvent[] = [
  routedLocal,
  published,
  confirmed,
  failed('X', 'y'),
  rehydrated,
  ...receipts,
];

const accepted = (): Snapshot => initialTransition(sendMachine, input)[0];
const publishedState = (): Snapshot => step(accepted(), published)[0];
const failedState = (): Snapshot => step(accepted(), failed('BROKER_UNAVAILABLE', 'broker unreachable'))[0];

describe('sendMachine: initial state', () => {
  it('starts accepted with the input as context and no failure', () => {
    const [snapshot, actions] = initialTransition(sendMachine, input);
    expect(snapshot.value).toBe('accepted');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context).toEqual({ ...input, failure: null, stages: [] });
    expect(actions).toEqual([]);
  });
});

describe('sendMachine: accepted', () => {
  it('send.routedLocal → routed-local (not final: receipts follow)', () => {
    const [snapshot, actions] = step(accepted(), routedLocal);
    expect(snapshot.value).toBe('routed-local');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context.failure).toBeNull();
    expect(actions).toEqual([]);
  });

  it('send.published → published', () => {
    const [snapshot, actions] = step(accepted(), published);
    expect(snapshot.value).toBe('published');
    expect(snapshot.status).toBe('active');
    expect(actions).toEqual([]);
  });

  it('send.failed → failed (not final: it can be retried), recording "code: detail"', () => {
    const [snapshot, actions] = step(accepted(), failed('UNKNOWN_RECIPIENT', 'no inbox for worker-gid'));
    expect(snapshot.value).toBe('failed');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context.failure).toBe('UNKNOWN_RECIPIENT: no inbox for worker-gid');
    // assign actions are applied by the transition itself, not handed back to run.
    expect(actions).toEqual([]);
  });

  // Regression (was a bug in src/machines/sendMachine.ts, recordFailure): `${code}: ${detail ?? ''}`.trim() trims
  // the space but keeps the separator, so the failure reads "TEXT_TOO_LARGE:".
  it('send.failed without a detail records the code alone', () => {
    const [snapshot] = transition(sendMachine, accepted(), failed('TEXT_TOO_LARGE'));
    expect(snapshot.context.failure).toBe('TEXT_TOO_LARGE');
  });

  it.each([confirmed, rehydrated, receipt('queued')])('ignores $type', (event) => {
    const before = accepted();
    const [after, actions] = transition(sendMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('sendMachine: published', () => {
  it('send.confirmed → confirmed (not final: receipts follow)', () => {
    const [snapshot, actions] = step(publishedState(), confirmed);
    expect(snapshot.value).toBe('confirmed');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context.failure).toBeNull();
    expect(actions).toEqual([]);
  });

  it('send.failed → failed, recording the failure', () => {
    const [snapshot, actions] = step(publishedState(), failed('BROKER_UNAVAILABLE', 'nacked'));
    expect(snapshot.value).toBe('failed');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context.failure).toBe('BROKER_UNAVAILABLE: nacked');
    expect(actions).toEqual([]);
  });

  it.each([routedLocal, published, rehydrated])('ignores $type', (event) => {
    const before = publishedState();
    const [after, actions] = transition(sendMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('sendMachine: failed', () => {
  it('send.published → published again (a retry under the same msgId), clearing the failure', () => {
    const before = failedState();
    expect(before.context.failure).toBe('BROKER_UNAVAILABLE: broker unreachable');
    const [snapshot, actions] = step(before, published);
    expect(snapshot.value).toBe('published');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context).toEqual({ ...input, failure: null, stages: [] });
    expect(actions).toEqual([]);
  });

  it('a send that failed after publishing can be retried and then confirmed', () => {
    let snapshot = publishedState();
    [snapshot] = step(snapshot, failed('INBOX_FULL', 'nacked'));
    expect(snapshot.value).toBe('failed');
    expect(snapshot.context.failure).toBe('INBOX_FULL: nacked');
    [snapshot] = step(snapshot, published);
    expect(snapshot.value).toBe('published');
    expect(snapshot.context.failure).toBeNull();
    [snapshot] = step(snapshot, confirmed);
    expect(snapshot.value).toBe('confirmed');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context).toEqual({ ...input, failure: null, stages: [] });
  });

  it('retries as often as asked; each failure replaces the previous one, the msgId never changes', () => {
    let snapshot = accepted();
    for (const code of ['BROKER_UNAVAILABLE', 'INBOX_FULL', 'BROKER_UNAVAILABLE']) {
      [snapshot] = step(snapshot, failed(code));
      expect(snapshot.value).toBe('failed');
      expect(snapshot.context.failure).toBe(code);
      [snapshot] = step(snapshot, published);
      expect(snapshot.value).toBe('published');
      expect(snapshot.context.failure).toBeNull();
    }
    expect(snapshot.context.msgId).toBe(input.msgId);
    expect(snapshot.context.traceId).toBe(input.traceId);
  });

  it.each([routedLocal, confirmed, failed('OTHER', 'again'), rehydrated])('ignores $type', (event) => {
    const before = failedState();
    const [after, actions] = transition(sendMachine, before, event);
    expect(after).toBe(before);
    expect(after.context.failure).toBe('BROKER_UNAVAILABLE: broker unreachable');
    expect(actions).toEqual([]);
  });
});

const routedLocalState = (): Snapshot => step(accepted(), routedLocal)[0];
const confirmedState = (): Snapshot => step(publishedState(), confirmed)[0];
const reached =
  (start: () => Snapshot, ...stages: ReceiptStage[]) =>
  (): Snapshot => {
    let snapshot = start();
    for (const stage of stages) [snapshot] = step(snapshot, receipt(stage));
    return snapshot;
  };
/** Where a send waits for receipts, and the stages each takes (the later ones, all to their state). */
const receiving: Record<string, { state: () => Snapshot; takes: ReceiptStage[] }> = {
  published: { state: publishedState, takes: [] },
  failed: { state: failedState, takes: [...receiptStages] },
  'routed-local': { state: routedLocalState, takes: [...receiptStages] },
  confirmed: { state: confirmedState, takes: [...receiptStages] },
  queued: {
    state: reached(confirmedState, 'queued'),
    takes: ['typed', 'submitted', 'handed-over', 'dead-lettered', 'too-late'],
  },
  typed: {
    state: reached(confirmedState, 'queued', 'typed'),
    takes: ['submitted', 'handed-over', 'dead-lettered', 'too-late'],
  },
};
const finalStages: ReceiptStage[] = ['submitted', 'handed-over', 'dead-lettered', 'too-late'];

describe('sendMachine: receipts (R-RC1)', () => {
  const cases = Object.entries(receiving).flatMap(([state, { takes }]) =>
    takes.map((stage) => [state, stage] as const),
  );

  it.each(cases)('%s: send.receipt %s → that stage, recorded in the context', (state, stage) => {
    const before = (receiving[state] as (typeof receiving)[string]).state();
    expect(before.value).toBe(state);
    const [snapshot, actions] = step(before, receipt(stage));
    expect(snapshot.value).toBe(stage);
    expect(snapshot.status).toBe(finalStages.includes(stage) ? 'done' : 'active');
    expect(snapshot.context.stages.at(-1)).toEqual({ stage, at: 1_000 });
    expect(snapshot.context.stages).toHaveLength(before.context.stages.length + 1);
    expect(actions).toEqual([]);
  });

  it.each(
    Object.entries(receiving).flatMap(([state, { takes }]) =>
      receiptStages.filter((stage) => !takes.includes(stage)).map((stage) => [state, stage] as const),
    ),
  )(
    '%s: a send.receipt %s it does not take (stale, repeated, or still in flight) changes nothing',
    (state, stage) => {
      const before = (receiving[state] as (typeof receiving)[string]).state();
      const [afterward, actions] = transition(sendMachine, before, receipt(stage));
      expect(afterward).toBe(before);
      expect(actions).toEqual([]);
    },
  );

  it.each(Object.keys(receiving))('%s: a receipt for another recipient changes nothing', (state) => {
    const before = (receiving[state] as (typeof receiving)[string]).state();
    const [afterward] = transition(sendMachine, before, receipt('submitted', { recipient: 'someone-else' }));
    expect(afterward).toBe(before);
  });

  it.each(['routed-local', 'confirmed', 'queued', 'typed'])(
    '%s ignores every event but a later receipt',
    (state) => {
      const before = (receiving[state] as (typeof receiving)[string]).state();
      for (const event of [routedLocal, published, confirmed, failed('X', 'y'), rehydrated]) {
        const [afterward, actions] = transition(sendMachine, before, event);
        expect(afterward, event.type).toBe(before);
        expect(actions, event.type).toEqual([]);
      }
    },
  );

  it('a dead letter keeps its reason and detail; every stage is listed in order', () => {
    let snapshot = confirmedState();
    [snapshot] = step(snapshot, receipt('queued'));
    [snapshot] = step(snapshot, {
      ...receipt('dead-lettered'),
      reason: 'expired',
      detail: 'held 24 h',
    } as SendEvent);
    expect(snapshot.value).toBe('dead-lettered');
    expect(snapshot.context.stages).toEqual([
      { stage: 'queued', at: 1_000 },
      { stage: 'dead-lettered', at: 1_000, reason: 'expired', detail: 'held 24 h' },
    ]);
  });

  it('a failed publish that got through after all takes its receipts; a retry of it is then no transition', () => {
    let snapshot = failedState();
    [snapshot] = step(snapshot, receipt('queued'));
    expect(snapshot.value).toBe('queued');
    expect(snapshot.context.failure).toBe('BROKER_UNAVAILABLE: broker unreachable');
    const [later] = transition(sendMachine, snapshot, published);
    expect(later).toBe(snapshot);
  });

  it('only accepted, published and failed count as never confirmed (a keyed retry republishes those)', () => {
    expect(unconfirmedSendStates).toEqual(['accepted', 'published', 'failed']);
  });
});

describe('sendMachine: final states ignore every event', () => {
  const finals = {
    submitted: reached(confirmedState, 'submitted'),
    'handed-over': reached(routedLocalState, 'queued', 'handed-over'),
    'dead-lettered': reached(confirmedState, 'queued', 'typed', 'dead-lettered'),
    'too-late': reached(routedLocalState, 'too-late'),
  };

  it.each(Object.keys(finals) as Array<keyof typeof finals>)('%s', (state) => {
    const before = finals[state]();
    expect(before.value).toBe(state);
    expect(before.status).toBe('done');
    for (const event of sampleEvents) {
      const [after, actions] = transition(sendMachine, before, event);
      expect(after, event.type).toBe(before);
      expect(actions, event.type).toEqual([]);
    }
  });
});

describe('sendMachine: graph', () => {
  it('the sample events name every event the machine declares a transition for', () => {
    expect(unsampledEventTypes(sendMachine, sampleEvents)).toEqual([]);
  });

  it('every state node is reachable from the initial state', () => {
    expect(allStateIds(sendMachine)).toEqual([
      'send.accepted',
      'send.confirmed',
      'send.dead-lettered',
      'send.failed',
      'send.handed-over',
      'send.published',
      'send.queued',
      'send.routed-local',
      'send.submitted',
      'send.too-late',
      'send.typed',
    ]);
    // Bounded: a send records each stage, so a machine that took a stage twice (a receipt that
    // moved it back) would make every snapshot new and the traversal endless.
    const stopWhen = (snapshot: Snapshot) => snapshot.context.stages.length > receiptStages.length;
    expect(unreachedStateIds(sendMachine, { input, events: sampleEvents, stopWhen })).toEqual([]);
  });

  it('only the final stages are final: routed-local and confirmed wait for receipts', () => {
    const finals = allStateIds(sendMachine).filter((id) => sendMachine.getStateNodeById(id).type === 'final');
    expect(finals).toEqual(['send.dead-lettered', 'send.handed-over', 'send.submitted', 'send.too-late']);
  });

  // Must stay last: it checks what the tests above exercised.
  it('every declared (state, transition) pair is exercised by a test above', () => {
    // 6 without receipts; receipts: 6 stages in failed, routed-local and confirmed, 5 in queued,
    // 4 in typed.
    expect(coverage.declaredCount()).toBe(6 + 3 * 6 + 5 + 4);
    expect(coverage.uncovered()).toEqual([]);
    expect(coverage.undeclared()).toEqual([]);
  });
});
