import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/loadConfig.js';
import { type Daemon, startDaemon } from '../../src/daemon/startDaemon.js';
import type { EntityActor } from '../../src/deliver/EntityActor.js';
import type { Gateway, Registration } from '../../src/gateway/Gateway.js';
import { createLogger } from '../../src/log/logger.js';
import { deliveryActorId, parseDeliveryActorId } from '../../src/store/actorIds.js';
import type { DeadLetterView } from '../../src/wire/deadLetterView.js';
import { type Envelope, schemaVersionString } from '../../src/wire/envelope.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { brokerEnv, brokerUri, waitFor } from '../support/federation.js';
import { runCli } from '../support/GatewayProcess.js';
import { sendEnvelope } from '../support/sendEnvelope.js';

/** Drains in process: the caller has the messages once the call returns, so it confirms. */
async function drained(gateway: Gateway, entity: EntityActor): Promise<Envelope[]> {
  const handover = await gateway.services.drains.drain(entity);
  handover.confirm();
  return handover.envelopes;
}

import type { LogLine } from '../support/signedPeer.js';
import { startTmuxServer, type TmuxTestServer } from '../support/tmux.js';

/** The wire limit the gateway derives from limits.maxTextBytes (text plus 16 KiB of envelope). */
const maxTextBytes = 1024;
const maxWireBytes = maxTextBytes + 16 * 1024;

/** One raw publish and what the gateway must make of it. */
interface Case {
  name: string;
  /** AMQP message-id, which the dead letter keeps: how this test finds its own in the shared DLQ. */
  id: string;
  body: (to: string) => Buffer;
  /** Dead-lettered with this reason and a detail matching `detail`, or accepted (`null`). */
  reason: 'rejected' | 'newer-major' | 'expired' | null;
  detail?: RegExp;
}

// Every inbox is bound to `broadcast.all` on the shared broker, so other tests' broadcasts may
// arrive too: what this test published is told apart by its (unique) sender.
const sender = {
  gid: randomUUID(),
  name: 'raw-publisher',
  host: uniqueHostId('elsewhere'),
  kind: 'main',
} as const;
const fromSender = (m: Envelope) => m.from.gid === sender.gid;

function envelope(to: string, fields: Record<string, unknown> = {}): Record<string, unknown> {
  return { ...sendEnvelope(sender, to), ...fields };
}

const json = (value: unknown) => Buffer.from(JSON.stringify(value), 'utf8');

/** Builds the cases for one recipient; every id is fresh, so the two recipients never share one. */
function casesFor(label: string): Case[] {
  const withId = (fields: Record<string, unknown>) => {
    const msgId = randomUUID();
    return { msgId, fields: { ...fields, msgId } };
  };
  const extra = withId({
    text: `${label}: extra fields are ignored`,
    v: '1.7',
    priority: 'urgent',
    attachments: [{ name: 'a.txt' }],
    from: { ...sender, avatar: 'x.png' },
  });
  const major = withId({ v: '3.0', text: `${label}: from the future`, signature: 'ed25519:...' });
  const big = withId({ text: `${label}: ${'x'.repeat(maxWireBytes + 1024)}` });
  const expired = withId({ text: `${label}: too late`, expiresAt: Date.now() - 60_000 });
  const missingId = randomUUID();
  const malformedId = randomUUID();
  const noVersionId = randomUUID();
  return [
    {
      name: 'malformed JSON',
      id: malformedId,
      body: () => Buffer.from(`{"v":"1.0","kind":"SEND","text":"${label}: cut off`, 'utf8'),
      reason: 'rejected',
      detail: /^malformed: not JSON/,
    },
    {
      name: 'missing fields',
      id: missingId,
      body: (to) => json({ v: '1.0', kind: 'SEND', msgId: missingId, to }),
      reason: 'rejected',
      // names each missing field
      detail: /^invalid: .*traceId.*hlc.*from.*text/,
    },
    {
      name: 'no schema version',
      id: noVersionId,
      body: (to) => {
        const { v: _v, ...rest } = envelope(to, { msgId: noVersionId, text: `${label}: no version` });
        return json(rest);
      },
      reason: 'rejected',
      detail: /^invalid: no schema version "v"/,
    },
    {
      name: 'unknown extra fields (a newer minor)',
      id: extra.msgId,
      body: (to) => json(envelope(to, extra.fields)),
      reason: null,
    },
    {
      name: 'a newer major version',
      id: major.msgId,
      body: (to) => json(envelope(to, major.fields)),
      reason: 'newer-major',
      detail: new RegExp(
        `^newer-major: schema 3\\.0 is newer than this gateway's ${schemaVersionString.replace('.', '\\.')}`,
      ),
    },
    {
      name: 'an oversized body',
      id: big.msgId,
      body: (to) => json(envelope(to, big.fields)),
      reason: 'rejected',
      detail: new RegExp(`^oversized: \\d+ bytes; this gateway reads at most ${maxWireBytes} \\(`),
    },
    {
      name: 'an expired expiresAt',
      id: expired.msgId,
      body: (to) => json(envelope(to, expired.fields)),
      reason: 'expired',
      detail: /^expired at \d{4}-\d\d-\d\dT/,
    },
  ];
}

