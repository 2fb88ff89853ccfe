import { describe, expect, it } from 'vitest';
import { initialTransition, transition } from 'xstate';
import { receiptForTransition } from '../../src/deliver/receiptForTransition.js';
import type { Transition } from '../../src/kernel/ActorCell.js';
import { stateName } from '../../src/kernel/stateName.js';
import {
  type DeliveryContext,
  type DeliveryEvent,
  type DeliveryInput,
  deliveryMachine,
} from '../../src/machines/deliveryMachine.js';
import type { Receipt } from '../../src/wire/receipt.js';

const msgId = '0193a4b2-0000-7000-8000-000000000001';
const recipient = '6f1c3a52-4b7e-4d2a-9c1e-2f3b4a5c6d7e';
const at = 1_765_000_000_000;

const input = (overrides: Partial<DeliveryInput> = {}): DeliveryInput => ({
  msgId,
  traceId: 'trace-1',
  recipient,
  sender: '0b6f1c1e-1111-4222-8333-444455556666',
  mode: 'hold',
  acceptedAt: at - 1_000,
  deadline: at + 60_000,
  maxAttempts: 3,
  retryBaseMs: 100,
  digest: 'sha256:abc',
  size: 5,
  kind: 'SEND',
  ...overrides,
});

/**
 * Drives the real delivery machine through `events` (XState's pure transition) and returns the
 * receipt of its creation and of each transition, as the entity actor reports them.
 */
function receiptsOf(deliveryInput: DeliveryInput, events: DeliveryEvent[]): Receipt[] {
  let [snapshot] = initialTransition(deliveryMachine, deliveryInput);
  const out: Receipt[] = [];
  const created: Transition = { event: 'xstate.init', from: null, to: 'pending', done: false, data: null };
  const first = receiptForTransition(created, snapshot.context as DeliveryContext, at);
  if (first) out.push(first);
  for (const event of events) {
    const from = stateName(snapshot.value);
    [snapshot] = transition(deliveryMachine, snapshot, event);
    const { type, ...data } = event;
    const t: Transition = {
      event: type,
      from,
      to: stateName(snapshot.value),
      done: snapshot.status === 'done',
      data: Object.keys(data).length > 0 ? data : null,
    };
    const receipt = receiptForTransition(t, snapshot.context as DeliveryContext, at);
    if (receipt) out.push(receipt);
  }
  return out;
}

const base = { msgId, recipient, at };

