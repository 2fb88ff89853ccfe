import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  escapeRegex,
  exactly,
  gatewayPermissions,
  provisionCommands,
} from '../../src/federation/permissions.js';
import { controlLockName, inboxLockName, inboxName } from '../../src/federation/topology.js';

// RabbitMQ matches permission regexes with PCRE; these patterns use only what JS regexes share.
const allows = (pattern: string, name: string) => new RegExp(pattern).test(name);

describe('least-privilege permissions of a gateway login', () => {
  const mine = { gid: randomUUID(), groups: ['ops', 'a.b'] };
  const theirs = randomUUID();
  const perms = gatewayPermissions({
    deployment: 'team-a',
    hostId: 'box-1',
    entities: [mine],
    queueMode: 'classic',
  });

  it('lets it consume only its own queues', () => {
    for (const queue of [inboxName(mine.gid), 'control.box-1', 'roster.box-1']) {
      expect(allows(perms.read, queue), queue).toBe(true);
      expect(allows(perms.configure, queue), queue).toBe(true);
    }
    for (const queue of [
      inboxName(theirs),
      'control.box-2',
      'roster.box-2',
      'bridge.dlq',
      'control.box-1x',
    ]) {
      expect(allows(perms.read, queue), queue).toBe(false);
    }
    expect(allows(perms.configure, inboxName(theirs))).toBe(false);
    // "." in a host id is literal: control.box-1 must not cover control.boxX1.
    const dotted = gatewayPermissions({
      deployment: 'team-a',
      hostId: 'a.b',
      entities: [],
      queueMode: 'classic',
    });
    expect(allows(dotted.read, 'control.a.b')).toBe(true);
    expect(allows(dotted.read, 'control.aXb')).toBe(false);
  });

  it("configures nothing shared: the exchanges and bridge.dlq are the operator's", () => {
    for (const name of [
      'bridge.msg',
      'bridge.roster',
      'bridge.control.topic',
      'bridge.control',
      'bridge.dlx',
      'bridge.dlq',
    ]) {
      expect(allows(perms.configure, name), name).toBe(false); // neither declare nor delete
    }
  });

  it('publishes to the shared exchanges, bridge.dlx too, and binds its queues to all but bridge.dlx', () => {
    for (const exchange of ['bridge.msg', 'bridge.roster', 'bridge.control.topic', 'bridge.dlx']) {
      expect(allows(perms.write, exchange), exchange).toBe(true); // publish
    }
    for (const exchange of ['bridge.msg', 'bridge.roster', 'bridge.control.topic']) {
      expect(allows(perms.read, exchange), exchange).toBe(true); // bind a queue of its own to it
    }
    // Binding a queue to the fanout bridge.dlx would copy every host's dead letters.
    expect(allows(perms.read, 'bridge.dlx')).toBe(false);
    // Reading bridge.dlq is operator tooling, granted only when asked.
    expect(allows(perms.write, 'bridge.dlq')).toBe(false);
    expect(allows(perms.read, 'bridge.dlq')).toBe(false);
    expect(
      allows(
        gatewayPermissions({
          deployment: 'team-a',
          hostId: 'ops',
          entities: [],
          queueMode: 'classic',
          readDeadLetters: true,
        }).read,
        'bridge.dlq',
      ),
    ).toBe(true);
    // The default exchange (publish straight to any queue) is not granted.
    expect(allows(perms.write, 'amq.default')).toBe(false);
  });

  it('binds bridge.control.topic only under its own host key, publishes to any host (topic permissions)', () => {
    const control = perms.topic.find((t) => t.exchange === 'bridge.control.topic');
    expect(control).toBeDefined();
    expect(allows(control?.read ?? '', 'control.box-1')).toBe(true);
    for (const key of ['control.box-2', 'control.*', 'control.#', '#', 'control.box-1.x', 'controlXbox-1']) {
      expect(allows(control?.read ?? '', key), key).toBe(false);
    }
    expect(allows(control?.write ?? '', 'control.box-2')).toBe(true);
    expect(allows(control?.write ?? '', 'control.a.b')).toBe(true);
    expect(allows(control?.write ?? '', 'roster.box-2')).toBe(false);
  });

  it("restricts binding keys on bridge.msg to its own gids and its deployment's broadcasts (topic permissions)", () => {
    const msg = perms.topic.find((t) => t.exchange === 'bridge.msg');
    expect(msg).toBeDefined();
    const ours = (key: string) => `deployment.team-a.${key}`;
    for (const key of [mine.gid, ours('broadcast.all'), ours('broadcast.ops'), ours('broadcast.a.b')]) {
      expect(allows(msg?.read ?? '', key), key).toBe(true);
    }
    // The bare keys of earlier releases, only to unbind them.
    for (const key of ['broadcast.all', 'broadcast.ops', 'broadcast.a.b']) {
      expect(allows(msg?.read ?? '', key), key).toBe(true);
    }
    for (const key of [
      theirs,
      '#',
      '*',
      'broadcast.*',
      'broadcast.other',
      'broadcast.aXb',
      ours('broadcast.other'),
      ours('broadcast.#'),
      'deployment.team-b.broadcast.all',
      'deployment.#',
    ]) {
      expect(allows(msg?.read ?? '', key), key).toBe(false);
    }
    // It may publish to any recipient gid, and broadcast in its own deployment only.
    expect(allows(msg?.write ?? '', theirs)).toBe(true);
    expect(allows(msg?.write ?? '', ours('broadcast.other'))).toBe(true);
    expect(allows(msg?.write ?? '', 'deployment.team-b.broadcast.all')).toBe(false);
    expect(allows(msg?.write ?? '', 'broadcast.all')).toBe(false);
    expect(allows(msg?.write ?? '', 'deployment.team-aXbroadcast.all')).toBe(false);
    const roster = perms.topic.find((t) => t.exchange === 'bridge.roster');
    expect(allows(roster?.write ?? '', ours('roster.box-1'))).toBe(true);
    expect(allows(roster?.write ?? '', ours('roster.box-2'))).toBe(false);
    expect(allows(roster?.write ?? '', 'roster.box-1')).toBe(false);
    expect(allows(roster?.read ?? '', ours('roster.#'))).toBe(true);
    expect(allows(roster?.read ?? '', 'roster.#')).toBe(false);
    expect(allows(roster?.read ?? '', 'deployment.team-b.roster.#')).toBe(false);
  });

  it('adds the lock queues of its inboxes, in both modes', () => {
    const quorum = gatewayPermissions({
      deployment: 'team-a',
      hostId: 'box-1',
      entities: [mine],
      queueMode: 'quorum',
    });
    expect(allows(quorum.configure, inboxLockName(mine.gid))).toBe(true);
    expect(allows(perms.configure, inboxLockName(mine.gid))).toBe(true);
    expect(allows(perms.configure, inboxLockName('someone-else'))).toBe(false);
  });

  it('quorum mode: also the lock queue of its control queue, its own host’s only', () => {
    const quorum = gatewayPermissions({
      deployment: 'team-a',
      hostId: 'box-1',
      entities: [mine],
      queueMode: 'quorum',
    });
    expect(allows(quorum.configure, controlLockName('box-1'))).toBe(true);
    expect(allows(quorum.configure, controlLockName('box-2'))).toBe(false);
    // Classic control queues honour exclusive consume: no lock, so no permission for one.
    expect(allows(perms.configure, controlLockName('box-1'))).toBe(false);
  });

  it('grants no inbox and no binding key when it has no entities yet', () => {
    const empty = gatewayPermissions({
      deployment: 'team-a',
      hostId: 'box-1',
      entities: [],
      queueMode: 'classic',
    });
    expect(allows(empty.read, inboxName(mine.gid))).toBe(false);
    expect(empty.topic.find((t) => t.exchange === 'bridge.msg')?.read).toBe('^$');
  });

  it('escapes regex metacharacters in names', () => {
    expect(escapeRegex('a.b(c)*$')).toBe('a\\.b\\(c\\)\\*\\$');
    expect(allows(exactly(['x+y']), 'x+y')).toBe(true);
    expect(allows(exactly(['x+y']), 'xxy')).toBe(false);
    expect(exactly([])).toBe('^$');
  });

  it('creates the user only when a password is given, changing it if the user exists', () => {
    const opts = { vhost: '/', node: 'rabbit@h' };
    const fresh = provisionCommands(perms, { value: 'pw', userExists: false }, opts);
    expect(fresh.map((c) => c.args.slice(2, 3)[0])).toEqual([
      'add_user',
      'set_permissions',
      'set_topic_permissions',
      'set_topic_permissions',
      'set_topic_permissions',
    ]);
    // The password goes on stdin: argv is readable by every local user in `ps`.
    expect(fresh[0]?.args).toEqual(['-n', 'rabbit@h', 'add_user', 'bridge-box-1']);
    expect(fresh[0]?.stdin).toBe('pw\n');
    for (const command of fresh) expect(command.args).not.toContain('pw');
    expect(fresh.slice(1).every((c) => c.stdin === undefined)).toBe(true);
    expect(fresh[1]?.args).toEqual([
      '-n',
      'rabbit@h',
      'set_permissions',
      '-p',
      '/',
      'bridge-box-1',
      perms.configure,
      perms.write,
      perms.read,
    ]);
    const change = provisionCommands(perms, { value: 'pw', userExists: true }, opts)[0];
    expect(change?.args).toEqual(['-n', 'rabbit@h', 'change_password', 'bridge-box-1']);
    expect(change?.stdin).toBe('pw\n');
    expect(provisionCommands(perms, undefined, { vhost: '/' })[0]?.args[0]).toBe('set_permissions');
  });
});
