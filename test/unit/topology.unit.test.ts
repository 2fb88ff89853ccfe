import { describe, expect, it } from 'vitest';
import {
  broadcastAllKey,
  broadcastKey,
  controlKey,
  controlLockName,
  controlLockSpec,
  controlSpec,
  dlqName,
  dlqSpec,
  dlqSpecOf,
  Exchange,
  inboxLockName,
  inboxLockSpec,
  inboxName,
  inboxSpec,
  messageRoutingKey,
  QueueMode,
  quorumDeliveryLimit,
  rosterKey,
  rosterQueueName,
  rosterSpec,
  sharedExchanges,
} from '../../src/federation/topology.js';

const gid = '3f1c2a7e-5b6d-4e8f-9a0b-1c2d3e4f5a6b';
const maxLength = 10_000;

describe('topology: exchanges (SPEC §4)', () => {
  it('declares exactly the four shared exchanges, durable, with their types', () => {
    expect(sharedExchanges).toEqual([
      { name: 'bridge.msg', type: 'topic', durable: true },
      { name: 'bridge.roster', type: 'topic', durable: true },
      { name: 'bridge.control.topic', type: 'topic', durable: true },
      { name: 'bridge.dlx', type: 'fanout', durable: true },
    ]);
  });

  it('names them as the spec does', () => {
    expect(Exchange).toEqual({
      msg: 'bridge.msg',
      roster: 'bridge.roster',
      control: 'bridge.control.topic',
      dlx: 'bridge.dlx',
    });
  });

  it('the dead-letter queue bridge.dlq is durable and bound to bridge.dlx', () => {
    expect(dlqName).toBe('bridge.dlq');
    expect(dlqSpec).toEqual({
      name: 'bridge.dlq',
      durable: true,
      exclusive: false,
      autoDelete: false,
      arguments: {},
      bindings: [{ exchange: 'bridge.dlx', key: '' }],
    });
  });

  it('agentbridge broker setup declares it classic in classic mode, quorum in quorum mode, never with a delivery limit', () => {
    expect(dlqSpecOf(QueueMode.classic)).toEqual(dlqSpec);
    expect(dlqSpecOf(QueueMode.quorum)).toEqual({ ...dlqSpec, arguments: { 'x-queue-type': 'quorum' } });
  });
});

describe('topology: routing keys', () => {
  it('broadcast.all without a group, broadcast.<group> with one', () => {
    expect(broadcastAllKey).toBe('broadcast.all');
    expect(broadcastKey()).toBe('broadcast.all');
    expect(broadcastKey('backend')).toBe('broadcast.backend');
  });

  it('on the broker, broadcasts and presence travel under their deployment: deployment.<id>.<key>', () => {
    expect(messageRoutingKey('team-a', 'broadcast.all')).toBe('deployment.team-a.broadcast.all');
    expect(messageRoutingKey('team-a', 'broadcast.a.b')).toBe('deployment.team-a.broadcast.a.b');
    expect(messageRoutingKey('team-a', gid)).toBe(gid);
    expect(rosterKey('team-a', 'host-a')).toBe('deployment.team-a.roster.host-a');
  });
});

describe('topology: entity inbox (R-TOP1, R-H1)', () => {
  it('is named agent.<gid>.inbox', () => {
    expect(inboxName(gid)).toBe(`agent.${gid}.inbox`);
    expect(
      inboxSpec({ deployment: 'team-a', gid, groups: [], mode: QueueMode.classic, maxLength }).name,
    ).toBe(`agent.${gid}.inbox`);
  });

  it('classic mode: durable, dead-letters to bridge.dlx, capped, and nacks an overflowing publish', () => {
    const spec = inboxSpec({ deployment: 'team-a', gid, groups: [], mode: QueueMode.classic, maxLength });
    expect(spec).toMatchObject({ durable: true, exclusive: false, autoDelete: false });
    expect(spec.arguments).toEqual({
      'x-dead-letter-exchange': 'bridge.dlx',
      'x-max-length': maxLength,
      'x-overflow': 'reject-publish-dlx',
    });
  });

  it('quorum mode (R-TOP2): quorum type, single active consumer, reject-publish (quorum has no -dlx variant), at-least-once dead-lettering, a delivery limit', () => {
    const spec = inboxSpec({ deployment: 'team-a', gid, groups: [], mode: QueueMode.quorum, maxLength });
    // Quorum queues must be durable and cannot be exclusive.
    expect(spec).toMatchObject({
      name: `agent.${gid}.inbox`,
      durable: true,
      exclusive: false,
      autoDelete: false,
    });
    expect(spec.arguments).toEqual({
      'x-queue-type': 'quorum',
      'x-single-active-consumer': true,
      'x-dead-letter-exchange': 'bridge.dlx',
      'x-max-length': maxLength,
      'x-overflow': 'reject-publish',
      // at-least-once needs reject-publish; without an explicit limit RabbitMQ 3.x has none.
      'x-dead-letter-strategy': 'at-least-once',
      'x-delivery-limit': quorumDeliveryLimit,
    });
    expect(quorumDeliveryLimit).toBe(20);
  });

  it('takes the cap it is given', () => {
    expect(
      inboxSpec({ deployment: 'team-a', gid, groups: [], mode: QueueMode.classic, maxLength: 7 }).arguments[
        'x-max-length'
      ],
    ).toBe(7);
  });

  it.each([QueueMode.classic, QueueMode.quorum])(
    "%s: bound to bridge.msg by its gid, its deployment's broadcast.all and one broadcast.<group> per group; the bare keys of earlier releases unbound",
    (mode) => {
      const spec = inboxSpec({
        deployment: 'team-a',
        gid,
        groups: ['backend', 'reviewers'],
        mode,
        maxLength,
      });
      expect(spec.bindings).toEqual([
        { exchange: 'bridge.msg', key: gid },
        { exchange: 'bridge.msg', key: 'deployment.team-a.broadcast.all' },
        { exchange: 'bridge.msg', key: 'deployment.team-a.broadcast.backend' },
        { exchange: 'bridge.msg', key: 'deployment.team-a.broadcast.reviewers' },
      ]);
      expect(spec.unbindings).toEqual([
        { exchange: 'bridge.msg', key: 'broadcast.all' },
        { exchange: 'bridge.msg', key: 'broadcast.backend' },
        { exchange: 'bridge.msg', key: 'broadcast.reviewers' },
      ]);
    },
  );

  it('an entity in no group still gets its gid and broadcast.all', () => {
    expect(
      inboxSpec({ deployment: 'team-a', gid, groups: [], mode: QueueMode.classic, maxLength }).bindings,
    ).toEqual([
      { exchange: 'bridge.msg', key: gid },
      { exchange: 'bridge.msg', key: 'deployment.team-a.broadcast.all' },
    ]);
  });

  it('a group binding matches what a broadcast to that group is published with', () => {
    const keys = inboxSpec({
      deployment: 'team-a',
      gid,
      groups: ['backend'],
      mode: QueueMode.classic,
      maxLength,
    }).bindings.map((b) => b.key);
    expect(keys).toContain(messageRoutingKey('team-a', broadcastKey('backend')));
    expect(keys).toContain(messageRoutingKey('team-a', broadcastKey()));
  });

  it('quorum mode lock queue: exclusive, so a second gateway’s declare fails (405 RESOURCE_LOCKED)', () => {
    expect(inboxLockName(gid)).toBe(`agent.${gid}.lock`);
    expect(inboxLockSpec(gid)).toEqual({
      name: `agent.${gid}.lock`,
      durable: false,
      exclusive: true,
      autoDelete: true,
      arguments: {},
      bindings: [],
    });
  });
});

