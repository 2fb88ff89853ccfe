import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlKey, controlSpec, Exchange, inboxName } from '../../src/federation/topology.js';
import { sign } from '../../src/security/signature.js';
import { addTrust } from '../../src/security/TrustStore.js';
import { parseDeliveryActorId } from '../../src/store/actorIds.js';
import type { ControlResult, Envelope } from '../../src/wire/envelope.js';
import { encodeHlc } from '../../src/wire/hlc.js';
import { SignatureHeader } from '../../src/wire/signatureHeaders.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { consolePost, openConsoleSession } from '../support/consoleSession.js';
import { brokerEnv, brokerUri, removeDeadLettersOf, waitFor } from '../support/federation.js';
import { GatewayProcess, repoRoot } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';
import { fakePeer, listenAsPeerEntity, sealedBytes, sealingKeyOf } from '../support/signedPeer.js';
import { startTmuxServer, type TmuxTestServer } from '../support/tmux.js';

interface Registered {
  gid: string;
  token: string;
  name: string;
  host: string;
}
interface Message {
  msgId: string;
  traceId: string;
  kind: string;
  text: string;
  inReplyTo?: string;
  from: { gid: string; name: string; host: string };
  result?: Record<string, unknown>;
}
interface Spawned {
  requestId: string;
  traceId: string;
  host: string;
  status: string;
  gid?: string;
  name?: string;
}
interface EventRow {
  actor_id: string;
  trace_id: string;
  event: string;
  from_state: string | null;
  to_state: string;
}
type ToolResult = Awaited<ReturnType<typeof callTool>>;

const suffix = Math.random().toString(36).slice(2, 7);
const heartbeatMs = 300;
const standIn = `${process.execPath} ${join(repoRoot, 'tools', 'standInAgent.mjs')}`;
/** Profiles of the spawning hosts: they, not the requester, say what runs. */
const profiles = { standin: { command: standIn }, idle: { command: 'sleep 600' } };

const errorText = (result: ToolResult): string =>
  (result.content as Array<{ type: string; text?: string }>)[0]?.text ?? '';

/** Drains `client`'s inbox until a message `match`es, and returns it. */
function drainUntil(client: Client, what: string, match: (m: Message) => boolean): Promise<Message> {
  const got: Message[] = [];
  return waitFor(what, async () => {
    const result = await callTool(client, 'bridge_drain', {});
    got.push(...(result.structuredContent as { messages: Message[] }).messages);
    return got.find(match);
  });
}

/** Every transition a host's event log holds for one actor, in order. */
function actorEvents(home: string, kind: string, id: string): EventRow[] {
  const db = new Database(join(home, 'events.db'), { readonly: true, fileMustExist: true });
  try {
    return db
      .prepare<[string, string], EventRow>(
        'SELECT actor_id, trace_id, event, from_state, to_state FROM event_log WHERE actor_kind = ? AND actor_id = ? ORDER BY hlc',
      )
      .all(kind, id);
  } finally {
    db.close();
  }
}

/**
 * U4 across two gateway daemons (separate OS processes) on the real broker, launching real
 * agents (the stand-in agent, tools/standInAgent.mjs) into windows of a private tmux server;
 * and the same tool on a single-host gateway.
 */