describe('receiptForTransition: what each delivery transition tells the sender (R-RC1)', () => {
  it('a held message drained by a main: queued, then handed-over once the drain is acked', () => {
    expect(
      receiptsOf(input(), [
        { type: 'delivery.hold' },
        { type: 'delivery.handedOver', via: 'drain' },
        { type: 'delivery.acked', via: 'drain' },
      ]),
    ).toEqual([
      { ...base, stage: 'queued' },
      { ...base, stage: 'handed-over' },
    ]);
  });

  it('a drain whose answer never got out is no receipt; the later hand-over is', () => {
    expect(
      receiptsOf(input(), [
        { type: 'delivery.hold' },
        { type: 'delivery.handedOver', via: 'drain' },
        { type: 'delivery.returned' },
        { type: 'delivery.handedOver', via: 'open-send' },
        { type: 'delivery.acked', via: 'open-send' },
      ]).map((r) => r.stage),
    ).toEqual(['queued', 'handed-over']);
  });

  it('typed into a pane, submitted (verified) and acked: queued, typed, submitted; the ack adds nothing', () => {
    expect(
      receiptsOf(input({ mode: 'inject' }), [
        { type: 'delivery.inject' },
        { type: 'delivery.typed' },
        { type: 'delivery.submitted', how: 'its input took it' },
        { type: 'delivery.acked', via: 'pane' },
      ]).map((r) => r.stage),
    ).toEqual(['queued', 'typed', 'submitted']);
  });

  it('a pane that held it (a dialog), then took it: typed and submitted only once it could', () => {
    expect(
      receiptsOf(input({ mode: 'inject' }), [
        { type: 'delivery.inject' },
        { type: 'delivery.deferred', reason: 'blocked', detail: 'a dialog' },
        { type: 'delivery.paneReady' },
        { type: 'delivery.inject' },
        { type: 'delivery.typed' },
        { type: 'delivery.notSubmitted', detail: 'Enter did not take' },
        { type: 'xstate.after.retryDelay.delivery.unsubmitted' } as unknown as DeliveryEvent,
        { type: 'delivery.submitted' },
        { type: 'delivery.acked', via: 'pane' },
      ]).map((r) => r.stage),
    ).toEqual(['queued', 'typed', 'typed', 'submitted']);
  });

  it('typed into a pane (here: found submitted after a restart) and acked: submitted', () => {
    expect(
      receiptsOf(input({ mode: 'inject' }), [
        { type: 'delivery.inject' },
        { type: 'actor.rehydrated' },
        { type: 'delivery.located', where: 'submitted' },
        { type: 'delivery.acked', via: 'pane' },
      ]).map((r) => r.stage),
    ).toEqual(['queued', 'submitted']);
  });

  it('a log of a gateway before verified submission (typed with Enter, found after a restart): submitted', () => {
    expect(
      receiptsOf(input({ mode: 'inject' }), [
        { type: 'delivery.inject' },
        { type: 'actor.rehydrated' },
        { type: 'delivery.found' },
        { type: 'delivery.acked', via: 'pane' },
      ]).map((r) => r.stage),
    ).toEqual(['queued', 'submitted']);
  });

  it('an answer handed to the parked ask: handed-over', () => {
    expect(
      receiptsOf(input({ kind: 'ANSWER', turnId: '0193a4b2-0000-7000-8000-0000000000aa' }), [
        { type: 'delivery.hold' },
        { type: 'delivery.handedOver', via: 'ask' },
        { type: 'delivery.acked', via: 'ask' },
      ]).map((r) => r.stage),
    ).toEqual(['queued', 'handed-over']);
  });

  it('an answer whose turn is over: too-late, with why', () => {
    expect(
      receiptsOf(input({ kind: 'ANSWER', turnId: '0193a4b2-0000-7000-8000-0000000000aa' }), [
        { type: 'delivery.tooLate', turnId: '0193a4b2-0000-7000-8000-0000000000aa', why: 'the ask expired' },
      ]),
    ).toEqual([
      { ...base, stage: 'queued' },
      { ...base, stage: 'too-late', detail: 'the ask expired' },
    ]);
  });

  it('a dead letter carries its reason and the last error', () => {
    expect(
      receiptsOf(input(), [
        { type: 'delivery.hold' },
        { type: 'delivery.deadLettered', reason: 'recipient-gone', detail: 'the entity was deregistered' },
      ]),
    ).toEqual([
      { ...base, stage: 'queued' },
      { ...base, stage: 'dead-lettered', reason: 'recipient-gone', detail: 'the entity was deregistered' },
    ]);
  });

  it('a pane that keeps failing: dead-lettered delivery-limit with the pane error', () => {
    const failed: DeliveryEvent = { type: 'delivery.injectFailed', error: 'tmux: no such pane %9' };
    const receipts = receiptsOf(input({ mode: 'inject', maxAttempts: 1 }), [
      { type: 'delivery.inject' },
      failed,
    ]);
    expect(receipts.at(-1)).toEqual({
      ...base,
      stage: 'dead-lettered',
      reason: 'delivery-limit',
      detail: 'tmux: no such pane %9',
    });
  });

  it('an expired held message: dead-lettered expired, no detail', () => {
    const expired = {
      event: 'xstate.after.untilDeadline.delivery.held',
      from: 'held',
      to: 'dead-lettered',
      done: true,
      data: null,
    };
    const context = { ...input(), attempts: 0, lastError: null, reason: 'expired' } as DeliveryContext;
    expect(receiptForTransition(expired, context, at)).toEqual({
      ...base,
      stage: 'dead-lettered',
      reason: 'expired',
    });
  });

  it('intermediate and re-entered states report nothing', () => {
    const context = { ...input(), attempts: 0, lastError: null, reason: null } as DeliveryContext;
    for (const [from, to] of [
      ['pending', 'held'],
      ['held', 'handed-over'],
      ['handed-over', 'held'],
      ['pending', 'injecting'],
      ['injecting', 'waiting-pane'],
      ['waiting-pane', 'pending'],
      ['typed', 'unsubmitted'],
      ['injecting', 'verifying'],
      ['held', 'held'],
    ] as const) {
      const t: Transition = { event: 'x', from, to, done: false, data: null };
      expect(receiptForTransition(t, context, at), `${from} → ${to}`).toBeUndefined();
    }
  });

  it('a broadcast copy reports nothing, not even queued', () => {
    expect(
      receiptsOf(input({ kind: 'BROADCAST' }), [
        { type: 'delivery.hold' },
        { type: 'delivery.handedOver', via: 'drain' },
        { type: 'delivery.acked', via: 'drain' },
      ]),
    ).toEqual([]);
  });
});