describe('topology: control queue', () => {
  it('control.<hostId>: durable, dead-lettering, bound to bridge.control.topic by control.<hostId>', () => {
    const spec = controlSpec('host-a');
    expect(spec).toMatchObject({
      name: 'control.host-a',
      durable: true,
      exclusive: false,
      autoDelete: false,
    });
    expect(spec.arguments['x-dead-letter-exchange']).toBe('bridge.dlx');
    // A topic key, so topic permissions can keep other hosts' logins from binding to it.
    expect(spec.bindings).toEqual([{ exchange: 'bridge.control.topic', key: 'control.host-a' }]);
    expect(controlKey('host-a')).toBe('control.host-a');
  });

  it('classic mode by default: no queue type of its own', () => {
    expect(controlSpec('host-a').arguments).toEqual({ 'x-dead-letter-exchange': 'bridge.dlx' });
    expect(controlSpec('host-a', QueueMode.classic)).toEqual(controlSpec('host-a'));
  });

  it('quorum mode: a quorum queue with the inboxes’ arguments (no cap), bound as in classic mode', () => {
    const spec = controlSpec('host-a', QueueMode.quorum);
    expect(spec).toMatchObject({
      name: 'control.host-a',
      durable: true,
      exclusive: false,
      autoDelete: false,
    });
    expect(spec.arguments).toEqual({
      'x-dead-letter-exchange': 'bridge.dlx',
      'x-queue-type': 'quorum',
      'x-single-active-consumer': true,
      'x-overflow': 'reject-publish',
      'x-dead-letter-strategy': 'at-least-once',
      'x-delivery-limit': quorumDeliveryLimit,
    });
    expect(spec.bindings).toEqual(controlSpec('host-a').bindings);
  });

  it('quorum mode lock queue: lock.control.<hostId>, exclusive like an inbox lock', () => {
    expect(controlLockName('host-a')).toBe('lock.control.host-a');
    expect(controlLockSpec('host-a')).toEqual({ ...inboxLockSpec(gid), name: 'lock.control.host-a' });
  });

  it('a dotted host id’s control lock is never another host’s control queue', () => {
    // control.<host>.lock would be host "a.lock"'s control queue.
    const hosts = ['a', 'a.lock', 'lock', 'control.a'];
    const controls = hosts.map((h) => controlSpec(h).name);
    for (const host of hosts) expect(controls).not.toContain(controlLockName(host));
  });
});

describe('topology: roster queue (U5, soft state)', () => {
  it("roster.<hostId>: exclusive and auto-delete, not durable, bound to its deployment's presence keys", () => {
    expect(rosterSpec('team-a', 'host-a')).toEqual({
      name: 'roster.host-a',
      durable: false,
      exclusive: true,
      autoDelete: true,
      arguments: {},
      bindings: [{ exchange: 'bridge.roster', key: 'deployment.team-a.roster.#' }],
    });
  });
});

describe('topology: names do not collide across hosts and entities', () => {
  it('two hosts get different control and roster queues', () => {
    expect(controlSpec('host-a').name).not.toBe(controlSpec('host-b').name);
    expect(rosterQueueName('host-a')).not.toBe(rosterQueueName('host-b'));
  });

  it('an inbox, its lock and the shared queues all have different names', () => {
    const names = [inboxName(gid), inboxLockName(gid), dlqName, controlSpec('h').name, rosterQueueName('h')];
    expect(new Set(names).size).toBe(names.length);
  });
});