interface WireGateway {
  hostId: string;
  home: string;
  daemon: Daemon;
  logLines: LogLine[];
  fatal: unknown[];
}

/**
 * An in-process gateway on the real broker, its pino lines captured as parsed JSON. Signing is
 * off: these tests publish raw bytes to reach the decoder (signatures have their own tests).
 */
async function startWireGateway(prefix: string): Promise<WireGateway> {
  const hostId = uniqueHostId(prefix);
  const home = mkdtempSync(join(tmpdir(), 'bridge-wire-'));
  const logLines: LogLine[] = [];
  const fatal: unknown[] = [];
  const { config } = loadConfig({
    env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: hostId, ...brokerEnv, BRIDGE_MCP_PORT: '0' },
  });
  const logger = createLogger({
    level: 'info',
    host: hostId,
    destination: { write: (line: string) => void logLines.push(JSON.parse(line) as LogLine) },
  });
  const daemon = await startDaemon({
    config: {
      ...config,
      limits: { ...config.limits, maxTextBytes },
      security: { ...config.security, signing: 'off' },
      // The worker's `cat` starts a moment before its messages arrive: no wait for it to settle.
      delivery: { ...config.delivery, programSettleMs: 0 },
    },
    logger,
    onFatal: (err) => fatal.push(err),
  });
  return { hostId, home, daemon, logLines, fatal };
}

async function publishRaw(channel: ConfirmChannel, routingKey: string, body: Buffer, messageId: string) {
  await new Promise<void>((resolve, reject) => {
    channel.publish(
      'bridge.msg',
      routingKey,
      body,
      { messageId, persistent: true, mandatory: true },
      (err) => (err ? reject(err) : resolve()),
    );
  });
}

/**
 * R-H3 and the hardening of the inbound edge: bytes published straight to `bridge.msg` with a
 * recipient's gid as the key, as a broken or hostile peer would. Each bad message ends in
 * `bridge.dlq` with its reason and a detail naming the problem, the gateway says so loudly,
 * nothing reaches the recipient, and the consumer keeps consuming. The gateway runs
 * in-process on the real broker; its recipients are a main and a worker in a real tmux pane.
 */
