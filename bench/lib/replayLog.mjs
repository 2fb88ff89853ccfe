import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { initEvent } from '#bridge/kernel/parseRecordedEvent';
import { pureInitialTransition, pureTransition } from '#bridge/kernel/pureTransition';
import { stateName } from '#bridge/kernel/stateName';
import { machines } from '#bridge/machines/index';
import { exportTrace } from '#bridge/replay/exportTrace';
import { replayTrace } from '#bridge/replay/replayTrace';
import { openStore } from '#bridge/store/openStore';
import { createHlc } from '#bridge/wire/hlc';

/**
 * Generated event logs for the replay benchmark: three hosts' `events.db` files (opened through
 * the project's `openStore`, so the schema is the real one) holding what a busy federation
 * records, and an `agentbridge export` (exportTrace) of each. Cached under bench/.cache/ by size and
 * generator version; a cache entry is complete once its manifest exists.
 *
 * What the logs hold: each host starts its broker actor and its entities (two mains and an
 * orchestrator pulling messages, 30 workers in panes); then conversations, ~250 a second across
 * the federation: half start at a main or orchestrator (nine in ten to a worker), half at a
 * worker (to a main or orchestrator half the time), 85% to another host; half the workers that
 * get a SEND answer with a REPLY in the same trace once done with it.
 * A cross-host message is, on the sender, a send actor (`xstate.init` with the send machine's
 * input, `send.published`, `send.confirmed`; 1% `send.failed` and a republish) and on the
 * receiver, after the network delay, a delivery actor (`xstate.init` with the delivery input)
 * that goes, for a puller, `delivery.hold`, then `delivery.handedOver` and `delivery.acked` in
 * its next drain (or at once to an open bridge_send; 2% returned and offered again), and for a
 * worker, one message at a time in arrival order while its pane is idle, `delivery.inject`,
 * `delivery.injected`, `delivery.acked` (2% a failed typing, the backoff timer's event and a
 * retry), the worker's entity going `entity.busy` and `entity.idle` again. A local message is
 * `send.routedLocal` and the delivery on the same host.
 *
 * Clocks: each host has its own hybrid logical clock (the real `createHlc`) over its own wall
 * clock: beta's runs two minutes behind, gamma's 350 ms ahead. A receive merges the message's
 * stamp (which comes after its send actor's creation) before the delivery is created, as the
 * federation does, so every receive sorts after its send.
 *
 * Every actor is driven through the current machine with the pure transition functions as the
 * gateway's ActorCell does (an event the machine does not take would not be recorded, and
 * fails the generation), so the recorded states are what the machines compute: a re-run check
 * must find nothing. Deterministic (seeded), and streaming: only in-flight actors are in memory.
 */

/** Bumped whenever what the generator writes changes: old cache entries are then ignored. */
export const generatorVersion = 2;

export const replayHosts = [
  { host: 'alpha', skewMs: 0 },
  { host: 'beta', skewMs: -120_000 },
  { host: 'gamma', skewMs: 350 },
];

const cacheRoot = new URL('../.cache/', import.meta.url).pathname;

/**
 * The cached logs of at least `events` events, generated first if missing. Returns
 * `{ dir, events, hosts: [{ host, db, export, events }], generated: { seconds } | null, ... }`.
 * @param {{ events: number, log?: (line: string) => void }} options
 */
