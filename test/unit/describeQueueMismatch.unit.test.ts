import { describe, expect, it } from 'vitest';
import { describeQueueMismatch, parseInequivalentArg } from '../../src/federation/describeQueueMismatch.js';
import { reasonOf } from '../../src/wire/deadLetterView.js';

// The broker's words, as RabbitMQ 3.10.8 on a 3-node cluster of this machine wrote them.
const classicAsQuorum =
  "Operation failed: QueueDeclare; 406 (PRECONDITION-FAILED) with message \"PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'bridge.dlq' in vhost '/': received the value 'quorum' of type 'longstr' but current is none\"";
const quorumAsClassic =
  "Operation failed: QueueDeclare; 406 (PRECONDITION-FAILED) with message \"PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'bridge.dlq' in vhost '/': received none but current is the value 'quorum' of type 'longstr'\"";
const otherLimit =
  "Operation failed: QueueDeclare; 406 (PRECONDITION-FAILED) with message \"PRECONDITION_FAILED - inequivalent arg 'x-delivery-limit' for queue 'agent.x.inbox' in vhost '/': received '20' but current is '3'\"";
const noStrategy =
  "PRECONDITION_FAILED - inequivalent arg 'x-dead-letter-strategy' for queue 'control.h' in vhost 'bridge': received the value 'at-least-once' of type 'longstr' but current is none";

describe('describeQueueMismatch: a queue that exists with other arguments', () => {
  it('reads the broker’s inequivalent-arg line', () => {
    expect(parseInequivalentArg(classicAsQuorum)).toEqual({
      arg: 'x-queue-type',
      queue: 'bridge.dlq',
      received: 'quorum',
      current: undefined,
    });
    expect(parseInequivalentArg(quorumAsClassic)).toEqual({
      arg: 'x-queue-type',
      queue: 'bridge.dlq',
      received: undefined,
      current: 'quorum',
    });
    expect(parseInequivalentArg(otherLimit)).toEqual({
      arg: 'x-delivery-limit',
      queue: 'agent.x.inbox',
      received: '20',
      current: '3',
    });
    expect(parseInequivalentArg('PRECONDITION_FAILED - something else')).toBeUndefined();
  });

  it('another queue type: names the queue, both types and both ways out', () => {
    const line = describeQueueMismatch(classicAsQuorum);
    expect(line).toMatch(/^queue bridge\.dlq exists as a classic queue, but broker\.queueMode is quorum/);
    expect(line).toContain("cannot change a queue's type in place");
    expect(line).toContain('set broker.queueMode: classic');
    expect(line).toContain('declared anew as a quorum queue');
    const back = describeQueueMismatch(quorumAsClassic);
    expect(back).toMatch(/^queue bridge\.dlq exists as a quorum queue, but broker\.queueMode is classic/);
    expect(back).toContain('set broker.queueMode: quorum');
  });

  it('another argument: names the queue, the argument and both values', () => {
    expect(describeQueueMismatch(otherLimit)).toMatch(
      /^queue agent\.x\.inbox exists with x-delivery-limit 3, and this release declares it with 20 .*delete it, so it is declared anew$/,
    );
    expect(describeQueueMismatch(noStrategy)).toMatch(
      /^queue control\.h exists with x-dead-letter-strategy none, and this release declares it with at-least-once/,
    );
  });

  it('another argument, declared in a known mode: also names the other type and both ways out', () => {
    // RabbitMQ names the first argument that differs: a classic inbox redeclared as quorum may
    // be refused for x-overflow, not for x-queue-type.
    const overflow =
      "PRECONDITION_FAILED - inequivalent arg 'x-overflow' for queue 'agent.x.inbox' in vhost '/': received the value 'reject-publish' of type 'longstr' but current is the value 'reject-publish-dlx' of type 'longstr'";
    expect(describeQueueMismatch(overflow, 'quorum')).toBe(
      'queue agent.x.inbox exists with x-overflow reject-publish-dlx, and this release declares it with ' +
        'reject-publish, as a quorum queue (broker.queueMode: quorum). If it is a classic queue (RabbitMQ ' +
        "cannot change a queue's type in place), set broker.queueMode: classic again; otherwise, or to make " +
        'it a quorum queue, move what agent.x.inbox holds elsewhere (a shovel) and delete it, so it is declared anew',
    );
    expect(describeQueueMismatch(otherLimit, 'classic')).toContain('If it is a quorum queue');
  });

  it('a 406 it cannot read still says what to do', () => {
    expect(describeQueueMismatch('PRECONDITION_FAILED - odd')).toMatch(/move what it holds and delete it/);
  });
});

describe('reasonOf: the broker’s x-death reasons in the gateway’s words', () => {
  const death = (reason: string) => ({ 'x-death': [{ reason, queue: 'agent.x.inbox' }] });

  it('a quorum queue’s delivery_limit reads as delivery-limit', () => {
    expect(reasonOf(death('delivery_limit'))).toBe('delivery-limit');
  });

  it.each(['rejected', 'expired', 'maxlen'])('%s stays as it is', (reason) => {
    expect(reasonOf(death(reason))).toBe(reason);
  });

  it('the gateway’s own reason header wins', () => {
    expect(reasonOf({ ...death('delivery_limit'), 'x-bridge-reason': 'recipient-gone' })).toBe(
      'recipient-gone',
    );
  });
});