describe('bad bytes on the wire are dead-lettered with their reason, never delivered', () => {
  let hostId: string;
  let home: string;
  let daemon: Daemon;
  let logLines: LogLine[];
  let fatal: unknown[];
  let tmux: TmuxTestServer;
  let pane: string;
  let main: Registration;
  let worker: Registration;
  let connection: ChannelModel;
  let publisher: ConfirmChannel;
  const cases = new Map<string, Case[]>();
  const goodIds = new Map<string, string>();
  const ownIds = new Set<string>();
  const published = new Map<string, Buffer>();
  /** What the broker handed back as unroutable (a mandatory publish no queue is bound for). */
  const returned: string[] = [];

  beforeAll(async () => {
    tmux = await startTmuxServer();
    pane = await tmux.newPane('cat > /dev/null');
    ({ hostId, home, daemon, logLines, fatal } = await startWireGateway('wire'));
    main = await daemon.gateway.services.registrations.register({ kind: 'main', name: 'inbox' });
    worker = await daemon.gateway.services.registrations.register({
      kind: 'worker',
      name: 'typist',
      pane: { type: 'tmux', target: pane, socket: tmux.socket },
    });
    connection = await amqp.connect(brokerUri);
    publisher = await connection.createConfirmChannel();
    publisher.on('return', (message: { properties: { messageId?: string } }) => {
      returned.push(message.properties.messageId ?? '(no message id)');
    });
  });

  afterAll(async () => {
    await connection?.close().catch(() => {});
    await daemon?.stop();
    const queues = [
      `control.${hostId}`,
      ...[main, worker].filter(Boolean).map((r) => `agent.${r.gid}.inbox`),
    ];
    await deleteQueues(queues);
    // Whatever of ours is still in the shared DLQ (a failed run) goes too.
    await takeDeadLetters(ownIds, 0).catch(() => {});
    await tmux?.kill();
    if (home) rmSync(home, { recursive: true, force: true });
  });

  const publish = async (routingKey: string, body: Buffer, messageId: string) => {
    ownIds.add(messageId);
    published.set(messageId, body);
    await publishRaw(publisher, routingKey, body, messageId);
  };

  it('publishes the bad messages, then a good one, to a main and to a worker: each reaches its inbox', async () => {
    for (const recipient of [main, worker]) {
      const set = casesFor(recipient.name);
      cases.set(recipient.gid, set);
      for (const c of set) await publish(recipient.gid, c.body(recipient.gid), c.id);
      const good = envelope(recipient.gid, { text: `${recipient.name}: the good one after the bad ones` });
      goodIds.set(recipient.gid, good.msgId as string);
      await publish(recipient.gid, json(good), good.msgId as string);
    }
    // The broker returns an unroutable mandatory publish before it confirms it: by now every
    // return has come. None did, so each message is in a recipient's inbox, and what the tests
    // below find (or do not find) there is the gateway's doing.
    expect(returned).toEqual([]);
    expect(published.size).toBe(2 * (casesFor('count').length + 1));
  });

  it('the consumer keeps consuming: the main drains the extra-fields message and the good one, nothing else', async () => {
    const entity = daemon.gateway.directory.authenticate(main.token);
    expect(entity).toBeDefined();
    const texts: string[] = [];
    await waitFor('the good message in the main’s drain', async () => {
      texts.push(...(await drained(daemon.gateway, entity!)).filter(fromSender).map((m) => m.text));
      return texts.includes('inbox: the good one after the bad ones') ? true : undefined;
    });
    await sleep(300);
    texts.push(...(await drained(daemon.gateway, entity!)).filter(fromSender).map((m) => m.text));
    expect(texts).toEqual(['inbox: extra fields are ignored', 'inbox: the good one after the bad ones']);
    expect(fatal).toEqual([]);
  });

  it('the worker’s pane gets the extra-fields message and the good one typed, nothing else', async () => {
    const typed = await waitFor('the good message typed into the pane', async () => {
      const lines = (await tmux.capture(pane))
        .split('\n')
        .filter((l) => l.startsWith(`[bridge SEND from raw-publisher@${sender.host} `));
      return lines.some((l) => l.endsWith('typist: the good one after the bad ones')) ? lines : undefined;
    });
    const good = goodIds.get(worker.gid);
    const extra = cases.get(worker.gid)?.find((c) => c.reason === null)?.id;
    expect(typed).toEqual([
      `[bridge SEND from raw-publisher@${sender.host} msg ${extra}] typist: extra fields are ignored`,
      `[bridge SEND from raw-publisher@${sender.host} msg ${good}] typist: the good one after the bad ones`,
    ]);
  });

  it('records deliveries only for the accepted messages, and counts the dead letters by reason', async () => {
    const db = new Database(join(home, 'events.db'), { readonly: true });
    const rows = db
      .prepare("SELECT actor_id AS id, state FROM actors WHERE actor_kind = 'delivery'")
      .all() as Array<{ id: string; state: string }>;
    db.close();
    // Ours only (a broadcast from another test may have been delivered too).
    const delivered = rows.filter((row) => ownIds.has(parseDeliveryActorId(row.id)?.msgId ?? row.id));
    const accepted = [main, worker].flatMap((r) => [
      deliveryActorId(`${cases.get(r.gid)?.find((c) => c.reason === null)?.id}`, r.gid),
      deliveryActorId(`${goodIds.get(r.gid)}`, r.gid),
    ]);
    expect(delivered.map((d) => d.id).sort()).toEqual(accepted.sort());
    expect(delivered.every((d) => d.state === 'acked')).toBe(true);

    const status = await daemon.gateway.services.status.status();
    expect(status.deadLetters).toEqual({ rejected: 8, 'newer-major': 2, expired: 2 });
  });

  it('logs a loud line for each refusal, naming the message, its reason and the problem', () => {
    for (const [gid, set] of cases) {
      for (const c of set.filter((x) => x.reason !== null)) {
        const line = logLines.find((l) => l.msgId === c.id);
        expect(line, `${c.name} to ${gid}`).toMatchObject({
          level: 50,
          msg: 'refused a message from the broker; dead-lettered with its reason',
          reason: c.reason,
          routingKey: gid,
        });
        expect(line?.detail, c.name).toMatch(c.detail as RegExp);
      }
    }
  });

  it('`agentbridge dlq list --json` shows each with its reason and detail', async () => {
    const expected = [...cases.values()].flat().filter((c) => c.reason !== null);
    const listed = await waitFor(
      'our dead letters in `agentbridge dlq list`',
      async () => {
        const result = await runCli(['dlq', 'list', '--json', '--max', '10000'], { BRIDGE_HOME: home });
        expect(result.code, result.stderr || result.stdout).toBe(0);
        const letters = (JSON.parse(result.stdout) as DeadLetterView[]).filter(
          (l) => l.msgId !== undefined && ownIds.has(l.msgId),
        );
        return letters.length >= expected.length ? letters : undefined;
      },
      20_000,
    );
    for (const c of expected) {
      const letter = listed.find((l) => l.msgId === c.id);
      expect(letter, c.name).toMatchObject({ reason: c.reason, host: hostId });
      expect(letter?.detail, c.name).toMatch(c.detail as RegExp);
      expect(letter?.queue, c.name).toBe(`agent.${letter?.routingKey}.inbox`);
    }
    expect(listed).toHaveLength(expected.length); // the accepted ones are not there
  });

  it('each bad message is in bridge.dlq with x-bridge-reason and a detail naming the problem', async () => {
    const expected = [...cases.entries()].flatMap(([gid, set]) =>
      set.filter((c) => c.reason !== null).map((c) => ({ gid, c })),
    );
    const letters = await takeDeadLetters(ownIds, expected.length);
    expect(letters).toHaveLength(expected.length);
    for (const { gid, c } of expected) {
      const letter = letters.find((l) => l.messageId === c.id);
      expect(letter, c.name).toBeDefined();
      expect(letter?.headers['x-bridge-reason'], c.name).toBe(c.reason);
      expect(String(letter?.headers['x-bridge-detail']), c.name).toMatch(c.detail as RegExp);
      expect(letter?.headers['x-bridge-routing-key'], c.name).toBe(gid);
      expect(letter?.headers['x-bridge-host'], c.name).toBe(hostId);
      // The body is kept as it came, for the operator.
      expect(letter?.body.equals(published.get(c.id) as Buffer), c.name).toBe(true);
    }
  });
});

