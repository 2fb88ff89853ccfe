import { randomUUID } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BridgeError } from '../../src/errors.js';
import {
  controlKey,
  controlSpec,
  Exchange,
  inboxName,
  messageRoutingKey,
} from '../../src/federation/topology.js';
import { adminRoutes } from '../../src/interfaces/adminProtocol.js';
import { addTrust } from '../../src/security/TrustStore.js';
import type { ControlResult, Envelope } from '../../src/wire/envelope.js';
import { schemaVersionString } from '../../src/wire/envelope.js';
import { encodeHlc } from '../../src/wire/hlc.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { withEventsDb } from '../support/eventsDb.js';
import { brokerEnv, brokerUri, removeDeadLettersOf, testDeployment, waitFor } from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';
import {
  fakePeer,
  listenAsPeerEntity,
  publishConfirmed,
  sealedBytes,
  sealingKeyOf,
  signedBy,
} from '../support/signedPeer.js';

interface Registered {
  gid: string;
  token: string;
  name: string;
}

interface Drained {
  kind: string;
  inReplyTo?: string;
  result?: ControlResult;
}

type ToolResult = Awaited<ReturnType<typeof callTool>>;

const errorText = (result: ToolResult): string =>
  (result.content as Array<{ type: string; text?: string }>)[0]?.text ?? '';

/** Profiles of the target hosts: none of these tests gets as far as launching one. */
const profiles = { idle: { command: 'sleep 600' } };

/** What the attacker sent: each one crashed the gateway, or made it bind a wildcard. */
const hostileSpawns = [
  { args: { profile: 'nope', name: 'bad name' }, says: /"bad name" is not an entity name: use 1-64 letters/ },
  { args: { profile: 'idle', groups: ['#', 'x\n…'] }, says: /"#" is not a group name: use 1-64/ },
  { args: { profile: 'p'.repeat(65) }, says: /a profile name is at most 64 characters, got 65/ },
  {
    args: { profile: 'idle', groups: Array.from({ length: 33 }, (_, i) => `g${i}`) },
    says: /33 groups: at most 32/,
  },
] as const;

const register = async (g: GatewayProcess, args: string[]): Promise<Registered> => {
  const result = await g.cli(['register', ...args, '--json']);
  expect(result.code, result.stderr || result.stdout).toBe(0);
  return JSON.parse(result.stdout) as Registered;
};

/** The admin socket, called directly (the CLI checks first; the socket must refuse on its own). */
const admin = (g: GatewayProcess, route: string, body: unknown): Promise<unknown> => g.admin(route, body);

const refusedBy = async (call: Promise<unknown>): Promise<BridgeError> => {
  const error = await call.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(error).toBeInstanceOf(BridgeError);
  return error as BridgeError;
};

/** The gateway's "gateway started" lines so far, one per start. */
function startLines(g: GatewayProcess): Array<{ liveSpawns: number }> {
  return g.log
    .split('\n')
    .filter((line) => line.includes('"gateway started"'))
    .map((line) => JSON.parse(line) as { liveSpawns: number });
}

/**
 * Starts the gateway and resolves to the `liveSpawns` its start logged. Its own line: the
 * gateway answers /healthz (what `start` waits for) before its stdout's line has been read
 * here, and the line before is the last start's.
 */
async function liveSpawnsOnStart(g: GatewayProcess): Promise<number> {
  const before = startLines(g).length;
  await g.start();
  const line = await waitFor('its "gateway started" line', () => startLines(g)[before]);
  return line.liveSpawns;
}