export async function replayLogs({ events, log = () => {} }) {
  const dir = join(cacheRoot, `replay-v${generatorVersion}-${events}`);
  const manifestFile = join(dir, 'manifest.txt');
  if (existsSync(manifestFile)) {
    return { ...JSON.parse(readFileSync(manifestFile, 'utf8')), dir, cached: true };
  }
  mkdirSync(cacheRoot, { recursive: true });
  // Nothing in the cache belongs in git.
  writeFileSync(join(cacheRoot, '.gitignore'), '*\n');
  const building = `${dir}.building-${process.pid}`;
  rmSync(building, { recursive: true, force: true });
  mkdirSync(building, { recursive: true });
  try {
    log(`replay: generating ${events} events across ${replayHosts.length} hosts in ${dir}`);
    const started = performance.now();
    const stats = await generateLogs({ dir: building, events });
    const generatedSeconds = (performance.now() - started) / 1000;
    const exportStarted = performance.now();
    for (const host of stats.hosts) {
      exportTrace({
        db: join(building, host.db),
        traceId: undefined,
        out: join(building, host.export),
        now: new Date(0),
      });
    }
    const exportSeconds = (performance.now() - exportStarted) / 1000;
    const validation = validateLogs(stats.hosts.map((host) => join(building, host.db)));
    const manifest = {
      generatorVersion,
      requested: events,
      ...stats,
      validation,
      generatedSeconds: Math.round(generatedSeconds * 10) / 10,
      exportSeconds: Math.round(exportSeconds * 10) / 10,
    };
    writeFileSync(join(building, 'manifest.txt'), `${JSON.stringify(manifest, null, 2)}\n`);
    rmSync(dir, { recursive: true, force: true });
    renameSync(building, dir);
    log(
      `replay: generated ${stats.events} events in ${manifest.generatedSeconds} s, exported in ${manifest.exportSeconds} s`,
    );
    return { ...manifest, dir, cached: false };
  } catch (err) {
    rmSync(building, { recursive: true, force: true });
    throw err;
  }
}

/**
 * Checks what the generator promises, once per cache entry: the logs replay with no
 * divergence, each host's clock only moves forward along its log, and in the merged timeline
 * every delivery's creation comes after its send's creation (receive after send, whatever the
 * hosts' wall clocks say). Memory stays bounded: only messages in flight are remembered.
 */
function validateLogs(paths) {
  const lastHlc = new Map();
  const sentFrom = new Map();
  const counts = { crossHost: 0, local: 0, receiveBeforeSend: 0, clockBackwards: 0 };
  const summary = replayTrace({
    sources: paths,
    traceId: undefined,
    check: true,
    onEvent: (event) => {
      if ((lastHlc.get(event.host) ?? '') >= event.hlc) counts.clockBackwards++;
      lastHlc.set(event.host, event.hlc);
      if (event.event !== initEvent) return;
      if (event.actorKind === 'send') sentFrom.set(event.msgId, event.host);
      if (event.actorKind === 'delivery') {
        const from = sentFrom.get(event.msgId);
        if (from === undefined) counts.receiveBeforeSend++;
        else if (from === event.host) counts.local++;
        else counts.crossHost++;
        sentFrom.delete(event.msgId);
      }
    },
  });
  const validation = { divergences: summary.divergences.length, actors: summary.actors, ...counts };
  if (validation.divergences > 0 || counts.receiveBeforeSend > 0 || counts.clockBackwards > 0) {
    throw new Error(`the generated logs are not what a real run records: ${JSON.stringify(validation)}`);
  }
  return validation;
}

/** Seeded PRNG (mulberry32): the same logs on every machine. */
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A binary min-heap of scheduled steps by (time, order of scheduling). */
class Agenda {
  items = [];
  order = 0;
  get size() {
    return this.items.length;
  }
  at(t, run) {
    const item = { t, n: this.order++, run };
    const heap = this.items;
    heap.push(item);
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(item, heap[parent])) break;
      heap[i] = heap[parent];
      i = parent;
    }
    heap[i] = item;
  }
  pop() {
    const heap = this.items;
    const top = heap[0];
    const last = heap.pop();
    if (heap.length > 0) {
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        if (left >= heap.length) break;
        const right = left + 1;
        const child = right < heap.length && before(heap[right], heap[left]) ? right : left;
        if (!before(heap[child], last)) break;
        heap[i] = heap[child];
        i = child;
      }
      heap[i] = last;
    }
    return top;
  }
}

function before(a, b) {
  return a.t < b.t || (a.t === b.t && a.n < b.n);
}

const insertSql = `INSERT INTO events (hlc, host, actor_kind, actor_id, trace_id, msg_id, event, from_state, to_state, data)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`;

