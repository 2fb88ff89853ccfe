import { describe, expect, it } from 'vitest';
import { type ExecutableActionsFrom, initialTransition, type SnapshotFrom, transition } from 'xstate';
import { type SendEvent, type SendInput, sendMachine } from '../../src/machines/sendMachine.js';
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
const sampleEvents: SendEvent[] = [routedLocal, published, confirmed, failed('X', 'y'), rehydrated];

const accepted = (): Snapshot => initialTransition(sendMachine, input)[0];
const publishedState = (): Snapshot => step(accepted(), published)[0];
const failedState = (): Snapshot => step(accepted(), failed('BROKER_UNAVAILABLE', 'broker unreachable'))[0];

describe('sendMachine: initial state', () => {
  it('starts accepted with the input as context and no failure', () => {
    const [snapshot, actions] = initialTransition(sendMachine, input);
    expect(snapshot.value).toBe('accepted');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context).toEqual({ ...input, failure: null });
    expect(actions).toEqual([]);
  });
});

describe('sendMachine: accepted', () => {
  it('send.routedLocal → routed-local (final)', () => {
    const [snapshot, actions] = step(accepted(), routedLocal);
    expect(snapshot.value).toBe('routed-local');
    expect(snapshot.status).toBe('done');
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

  it.each([confirmed, rehydrated])('ignores $type', (event) => {
    const before = accepted();
    const [after, actions] = transition(sendMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('sendMachine: published', () => {
  it('send.confirmed → confirmed (final)', () => {
    const [snapshot, actions] = step(publishedState(), confirmed);
    expect(snapshot.value).toBe('confirmed');
    expect(snapshot.status).toBe('done');
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
    expect(snapshot.context).toEqual({ ...input, failure: null });
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
    expect(snapshot.status).toBe('done');
    expect(snapshot.context).toEqual({ ...input, failure: null });
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

describe('sendMachine: final states ignore every event', () => {
  const finals = {
    'routed-local': () => step(accepted(), routedLocal)[0],
    confirmed: () => step(publishedState(), confirmed)[0],
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
      'send.failed',
      'send.published',
      'send.routed-local',
    ]);
    expect(unreachedStateIds(sendMachine, { input, events: sampleEvents })).toEqual([]);
  });

  it('only routed-local and confirmed are final', () => {
    const finals = allStateIds(sendMachine).filter((id) => sendMachine.getStateNodeById(id).type === 'final');
    expect(finals).toEqual(['send.confirmed', 'send.routed-local']);
  });

  // Must stay last: it checks what the tests above exercised.
  it('every declared (state, transition) pair is exercised by a test above', () => {
    expect(coverage.declaredCount()).toBe(6);
    expect(coverage.uncovered()).toEqual([]);
    expect(coverage.undeclared()).toEqual([]);
  });
});
