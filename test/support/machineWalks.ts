import type { AnyStateMachine, EventFromLogic, InputFrom, SnapshotFrom } from 'xstate';
import type { ActorKind, MachineOf } from '../../src/machines/index.js';
import { receiptStages } from '../../src/wire/receipt.js';
import { graphEdges } from './machineCoverage.js';
import { sampleDeliveryInput, sampleTurnInput } from './sampleInputs.js';

/**
 * Walks through every registered machine, for tests that check something on all of them: the
 * pureTransition fork against XState, the recorded-event schemas against what the machines take.
 */

export interface Walk<M extends AnyStateMachine> {
  input: InputFrom<M>;
  /** One of every event the machine takes, with the payloads its guards tell apart. */
  events: EventFromLogic<M>[];
  /** Where to stop exploring a context that grows without bound (a counter). */
  stopWhen?: (snapshot: SnapshotFrom<M>) => boolean;
}

const deliveryInput: InputFrom<MachineOf<'delivery'>> = {
  ...sampleDeliveryInput,
  kind: 'ANSWER',
  turnId: 'turn-1',
};

export const walks: { [K in ActorKind]: Walk<MachineOf<K>>[] } = {
  entity: [
    {
      input: { gid: 'gid-1', name: 'worker-1', kind: 'worker', host: 'host-a', groups: [], mode: 'inject' },
      events: [
        { type: 'entity.activated' },
        { type: 'entity.busy', status: 'working' },
        { type: 'entity.ownerAnswered', request: 1, decision: 'allow', by: 'ana (console)' },
        { type: 'entity.idle' },
        { type: 'entity.deregistered' },
        { type: 'actor.rehydrated' },
      ],
    },
  ],
  delivery: (['inject', 'hold'] as const).map((mode) => ({
    input: { ...deliveryInput, mode },
    events: [
      { type: 'delivery.inject' },
      { type: 'delivery.hold' },
      { type: 'delivery.typed' },
      { type: 'delivery.submitted', how: 'enter' },
      { type: 'delivery.notSubmitted', detail: 'still in the input' },
      { type: 'delivery.deferred', reason: 'dialog', detail: 'a dialog is open' },
      { type: 'delivery.paneReady' },
      { type: 'delivery.injectFailed', error: 'pane gone' },
      { type: 'delivery.located', where: 'absent' },
      { type: 'delivery.located', where: 'typed' },
      { type: 'delivery.located', where: 'submitted' },
      { type: 'delivery.injected' },
      { type: 'delivery.found' },
      { type: 'delivery.absent' },
      { type: 'delivery.handedOver', via: 'drain' },
      { type: 'delivery.returned' },
      { type: 'delivery.acked', via: 'pane' },
      { type: 'delivery.tooLate', turnId: 'turn-1', why: 'expired' },
      { type: 'delivery.deadLettered', reason: 'rejected', detail: 'refused' },
      { type: 'actor.rehydrated' },
    ],
  })),
  send: [
    {
      input: {
        msgId: 'msg-1',
        traceId: 'trace-1',
        kind: 'SEND',
        sender: 'main-gid',
        recipient: 'worker-gid',
        digest: 'sha256:def',
        size: 42,
      },
      events: [
        { type: 'send.routedLocal' },
        { type: 'send.published' },
        { type: 'send.confirmed' },
        { type: 'send.failed', code: 'BROKER_UNAVAILABLE', detail: 'unreachable' },
        { type: 'actor.rehydrated' },
        ...receiptStages.map((stage) => ({
          type: 'send.receipt' as const,
          stage,
          recipient: 'worker-gid',
          at: 2_000,
        })),
        // Another recipient's receipt: no transition.
        { type: 'send.receipt', stage: 'queued', recipient: 'other-gid', at: 2_000 },
      ],
      // Each stage taken is recorded: a send that took one twice would walk on without end.
      stopWhen: (snapshot) => snapshot.context.stages.length > receiptStages.length,
    },
  ],
  broker: [
    {
      input: { hostId: 'host-a', retryBaseMs: 100, retryMaxMs: 1_000 },
      events: [
        { type: 'broker.connect' },
        { type: 'broker.connected' },
        { type: 'broker.lost', error: 'ECONNRESET' },
        { type: 'broker.blocked', reason: 'low on memory' },
        { type: 'broker.unblocked' },
        { type: 'broker.stop' },
      ],
      stopWhen: (snapshot) => snapshot.context.attempts > 2,
    },
  ],
  turn: [
    {
      input: sampleTurnInput,
      events: [
        { type: 'turn.answered', answerMsgId: 'msg-answer-1' },
        { type: 'turn.abandoned', why: 'caller gone' },
        { type: 'actor.rehydrated' },
      ],
    },
  ],
  remind: [
    {
      input: { entity: 'main-gid', firstMs: 1_000, maxMs: 8_000 },
      events: [
        { type: 'remind.held', at: 10_000, count: 2, firstMs: 2_000 },
        { type: 'remind.nudged', at: 11_000 },
        { type: 'remind.drained', at: 12_000 },
        { type: 'remind.ended' },
        { type: 'actor.rehydrated' },
      ],
      stopWhen: (snapshot) => snapshot.context.nudges > 2,
    },
  ],
  spawn: [
    {
      input: {
        requestId: 'req-1',
        traceId: 'trace-1',
        msgId: 'msg-spawn-1',
        requester: { gid: 'main-gid', name: 'main', host: 'host-a', kind: 'main' },
        profile: 'worker',
        groups: ['team'],
        digest: 'sha256:brief',
        size: 128,
      },
      events: [
        { type: 'spawn.launching', gid: 'gid-2', name: 'helper' },
        { type: 'spawn.launched', pane: { type: 'tmux', target: '%3' } },
        { type: 'spawn.launchFailed', code: 'LAUNCH_FAILED', message: 'no such profile binary' },
        { type: 'spawn.refused', code: 'UNKNOWN_PROFILE', message: 'no profile named worker' },
        { type: 'spawn.answered' },
        { type: 'spawn.ownerAnswering', requestId: 'answer-1', by: 'main@host-a' },
        { type: 'spawn.ownerAnswered', requestId: 'answer-1', request: 1, decision: 'allow' },
        {
          type: 'spawn.ownerAnswerFailed',
          requestId: 'answer-2',
          code: 'BAD_REQUEST',
          message: 'nothing open',
        },
        { type: 'spawn.stopped', by: 'main-gid' },
        { type: 'actor.rehydrated' },
      ],
    },
  ],
};

/** The machine's delayed events (`after`): the runtime raises them, so a walk takes them too. */
export function delayedEvents(machine: AnyStateMachine): Array<{ type: string }> {
  const types = graphEdges(machine)
    .map((edge) => edge.transition.eventType)
    .filter((type) => type.startsWith('xstate.after.'));
  return [...new Set(types)].map((type) => ({ type }));
}