describe('hostile spawn requests on a single-host gateway', () => {
  let solo: GatewayProcess;
  let worker: Registered;
  let mcp: Client;

  beforeAll(async () => {
    solo = new GatewayProcess({ hostId: uniqueHostId('hostileSolo'), config: { profiles } });
    await solo.start();
    worker = await register(solo, ['--kind', 'worker', '--name', 'w1']);
    mcp = await connectMcp(solo.mcpUrl, worker.token);
  });

  afterAll(async () => {
    await mcp?.close().catch(() => {});
    await solo?.dispose();
  });

  it('a bridge_spawn with a name, groups or profile the wire refuses no longer crashes (and bricks) the gateway: a worker is refused with what is wrong and what is allowed', async () => {
    for (const { args, says } of hostileSpawns) {
      const result = await callTool(mcp, 'bridge_spawn', {
        host: solo.hostId,
        brief: 'hi',
        wait_ms: 5_000,
        ...args,
      });
      expect(result.isError, JSON.stringify(args)).toBe(true);
      expect(errorText(result)).toMatch(says);
      expect(await solo.healthy()).toBe(true);
    }
    // The CLI and the admin socket refuse the same, by the same rule.
    const cli = await solo.cli(['spawn', solo.hostId, 'nope', '--name', 'bad name', '--token', worker.token]);
    expect(cli.code).not.toBe(0);
    expect(cli.stderr).toMatch(/--name: .*"bad name" is not an entity name/);
    const socket = await refusedBy(
      admin(solo, adminRoutes.spawn, {
        token: worker.token,
        host: solo.hostId,
        profile: 'idle',
        brief: 'hi',
        groups: ['#', 'x\n…'],
      }),
    );
    expect(socket.code).toBe('BAD_REQUEST');
    expect(socket.message).toMatch(/groups\.0: "#" is not a group name/);

    // Nothing was kept to crash the next start either.
    expect(await solo.stop()).toBe(0);
    expect(await liveSpawnsOnStart(solo)).toBe(0);
  }, 60_000);

  it('a kept spawn request that no longer parses (an older gateway stored it) is refused at start, logged, and answered; the gateway starts', async () => {
    // What the older gateway left when `bridge_spawn {name: "bad name"}` crashed it: a spawn
    // actor still "requested" and the request kept unchecked, as its own store wrote them.
    await solo.stop();
    const requestId = randomUUID();
    const traceId = randomUUID();
    const hlc = encodeHlc({ wall: Date.now(), counter: 0 });
    const requester = { gid: worker.gid, name: 'w1', host: solo.hostId, kind: 'worker' };
    const request = {
      v: '1.2',
      kind: 'SPAWN',
      msgId: requestId,
      traceId,
      hlc,
      from: requester,
      to: solo.hostId,
      text: 'hi',
      expiresAt: Date.now() + 60_000,
      spawn: { requestId, profile: 'nope', name: 'bad name' },
    };
    const input = {
      requestId,
      traceId,
      msgId: requestId,
      requester,
      profile: 'nope',
      name: 'bad name',
      groups: [],
      digest: 'sha256:0',
      size: 2,
    };
    withEventsDb(solo.home, (db) => {
      db.prepare(
        `INSERT INTO events (hlc, host, actor_kind, actor_id, trace_id, msg_id, event, from_state, to_state, data)
         VALUES (?, ?, 'spawn', ?, ?, ?, 'xstate.init', NULL, 'requested', ?)`,
      ).run(hlc, solo.hostId, requestId, traceId, requestId, JSON.stringify(input));
      db.prepare(
        `INSERT INTO actors (actor_kind, actor_id, owner, trace_id, state, done) VALUES ('spawn', ?, NULL, ?, 'requested', 0)`,
      ).run(requestId, traceId);
      db.prepare(`INSERT INTO messages (msg_id, recipient, envelope) VALUES (?, '>spawn', ?)`).run(
        requestId,
        JSON.stringify(request),
      );
    });

    // Before, the gateway died right after every start here (a ZodError from readMessage).
    expect(await liveSpawnsOnStart(solo)).toBe(1);
    await waitFor('the kept SPAWN refused', async () =>
      solo.log.includes('a kept SPAWN does not parse: refused with the reason') ? true : undefined,
    );
    const head = await waitFor('the spawn actor to end', async () =>
      withEventsDb(solo.home, (db) =>
        db
          .prepare<[string], { state: string; done: number }>(
            "SELECT state, done FROM actors WHERE actor_kind = 'spawn' AND actor_id = ?",
          )
          .get(requestId),
      )?.done === 1
        ? true
        : undefined,
    );
    expect(head).toBe(true);
    expect(await solo.healthy()).toBe(true);
    // The requester is told, with the reason: nothing is lost.
    await mcp.close().catch(() => {});
    mcp = await connectMcp(solo.mcpUrl, worker.token);
    const got: Drained[] = [];
    const answer = await waitFor('the SPAWN_RESULT with the refusal', async () => {
      const drained = await callTool(mcp, 'bridge_drain', {});
      got.push(...(drained.structuredContent as { messages: Drained[] }).messages);
      return got.find((m) => m.kind === 'SPAWN_RESULT' && m.inReplyTo === requestId);
    });
    expect(answer.result).toMatchObject({ requestId, ok: false, code: 'BAD_REQUEST' });
    expect(answer.result?.message).toMatch(/"bad name" is not an entity name/);
    // And the next start finds nothing left to resume.
    await solo.stop();
    expect(await liveSpawnsOnStart(solo)).toBe(0);
  }, 60_000);

  it('agentbridge register --group "#" (or "*", or a newline) is refused: no inbox may be bound to every group broadcast', async () => {
    for (const group of ['#', '*', 'a\nb', 'team.#']) {
      const cli = await solo.cli(['register', '--kind', 'main', '--name', 'ears', '--group', group]);
      expect(cli.code, group).not.toBe(0);
      expect(cli.stderr).toContain('is not a group name');
      const socket = await refusedBy(
        admin(solo, adminRoutes.register, { kind: 'main', name: 'ears', groups: ['team', group] }),
      );
      expect(socket.code).toBe('BAD_REQUEST');
      expect(socket.message).toContain(`groups.1: ${JSON.stringify(group)} is not a group name`);
    }
    const roster = await solo.cli(['roster', '--json']);
    expect((JSON.parse(roster.stdout) as Array<{ name: string }>).map((e) => e.name)).not.toContain('ears');
  });
});