describe('spawn / stop (U4)', () => {
  const gateways: GatewayProcess[] = [];
  const clients: Client[] = [];
  const queues: string[] = [];
  let tmux: TmuxTestServer;
  let a: GatewayProcess;
  let b: GatewayProcess;
  let main: Registered;
  let mcp: Client;
  const sessionB = `spawnB-${suffix}`;
  // A host of the trust circle that is no gateway: it signs what the test publishes raw.
  const peer = fakePeer('spawnpeer');
  const peerMain = { gid: randomUUID(), name: 'peerMain' };
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  /** What reaches the fake peer's requester inbox (SPAWN_RESULTs, the agents' replies). */
  const peerInbox: Envelope[] = [];

  const register = async (g: GatewayProcess, args: string[]): Promise<Registered> => {
    const result = await g.cli(['register', ...args, '--json']);
    expect(result.code, result.stderr || result.stdout).toBe(0);
    return JSON.parse(result.stdout) as Registered;
  };
  const roster = (g: GatewayProcess) => g.roster();
  const inRoster = (g: GatewayProcess, gid: string, present: boolean) =>
    waitFor(`${gid} ${present ? 'in' : 'gone from'} ${g.hostId}'s roster`, async () => {
      const entries = await roster(g);
      return entries.some((e) => e.gid === gid) === present ? entries : undefined;
    });
  /** The windows of one tmux session: name, pane, and the command it was started with. */
  const windows = async (session: string) => {
    const out = await tmux
      .run('list-windows', '-t', `=${session}`, '-F', '#{window_name}\t#{pane_id}\t#{pane_start_command}')
      .catch(() => '');
    return out
      .split('\n')
      .filter((line) => line !== '')
      .map((line) => {
        const [name, pane, command] = line.split('\t');
        return { name: name as string, pane: pane as string, command: command ?? '' };
      });
  };
  const paneShows = (pane: string, text: string, ms = 15_000) =>
    waitFor(
      `"${text}" in pane ${pane}`,
      async () => ((await tmux.capture(pane)).includes(text) ? true : undefined),
      ms,
    );
  const spawnTool = (client: Client, args: Record<string, unknown>) =>
    callTool(client, 'bridge_spawn', { wait_ms: 30_000, ...args });

  /** Publishes `envelope` to B's control queue, signed by the fake peer, as its gateway would. */
  const sealedOnce = new Map<string, Buffer>();
  const publishControl = (envelope: Envelope): Promise<void> => {
    // Sealed once per message: a second publish of it is the same bytes, as a redelivery is.
    const content =
      sealedOnce.get(envelope.msgId) ??
      sealedBytes(envelope, [{ host: b.hostId, key: sealingKeyOf(b.home) }]);
    sealedOnce.set(envelope.msgId, content);
    const headers = {
      [SignatureHeader.signature]: sign(content, peer.keys.privateKey),
      [SignatureHeader.signer]: peer.host,
    };
    return new Promise((resolve, reject) =>
      channel.publish(
        Exchange.control,
        controlKey(b.hostId),
        content,
        { messageId: envelope.msgId, persistent: true, mandatory: true, headers },
        (err) => (err ? reject(err) : resolve()),
      ),
    );
  };
  const peerEnvelope = (kind: 'SPAWN' | 'STOP', extra: Partial<Envelope>): Envelope => ({
    v: '1.1',
    kind,
    msgId: randomUUID(),
    traceId: randomUUID(),
    hlc: encodeHlc({ wall: Date.now(), counter: 0 }),
    from: { gid: peerMain.gid, name: peerMain.name, host: peer.host, kind: 'main' },
    to: b.hostId,
    text: '',
    expiresAt: Date.now() + 60_000,
    ...extra,
  });
  const peerResults = (requestId: string) =>
    peerInbox.filter((e) => e.kind === 'SPAWN_RESULT' && e.result?.requestId === requestId);
  const peerResult = (requestId: string) =>
    waitFor(
      `SPAWN_RESULT for ${requestId}`,
      () => peerResults(requestId)[0]?.result as ControlResult | undefined,
    );

  beforeAll(async () => {
    tmux = await startTmuxServer();
    a = new GatewayProcess({
      hostId: uniqueHostId('spawnA'),
      env: { ...brokerEnv },
      config: { broker: { heartbeatMs } },
    });
    b = new GatewayProcess({
      hostId: uniqueHostId('spawnB'),
      env: { ...brokerEnv },
      config: {
        broker: { heartbeatMs },
        spawn: { tmuxSocket: tmux.socket, tmuxSession: sessionB },
        profiles,
      },
    });
    gateways.push(a, b);
    addTrust(b.home, peer.host, peer.keys.trustString);
    await Promise.all([a.start(), b.start()]);
    queues.push(controlSpec(a.hostId).name, controlSpec(b.hostId).name);
    main = await register(a, ['--kind', 'main', '--name', 'mainA']);
    queues.push(inboxName(main.gid));
    mcp = await connectMcp(a.mcpUrl, main.token);
    clients.push(mcp);
    await inRoster(b, main.gid, true);

    // The fake peer's requester: an inbox of its own (bound by its gid) and a signed PRESENCE.
    connection = await amqp.connect(brokerUri);
    channel = await connection.createConfirmChannel();
    const inbox = `test.spawnpeer.${peerMain.gid}`;
    queues.push(inbox);
    await listenAsPeerEntity(channel, peer, peerMain, inbox, peerInbox);
    await inRoster(b, peerMain.gid, true);
  });

  afterAll(async () => {
    for (const c of clients) await c.close().catch(() => {});
    await channel?.close().catch(() => {});
    await connection?.close().catch(() => {});
    for (const g of gateways) await g.dispose();
    await tmux?.kill();
    await deleteQueues(queues);
    await removeDeadLettersOf(gateways.map((g) => g.hostId));
    rmSync(peer.home, { recursive: true, force: true });
  });

  let spawned: Spawned;
  let spawnedPane: string;

  it('spawns a real agent on the other host: its window runs the profile command, it is in the roster, gets the brief and replies', async () => {
    const result = await spawnTool(mcp, {
      host: b.hostId,
      profile: 'standin',
      brief: 'review PR 7',
      name: 'rev7',
    });
    expect(result.isError, errorText(result)).toBeFalsy();
    spawned = result.structuredContent as unknown as Spawned;
    expect(spawned).toMatchObject({ status: 'running', host: b.hostId, name: 'rev7' });
    expect(spawned.gid).toMatch(/^[0-9a-f-]{36}$/);
    expect(spawned.traceId).toBeTruthy();
    const gid = spawned.gid as string;
    queues.push(inboxName(gid));

    // A real tmux window named after the entity, on the configured server and session.
    const window = (await windows(sessionB)).find((w) => w.name === 'rev7');
    expect(window, JSON.stringify(await windows(sessionB))).toBeDefined();
    spawnedPane = window?.pane as string;
    expect(window?.command).toContain('standInAgent.mjs');
    await paneShows(spawnedPane, 'stand-in agent ready');

    // Known on both hosts, as an agent its host spawned (the console offers Stop for those only).
    expect((await roster(b)).find((e) => e.gid === gid)).toMatchObject({
      name: 'rev7',
      host: b.hostId,
      spawned: true,
    });
    await inRoster(a, gid, true);
    await waitFor('rev7 announced to a as spawned', async () =>
      (await roster(a)).find((e) => e.gid === gid)?.spawned === true ? true : undefined,
    );
    expect((await roster(a)).find((e) => e.name === 'mainA')?.spawned).toBeUndefined();

    // The brief is its first message, from the requester; its answer comes back to the main.
    await paneShows(spawnedPane, `[bridge SEND from mainA@${a.hostId} msg `);
    await paneShows(spawnedPane, '] review PR 7');
    const reply = await drainUntil(
      mcp,
      'the agent’s reply to its brief',
      (m) => m.text === 'done: review PR 7',
    );
    expect(reply).toMatchObject({ kind: 'REPLY', from: { gid, name: 'rev7', host: b.hostId } });
    expect(reply.traceId).toBe(spawned.traceId);

    // An ordinary message from the main to its gid reaches its pane; the open send gets the answer.
    const sent = await callTool(mcp, 'bridge_send', {
      to: gid,
      text: 'also check the tests',
      wait_ms: 20_000,
    });
    expect(sent.isError, errorText(sent)).toBeFalsy();
    const { msgId, reply: answer } = sent.structuredContent as { msgId: string; reply: Message | null };
    await paneShows(spawnedPane, `msg ${msgId}] also check the tests`);
    expect(answer?.text).toBe('done: also check the tests');
  });

  it('launches once when the same SPAWN comes twice: a retried call with the same idempotency_key', async () => {
    const args = {
      host: b.hostId,
      profile: 'idle',
      brief: 'hold on',
      name: 'twice',
      idempotency_key: `twice-${suffix}`,
    };
    const first = await spawnTool(mcp, args);
    expect(first.isError, errorText(first)).toBeFalsy();
    const one = first.structuredContent as unknown as Spawned;
    expect(one.status).toBe('running');
    queues.push(inboxName(one.gid as string));

    const second = await spawnTool(mcp, { ...args, wait_ms: 5_000 });
    expect(second.isError, errorText(second)).toBeFalsy();
    const two = second.structuredContent as unknown as Spawned;
    expect(two.requestId).toBe(one.requestId);
    // A retry is answered with what the first call got (like a keyed bridge_send's msgId).
    expect(two).toMatchObject({ status: 'running', gid: one.gid, name: 'twice' });

    await sleep(500);
    expect((await windows(sessionB)).filter((w) => w.name === 'twice')).toHaveLength(1);
    expect((await roster(b)).filter((e) => e.name === 'twice')).toHaveLength(1);
    const launches = actorEvents(b.home, 'spawn', one.requestId).filter((e) => e.event === 'spawn.launching');
    expect(launches).toHaveLength(1);

    // Once that agent is stopped, the same key does not start another: the retry says so.
    const stop = await callTool(mcp, 'bridge_stop', { gid: one.gid, wait_ms: 20_000 });
    expect(stop.isError, errorText(stop)).toBeFalsy();
    const third = await spawnTool(mcp, { ...args, wait_ms: 5_000 });
    expect(third.isError).toBe(true);
    expect(errorText(third)).toMatch(/^NOT_SPAWNED: .*stopped/);
    expect((await windows(sessionB)).some((w) => w.name === 'twice')).toBe(false);
  });

  it('a retried bridge_spawn keeps the first call’s trace and send record', async () => {
    const args = {
      host: b.hostId,
      profile: 'idle',
      brief: 'x',
      name: 'trace',
      idempotency_key: `trace-${suffix}`,
    };
    const one = (await spawnTool(mcp, args)).structuredContent as unknown as Spawned;
    queues.push(inboxName(one.gid as string));
    const two = (await spawnTool(mcp, { ...args, wait_ms: 5_000 })).structuredContent as unknown as Spawned;
    await callTool(mcp, 'bridge_stop', { gid: one.gid, wait_ms: 20_000 });
    expect(two.requestId).toBe(one.requestId);
    expect(actorEvents(a.home, 'send', one.requestId).filter((e) => e.event === 'xstate.init')).toHaveLength(
      1,
    );
    expect(two.traceId).toBe(one.traceId);
  });

  it('launches once when the broker delivers the same signed SPAWN twice (redelivery)', async () => {
    const requestId = randomUUID();
    const spawn = peerEnvelope('SPAWN', {
      msgId: requestId,
      text: 'raw brief',
      spawn: { requestId, profile: 'standin', name: 'rawdup' },
    });
    await publishControl(spawn);
    await publishControl(spawn); // the exact same signed bytes again
    const result = await peerResult(requestId);
    expect(result).toMatchObject({ op: 'spawn', ok: true, name: 'rawdup', host: b.hostId });
    // However many answers the requester gets, they name the one agent.
    expect(new Set(peerResults(requestId).map((e) => e.result?.gid))).toEqual(new Set([result.gid]));
    queues.push(inboxName(result.gid as string));
    // The brief went to the new agent, which answered the requester across the broker.
    await waitFor('the raw-spawned agent’s reply', () =>
      peerInbox.find((e) => e.kind === 'REPLY' && e.text === 'done: raw brief'),
    );
    await sleep(1_000);
    expect((await windows(sessionB)).filter((w) => w.name === 'rawdup')).toHaveLength(1);
    expect((await roster(b)).filter((e) => e.name === 'rawdup')).toHaveLength(1);
    expect(b.log).toContain('SPAWN seen before: nothing launched again');
    const launches = actorEvents(b.home, 'spawn', requestId).filter((e) => e.event === 'spawn.launching');
    expect(launches).toHaveLength(1);

    // STOP over the wire, from the same requester.
    const stopId = randomUUID();
    await publishControl(
      peerEnvelope('STOP', { msgId: stopId, stop: { requestId: stopId, gid: result.gid as string } }),
    );
    expect(await peerResult(stopId)).toMatchObject({ op: 'stop', ok: true, gid: result.gid });
    await waitFor('the rawdup window to close', async () =>
      (await windows(sessionB)).some((w) => w.name === 'rawdup') ? undefined : true,
    );
  });

  it('the operator console stops an agent spawned on the other host, by bridge_stop’s rules', async () => {
    const spawned = (
      await spawnTool(mcp, { host: b.hostId, profile: 'idle', brief: 'x', name: 'by-console' })
    ).structuredContent as unknown as Spawned;
    expect(spawned.status).toBe('running');
    queues.push(inboxName(spawned.gid as string));
    await inRoster(a, spawned.gid as string, true);
    const printed = await a.cli(['console', '--json']);
    expect(printed.code, printed.stderr || printed.stdout).toBe(0);
    const session = await openConsoleSession((JSON.parse(printed.stdout) as { url: string }).url);

    const refused = await consolePost(session, '/ui/api/stop', { gid: main.gid });
    const refusal = await refused.json();
    expect(refusal, JSON.stringify(refusal)).toMatchObject({ error: { code: 'NOT_SPAWNED' } });
    const stopped = await consolePost(session, '/ui/api/stop', { gid: spawned.gid });
    expect(stopped.status).toBe(200);
    expect(await stopped.json()).toMatchObject({ status: 'done', result: { op: 'stop', ok: true } });
    await inRoster(a, spawned.gid as string, false);
    expect((await windows(sessionB)).some((w) => w.name === 'by-console')).toBe(false);
  });

  it('refuses to stop an entity it did not spawn', async () => {
    const result = await callTool(mcp, 'bridge_stop', { gid: main.gid, wait_ms: 10_000 });
    expect(result.isError).toBe(true);
    expect(errorText(result)).toMatch(/^NOT_SPAWNED: /);
    expect((await roster(a)).some((e) => e.gid === main.gid)).toBe(true);
  });

  it('refuses a request that carries a command, at the requester and on the target', async () => {
    const atA = await spawnTool(mcp, {
      host: b.hostId,
      profile: 'standin',
      brief: 'x',
      name: 'evil',
      command: 'rm -rf /',
    });
    expect(atA.isError).toBe(true);
    expect(errorText(atA)).toMatch(/^SPAWN_REFUSED: /);
    expect((atA.structuredContent as { error: { code: string } }).error.code).toBe('SPAWN_REFUSED');

    // A SPAWN that reaches B with a command in it anyway (not from a bridge gateway).
    const requestId = randomUUID();
    await publishControl(
      peerEnvelope('SPAWN', {
        msgId: requestId,
        text: 'x',
        spawn: { requestId, profile: 'standin', name: 'evil', command: 'rm -rf /' },
      }),
    );
    const refused = await peerResult(requestId);
    expect(refused).toMatchObject({ op: 'spawn', ok: false, code: 'SPAWN_REFUSED' });
    expect(refused.message).toContain('command');
    expect(refused.gid).toBeUndefined();
    expect((await windows(sessionB)).some((w) => w.name === 'evil')).toBe(false);
    expect((await roster(b)).some((e) => e.name === 'evil')).toBe(false);
    const states = actorEvents(b.home, 'spawn', requestId).map((e) => e.to_state);
    expect(states).not.toContain('launching');
    expect(states).toContain('refused');
  });

  it('stops the agent: window closed, gone from both rosters, later messages refused', async () => {
    const gid = spawned.gid as string;
    // A worker may not stop an agent someone else spawned.
    const bystander = await register(a, ['--kind', 'worker', '--name', 'bystander']);
    queues.push(inboxName(bystander.gid));
    const worker = await connectMcp(a.mcpUrl, bystander.token);
    const forbidden = await callTool(worker, 'bridge_stop', { gid, wait_ms: 20_000 });
    await worker.close();
    expect(forbidden.isError).toBe(true);
    expect(errorText(forbidden)).toMatch(/^FORBIDDEN: bystander@.* may not stop rev7/);
    expect((await windows(sessionB)).some((w) => w.name === 'rev7')).toBe(true);

    const result = await callTool(mcp, 'bridge_stop', { gid, wait_ms: 20_000 });
    expect(result.isError, errorText(result)).toBeFalsy();
    expect(result.structuredContent).toMatchObject({ status: 'stopped', host: b.hostId });

    expect((await windows(sessionB)).some((w) => w.name === 'rev7')).toBe(false);
    await inRoster(b, gid, false);
    await inRoster(a, gid, false);

    const byGid = await callTool(mcp, 'bridge_send', { to: gid, text: 'still there?' });
    expect(byGid.isError).toBe(true);
    expect(errorText(byGid)).toMatch(/^UNKNOWN_RECIPIENT: /);
    const byName = await callTool(mcp, 'bridge_send', { to: `rev7@${b.hostId}`, text: 'still there?' });
    expect(byName.isError).toBe(true);
    expect(errorText(byName)).toMatch(/^UNKNOWN_RECIPIENT: /);

    const again = await callTool(mcp, 'bridge_stop', { gid, wait_ms: 20_000 });
    expect(again.isError).toBe(true);
    expect(errorText(again)).toMatch(/^UNKNOWN_RECIPIENT: /);
  });

  it('records the spawn actor’s transitions on the target host under the traceId the tool returned', async () => {
    const rows = await waitFor('the stopped spawn in B’s event log', () => {
      const events = actorEvents(b.home, 'spawn', spawned.requestId);
      return events.some((e) => e.to_state === 'stopped') ? events : undefined;
    });
    const states = rows.map((e) => e.to_state).filter((s, i, all) => s !== all[i - 1]);
    expect(states).toEqual(['requested', 'launching', 'running', 'stopped']);
    expect(new Set(rows.map((e) => e.trace_id))).toEqual(new Set([spawned.traceId]));
    // The brief's delivery to the agent carries the same trace.
    const db = new Database(join(b.home, 'events.db'), { readonly: true, fileMustExist: true });
    try {
      const deliveries = db
        .prepare<[string], { actor_id: string }>(
          "SELECT actor_id FROM event_log WHERE actor_kind = 'delivery' AND trace_id = ?",
        )
        .all(spawned.traceId);
      const toAgent = deliveries.filter(
        (row) => parseDeliveryActorId(row.actor_id)?.recipient === spawned.gid,
      );
      expect(toAgent.length).toBeGreaterThan(0);
    } finally {
      db.close();
    }
  });
});