async function generateLogs({ dir, events: target }) {
  const random = prng(0x6b1d6e);
  const between = (low, high) => low + random() * (high - low);
  const pick = (list) => list[Math.floor(random() * list.length)];
  const hex = (digits) => {
    let out = '';
    while (out.length < digits)
      out += Math.floor(random() * 0x100000000)
        .toString(16)
        .padStart(8, '0');
    return out.slice(0, digits);
  };
  const variant = () => '89ab'[Math.floor(random() * 4)];
  const uuidv4 = () => `${hex(8)}-${hex(4)}-4${hex(3)}-${variant()}${hex(3)}-${hex(12)}`;
  const uuidv7 = (ms) => {
    const time = Math.floor(ms).toString(16).padStart(12, '0');
    return `${time.slice(0, 8)}-${time.slice(8)}-7${hex(3)}-${variant()}${hex(3)}-${hex(12)}`;
  };

  // Simulated true time (ms since epoch); each host's wall clock is this plus its skew.
  const epoch = Date.UTC(2026, 10, 29, 12, 0, 0);
  let now = epoch;
  const agenda = new Agenda();
  let written = 0;

  const hosts = replayHosts.map(({ host, skewMs }) => {
    const store = openStore({ file: join(dir, `${host}.db`), synchronous: 'NORMAL', writerThread: false });
    const db = store.db;
    db.pragma('synchronous = OFF');
    const insert = db.prepare(insertSql);
    db.exec('BEGIN');
    return {
      host,
      skewMs,
      store,
      db,
      insert,
      events: 0,
      wall: () => Math.floor(now + skewMs),
      hlc: createHlc(() => Math.floor(now + skewMs)),
      /** @type {any[]} the generated entities: plain records the generator mutates */
      entities: [],
    };
  });

  /** An actor as ActorCell drives it: pure transitions, a row per transition taken. */
  const createActor = (host, kind, identity, input) => {
    const machine = machines[kind].machine;
    const [snapshot] = pureInitialTransition(machine, input);
    const actor = { host, kind, machine, snapshot, ...identity };
    record(actor, initEvent, input, null);
    return actor;
  };
  const send = (actor, event) => {
    if (actor.snapshot.status === 'done')
      throw new Error(`${actor.kind} ${actor.id} is done; got ${event.type}`);
    const from = stateName(actor.snapshot.value);
    const [next, actions] = pureTransition(actor.machine, actor.snapshot, event);
    if (next === actor.snapshot && actions.length === 0) {
      throw new Error(`the ${actor.kind} machine does not take ${event.type} in ${from}`);
    }
    actor.snapshot = next;
    const { type, ...data } = event;
    record(actor, type, Object.keys(data).length > 0 ? data : null, from);
  };
  const record = (actor, event, data, from) => {
    const host = actor.host;
    host.insert.run(
      host.hlc.tick(),
      host.host,
      actor.kind,
      actor.id,
      actor.traceId,
      actor.msgId,
      event,
      from,
      stateName(actor.snapshot.value),
      data === null ? null : JSON.stringify(data),
    );
    host.events++;
    written++;
    if (host.events % 200_000 === 0) {
      host.db.exec('COMMIT');
      host.db.exec('BEGIN');
    }
  };

  // Start-up: each host's broker connection and its entities.
  for (const host of hosts) {
    const broker = createActor(
      host,
      'broker',
      { id: `${host.host}/${host.hlc.last()}`, traceId: `broker/${host.host}`, msgId: null },
      { hostId: host.host, retryBaseMs: 500, retryMaxMs: 15_000 },
    );
    send(broker, { type: 'broker.connect' });
    now += between(5, 20);
    send(broker, { type: 'broker.connected' });
    const roster = [
      { kind: 'main', name: `lead-${host.host}`, mode: 'hold', groups: [] },
      { kind: 'main', name: `review-${host.host}`, mode: 'hold', groups: ['review'] },
      { kind: 'orchestrator', name: `orch-${host.host}`, mode: 'hold', groups: ['ops'] },
      ...Array.from({ length: 30 }, (_, i) => ({
        kind: 'worker',
        name: `w${i}-${host.host}`,
        mode: 'inject',
        groups: i % 2 === 0 ? ['build'] : ['review'],
      })),
    ];
    for (const spec of roster) {
      const gid = uuidv4();
      now += between(1, 30);
      const actor = createActor(
        host,
        'entity',
        { id: gid, traceId: gid, msgId: null },
        { gid, name: spec.name, kind: spec.kind, host: host.host, groups: spec.groups, mode: spec.mode },
      );
      send(actor, { type: 'entity.activated' });
      host.entities.push({
        ...spec,
        gid,
        host,
        actor,
        busy: false,
        pumping: false,
        queue: [],
        held: [],
        drain: false,
      });
    }
  }

  const text = () => Math.floor(between(40, 4000));

  /** One message from `from` to `to` (entities), at the current time. */
  const post = (from, to, kind, traceId) => {
    const msgId = uuidv7(from.host.wall());
    const size = text();
    const digest = hex(32);
    const cross = from.host !== to.host;
    const sendActor = createActor(
      from.host,
      'send',
      { id: msgId, traceId, msgId },
      { msgId, traceId, kind, sender: from.gid, recipient: to.gid, digest, size },
    );
    // The message's stamp comes after its send actor's creation (router.createSend).
    const stamp = from.host.hlc.tick();
    const expiresAt = from.host.wall() + 86_400_000;
    if (!cross) {
      send(sendActor, { type: 'send.routedLocal' });
      agenda.at(now + between(0.05, 0.3), () =>
        deliver(from, to, kind, traceId, msgId, digest, size, expiresAt),
      );
      return;
    }
    const confirm = () => {
      send(sendActor, { type: 'send.published' });
      agenda.at(now + between(0.8, 4), () => send(sendActor, { type: 'send.confirmed' }));
    };
    if (random() < 0.01) {
      // The broker refused it (blocked, unreachable); the caller's keyed retry publishes it again.
      send(sendActor, { type: 'send.published' });
      agenda.at(now + between(1, 5), () => {
        send(sendActor, { type: 'send.failed', code: 'BROKER_UNAVAILABLE', detail: 'channel closed' });
        agenda.at(now + between(200, 2000), confirm);
      });
      // It got through the first time after all; the receiver's dedup drops the second one.
      agenda.at(now + between(2, 9), () => {
        to.host.hlc.receive(stamp);
        deliver(from, to, kind, traceId, msgId, digest, size, expiresAt);
      });
      return;
    }
    confirm();
    agenda.at(now + between(1.5, 9), () => {
      to.host.hlc.receive(stamp);
      deliver(from, to, kind, traceId, msgId, digest, size, expiresAt);
    });
  };

  /** The receiving side: a delivery actor for `to`, then its way into a pane or a tool result. */
  const deliver = (from, to, kind, traceId, msgId, digest, size, expiresAt) => {
    const acceptedAt = to.host.wall();
    const delivery = createActor(
      to.host,
      'delivery',
      { id: `${msgId}/${to.gid}`, traceId, msgId },
      {
        msgId,
        traceId,
        recipient: to.gid,
        sender: from.gid,
        mode: to.mode,
        acceptedAt,
        deadline: expiresAt,
        maxAttempts: 5,
        retryBaseMs: 500,
        digest,
        size,
        kind,
      },
    );
    const message = { delivery, from, kind, traceId };
    if (to.mode === 'hold') {
      send(delivery, { type: 'delivery.hold' });
      if (random() < 0.3) {
        // The main was waiting in an open bridge_send: handed over at once.
        agenda.at(now + between(0.2, 2), () => handOver(to, [message], 'open-send'));
      } else {
        to.held.push(message);
        scheduleDrain(to);
      }
      return;
    }
    to.queue.push(message);
    pump(to);
  };

  /** A puller drains now and then: everything held is handed over, then acked. */
  const scheduleDrain = (entity) => {
    if (entity.drain) return;
    entity.drain = true;
    agenda.at(now + between(100, 2000), () => {
      entity.drain = false;
      const held = entity.held;
      entity.held = [];
      handOver(entity, held, 'drain');
    });
  };
  const handOver = (entity, messages, via) => {
    for (const { delivery } of messages) send(delivery, { type: 'delivery.handedOver', via });
    agenda.at(now + between(0.3, 3), () => {
      for (const message of messages) {
        if (random() < 0.02) {
          // The tool result never got there (connection gone): held again, offered again.
          send(message.delivery, { type: 'delivery.returned' });
          entity.held.push(message);
          scheduleDrain(entity);
        } else {
          send(message.delivery, { type: 'delivery.acked', via });
        }
      }
    });
  };

  /**
   * A pane takes one message at a time, in arrival order, and only while idle (R-DL2, R-DL4):
   * typed in, acked, the agent busy with it for a while, then idle again (and maybe replying).
   */
  const pump = (worker) => {
    if (worker.pumping || worker.busy || worker.queue.length === 0) return;
    worker.pumping = true;
    const message = worker.queue.shift();
    agenda.at(now + between(0.2, 1.5), () => inject(worker, message));
  };
  const inject = (worker, message) => {
    const { delivery } = message;
    send(delivery, { type: 'delivery.inject' });
    agenda.at(now + between(5, 40), () => {
      if (random() < 0.02) {
        send(delivery, { type: 'delivery.injectFailed', error: 'pane not ready (tmux send-keys exit 1)' });
        // The backoff timer (retryDelay) fires: back in line, typed again.
        agenda.at(now + 500, () => {
          send(delivery, { type: 'xstate.after.retryDelay.delivery.backoff' });
          agenda.at(now + between(0.2, 1), () => inject(worker, message));
        });
        return;
      }
      send(delivery, { type: 'delivery.injected' });
      worker.busy = true;
      agenda.at(now + between(0.2, 1), () => {
        send(delivery, { type: 'delivery.acked', via: 'pane' });
        worker.pumping = false;
      });
      agenda.at(now + between(1, 5), () => send(worker.actor, { type: 'entity.busy', status: 'working' }));
      agenda.at(now + between(30, 200), () => {
        send(worker.actor, { type: 'entity.idle' });
        worker.busy = false;
        if (message.kind === 'SEND' && random() < 0.5) {
          post(worker, message.from, 'REPLY', message.traceId);
        }
        pump(worker);
      });
    });
  };

  // New conversations arrive at ~250/s across the federation until the target is reached;
  // then everything in flight runs to its end (no actor is left half-way).
  // Half of them start at a main or orchestrator (mostly tasks for workers), half at a worker
  // (to a main half of the time); 85% cross hosts.
  const everyone = hosts.flatMap((host) => host.entities);
  const workers = everyone.filter((e) => e.mode === 'inject');
  const pullers = everyone.filter((e) => e.mode === 'hold');
  const conversation = () => {
    if (written >= target) return;
    const from = random() < 0.5 ? pick(pullers) : pick(workers);
    const toWorker = random() < (from.mode === 'hold' ? 0.9 : 0.5);
    const crossHost = random() < 0.85;
    const to = pick(
      (toWorker ? workers : pullers).filter((e) => e !== from && (e.host !== from.host) === crossHost),
    );
    post(from, to, 'SEND', uuidv7(from.host.wall()));
    agenda.at(now + -Math.log(1 - random()) * 4, conversation);
  };
  agenda.at(now + 1, conversation);
  while (agenda.size > 0) {
    const step = agenda.pop();
    now = step.t;
    step.run();
  }

  for (const host of hosts) {
    host.db.exec('COMMIT');
    host.db.pragma('wal_checkpoint(TRUNCATE)');
    await host.store.close();
  }
  return {
    events: written,
    hosts: hosts.map((host) => ({
      host: host.host,
      skewMs: host.skewMs,
      db: `${host.host}.db`,
      export: `${host.host}.ndjson`,
      events: host.events,
    })),
    simulatedSeconds: Math.round((now - epoch) / 100) / 10,
  };
}