describe('hostile spawn requests and groups across the broker', () => {
  const queues: string[] = [];
  let b: GatewayProcess;
  const peer = fakePeer('hostilepeer');
  const peerMain = { gid: randomUUID(), name: 'peerMain' };
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  const peerInbox: Envelope[] = [];

  beforeAll(async () => {
    b = new GatewayProcess({
      hostId: uniqueHostId('hostileB'),
      env: { ...brokerEnv },
      config: { profiles },
    });
    addTrust(b.home, peer.host, peer.keys.trustString);
    await b.start();
    queues.push(controlSpec(b.hostId).name);

    // A requester on a host that runs no bridge gateway (or an older one): its own inbox, and
    // a signed PRESENCE so that B can route an answer to it.
    connection = await amqp.connect(brokerUri);
    channel = await connection.createConfirmChannel();
    const inbox = `test.hostilepeer.${peerMain.gid}`;
    queues.push(inbox);
    await listenAsPeerEntity(channel, peer, peerMain, inbox, peerInbox);
    await waitFor(`${peerMain.name} in ${b.hostId}'s roster`, async () => {
      return (await b.roster()).some((e) => e.gid === peerMain.gid) ? true : undefined;
    });
  });

  /** Publishes a SPAWN to B's control queue, signed by the peer, from `peerMain` "on" `fromHost`. */
  const publishSpawn = async (fromHost: string, spawn: { requestId: string } & Record<string, unknown>) => {
    const envelope = {
      v: schemaVersionString,
      kind: 'SPAWN',
      msgId: spawn.requestId,
      traceId: randomUUID(),
      hlc: encodeHlc({ wall: Date.now(), counter: 0 }),
      from: { ...peerMain, host: fromHost, kind: 'main' },
      to: b.hostId,
      text: 'hi',
      expiresAt: Date.now() + 60_000,
      spawn,
    };
    // Sealed to B, as the peer's gateway would: B refuses it for what its request holds.
    const content = sealedBytes(envelope as unknown as Envelope, [
      { host: b.hostId, key: sealingKeyOf(b.home) },
    ]);
    await publishConfirmed(
      channel,
      Exchange.control,
      controlKey(b.hostId),
      content,
      signedBy(content, peer),
      spawn.requestId,
    );
    return spawn.requestId;
  };

  afterAll(async () => {
    await channel?.close().catch(() => {});
    await connection?.close().catch(() => {});
    await b?.dispose();
    await deleteQueues(queues);
    await removeDeadLettersOf([b.hostId, peer.host]);
  });

  it('a SPAWN the target dead-letters for its content is answered with SPAWN_RESULT carrying the refusal (the requester no longer waits forever)', async () => {
    for (const spawn of [
      { profile: 'idle', groups: ['#', 'x\n…'] },
      { profile: 'nope', name: 'bad name' },
      { profile: 'p'.repeat(65) },
    ]) {
      const requestId = await publishSpawn(peer.host, { requestId: randomUUID(), ...spawn });
      const answer = await waitFor(`SPAWN_RESULT for ${JSON.stringify(spawn)}`, async () =>
        peerInbox.find((e) => e.kind === 'SPAWN_RESULT' && e.result?.requestId === requestId),
      );
      expect(answer).toMatchObject({ inReplyTo: requestId, to: peerMain.gid, from: { host: b.hostId } });
      expect(answer.result).toMatchObject({ op: 'spawn', ok: false, code: 'BAD_REQUEST' });
      expect(answer.result?.message).toMatch(/is not (an entity|a group) name|at most 64 characters/);
      // And it is dead-lettered with its reason, not dropped. The gateway's log is written
      // asynchronously: the line may come after the answer.
      await waitFor('the dead letter in the log', () =>
        b.log.includes('refused a message from the broker; dead-lettered with its reason') ? true : undefined,
      );
    }
    expect(await b.healthy()).toBe(true);
  });

  it('an entity an older gateway registered with group "#" no longer takes every group’s broadcasts: its wildcard binding is removed at start', async () => {
    const refused = await b.cli(['register', '--kind', 'main', '--name', 'ears', '--group', '#']);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/--group: .*"#" is not a group name/);

    // What the older gateway left: the entity with a wildcard group among its groups, its inbox
    // bound to that wildcard. The test broker is shared by every test file running at once, so
    // the wildcard is one only this test's keys can match (`broadcast.<own>.#`), not `broadcast.#`
    // itself: the removal of the binding of a stored wildcard group is the same for both.
    const own = `w${randomUUID().slice(0, 8)}`;
    const wildcard = `${own}.#`;
    const old = await register(b, ['--kind', 'main', '--name', 'oldears', '--group', 'team']);
    const inbox = inboxName(old.gid);
    queues.push(inbox);
    await b.stop();
    withEventsDb(b.home, (db) =>
      db
        .prepare('UPDATE entities SET groups = ? WHERE gid = ?')
        .run(JSON.stringify([wildcard, 'team']), old.gid),
    );
    // Bound both ways: under the bare key of earlier releases and under this deployment's.
    const setup = await connection.createChannel();
    await setup.bindQueue(inbox, 'bridge.msg', `broadcast.${wildcard}`);
    await setup.bindQueue(inbox, 'bridge.msg', messageRoutingKey(testDeployment, `broadcast.${wildcard}`));
    await setup.close();

    await b.start();
    expect(b.log).toContain('stored groups that are no group names are left out');
    await b.stop(); // the inbox stays, with whatever bindings it has now

    const publish = (key: string) =>
      publishConfirmed(channel, 'bridge.msg', key, Buffer.from('{}'), {}, randomUUID());
    // What the wildcard took, a group "oldears" is not in, either way.
    await publish(`broadcast.${own}.other`);
    await publish(messageRoutingKey(testDeployment, `broadcast.${own}.other`));
    await publish(messageRoutingKey(testDeployment, 'broadcast.team')); // the group it is in: still bound
    const check = await connection.createChannel();
    const { messageCount } = await check.checkQueue(inbox);
    await check.purgeQueue(inbox);
    await check.close();
    expect(messageCount).toBe(1);
    await b.start();
  }, 60_000);
});