describe('spawn / stop on a single-host gateway (no broker)', () => {
  let tmux: TmuxTestServer;
  let solo: GatewayProcess;
  let mcp: Client;
  const session = `solo-${suffix}`;

  beforeAll(async () => {
    tmux = await startTmuxServer();
    solo = new GatewayProcess({
      hostId: uniqueHostId('spawnSolo'),
      config: {
        spawn: { tmuxSocket: tmux.socket, tmuxSession: session },
        profiles: {
          ...profiles,
          // Started as a connected Claude Code would be (its flags are appended and ignored here),
          // with an MCP client that lists the tools 3 s after its handshake.
          slowTools: { command: standIn, agent: 'claude', env: { BRIDGE_LIST_TOOLS_AFTER_MS: '3000' } },
          // On an agent's own protocol, with an agent that exits at once: its host never answers.
          brokenNative: { command: 'false', path: 'acp' },
        },
      },
    });
    await solo.start();
    const result = await solo.cli(['register', '--kind', 'main', '--name', 'mainS', '--json']);
    expect(result.code, result.stderr || result.stdout).toBe(0);
    mcp = await connectMcp(solo.mcpUrl, (JSON.parse(result.stdout) as Registered).token);
  });

  afterAll(async () => {
    await mcp?.close().catch(() => {});
    await solo?.dispose();
    await tmux?.kill();
  });

  /** The names of the session's windows (none once the session is gone). */
  const windowNames = async (): Promise<string[]> =>
    (await tmux.run('list-windows', '-t', `=${session}`, '-F', '#{window_name}').catch(() => '')).split('\n');
  /** Whether the solo gateway's roster holds an entity that `is`. */
  const inRoster = async (is: (e: { gid: string; name: string }) => boolean): Promise<boolean> =>
    ((await solo.roster()) as Array<{ gid: string; name: string }>).some(is);

  it('spawns on its own host, delivers the brief, answers, and stops', async () => {
    const result = await callTool(mcp, 'bridge_spawn', {
      host: solo.hostId,
      profile: 'standin',
      brief: 'review PR 9',
      name: 'rev9',
      wait_ms: 30_000,
    });
    expect(result.isError, errorText(result)).toBeFalsy();
    const spawned = result.structuredContent as unknown as Spawned;
    expect(spawned).toMatchObject({ status: 'running', host: solo.hostId, name: 'rev9' });
    const list = await tmux.run('list-windows', '-t', `=${session}`, '-F', '#{window_name}\t#{pane_id}');
    const pane = list
      .split('\n')
      .map((l) => l.split('\t'))
      .find(([name]) => name === 'rev9')?.[1] as string;
    expect(pane, list).toBeDefined();
    await waitFor('the solo stand-in', async () =>
      (await tmux.capture(pane)).includes('stand-in agent ready') ? true : undefined,
    );
    const reply = await drainUntil(mcp, 'the reply to the brief', (m) => m.text === 'done: review PR 9');
    expect(reply).toMatchObject({ kind: 'REPLY', from: { gid: spawned.gid, name: 'rev9' } });

    const stopped = await callTool(mcp, 'bridge_stop', { gid: spawned.gid, wait_ms: 20_000 });
    expect(stopped.isError, errorText(stopped)).toBeFalsy();
    expect(stopped.structuredContent).toMatchObject({ status: 'stopped', host: solo.hostId });
    expect(await windowNames()).not.toContain('rev9');
    expect(await inRoster((e) => e.gid === spawned.gid)).toBe(false);
    const send = await callTool(mcp, 'bridge_send', { to: spawned.gid, text: 'still there?' });
    expect(send.isError).toBe(true);
    expect(errorText(send)).toMatch(/^UNKNOWN_RECIPIENT: /);

    const rows = actorEvents(solo.home, 'spawn', spawned.requestId);
    const states = rows.map((e) => e.to_state).filter((s, i, all) => s !== all[i - 1]);
    expect(states).toEqual(['requested', 'launching', 'running', 'stopped']);
    expect(new Set(rows.map((e) => e.trace_id))).toEqual(new Set([spawned.traceId]));
  });

  it('a profile on an agent’s own protocol whose agent does not start fails the spawn at once, leaving no window and no entity', async () => {
    const result = await callTool(mcp, 'bridge_spawn', {
      host: solo.hostId,
      profile: 'brokenNative',
      brief: 'never read',
      name: 'broken1',
      wait_ms: 30_000,
    });
    expect(result.isError).toBe(true);
    expect(errorText(result)).toMatch(/^LAUNCH_FAILED: .*exited before it answered: its agent did not start/);
    expect(await windowNames()).not.toContain('broken1');
    expect(await inRoster((e) => e.name === 'broken1')).toBe(false);
  });

  it("a connected agent's brief waits until its MCP client has listed bridge's tools, not only for the handshake", async () => {
    const result = await callTool(mcp, 'bridge_spawn', {
      host: solo.hostId,
      profile: 'slowTools',
      brief: 'review PR 10',
      name: 'rev10',
      wait_ms: 30_000,
    });
    expect(result.isError, errorText(result)).toBeFalsy();
    const spawned = result.structuredContent as unknown as Spawned;
    expect(spawned).toMatchObject({ status: 'running', name: 'rev10' });
    const reply = await drainUntil(mcp, 'the reply to the brief', (m) => m.text.endsWith('review PR 10'));
    // Let in at the end of the handshake, the brief came 3 s before the tools: "no tools yet".
    expect(reply.text).toBe('done: review PR 10');
    const stopped = await callTool(mcp, 'bridge_stop', { gid: spawned.gid, wait_ms: 20_000 });
    expect(stopped.isError, errorText(stopped)).toBeFalsy();
  });
});