/**
 * A field that passes the envelope schema but not the code behind it: `hlc` is only checked to
 * be a string, and the receive path decodes it as a hybrid-logical-clock time.
 */
describe('an envelope whose hlc is not a clock time', () => {
  let gw: WireGateway | undefined;
  let main: Registration | undefined;
  let connection: ChannelModel | undefined;
  const ids = new Set<string>();

  afterAll(async () => {
    await connection?.close().catch(() => {});
    await gw?.daemon.stop();
    if (gw) await deleteQueues([`control.${gw.hostId}`, ...(main ? [`agent.${main.gid}.inbox`] : [])]);
    await takeDeadLetters(ids, 0).catch(() => {});
    if (gw) rmSync(gw.home, { recursive: true, force: true });
  });

  it('is dead-lettered as rejected, and the good message after it is still delivered', async () => {
    gw = await startWireGateway('wirehlc');
    main = await gw.daemon.gateway.services.registrations.register({ kind: 'main', name: 'inbox' });
    connection = await amqp.connect(brokerUri);
    const channel = await connection.createConfirmChannel();
    const bad = envelope(main.gid, { hlc: 'yesterday', text: 'bad clock' });
    const good = envelope(main.gid, { text: 'after the bad clock' });
    for (const message of [bad, good]) {
      ids.add(message.msgId as string);
      await publishRaw(channel, main.gid, json(message), message.msgId as string);
    }

    const entity = gw.daemon.gateway.directory.authenticate(main.token)!;
    const texts: string[] = [];
    const deadline = Date.now() + 10_000;
    while (!texts.includes('after the bad clock') && Date.now() < deadline) {
      texts.push(...(await drained(gw.daemon.gateway, entity)).filter(fromSender).map((m) => m.text));
      await sleep(100);
    }
    const channelErrors = gw.logLines.filter((l) => l.msg === 'broker consumer channel error');
    expect({ texts, channelErrors: channelErrors.length }).toEqual({
      texts: ['after the bad clock'],
      channelErrors: 0,
    });

    const [letter] = await takeDeadLetters(new Set([bad.msgId as string]), 1);
    expect(letter?.headers['x-bridge-reason']).toBe('rejected');
    expect(String(letter?.headers['x-bridge-detail'])).toMatch(/hlc/);
  });
});

interface TakenLetter {
  messageId: string;
  headers: Record<string, unknown>;
  body: Buffer;
}

/**
 * Takes (gets and acks) this test's dead letters out of the shared `bridge.dlq`, leaving
 * everyone else's: theirs are not acked and return to the queue when the channel closes.
 * Another reader may hold some for a moment, so it tries again until `count` are found.
 */
async function takeDeadLetters(ids: ReadonlySet<string>, count: number): Promise<TakenLetter[]> {
  const taken: TakenLetter[] = [];
  const deadline = Date.now() + 20_000;
  const connection = await amqp.connect(brokerUri);
  try {
    do {
      const channel = await connection.createChannel();
      for (;;) {
        const message = await channel.get('bridge.dlq', { noAck: false });
        if (message === false) break;
        const id = message.properties.messageId as string | undefined;
        if (id !== undefined && ids.has(id)) {
          channel.ack(message);
          taken.push({ messageId: id, headers: message.properties.headers ?? {}, body: message.content });
        }
      }
      await channel.close();
      if (taken.length >= count) break;
      await sleep(200);
    } while (Date.now() < deadline);
  } finally {
    await connection.close();
  }
  return taken;
}
