import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SimulatedClock } from 'xstate';
import { loadConfig } from '../../src/config/loadConfig.js';
import { BridgeError, ErrorCode } from '../../src/errors.js';
import { Gateway } from '../../src/gateway/Gateway.js';
import { ActorCell } from '../../src/kernel/ActorCell.js';
import { readActorInput } from '../../src/kernel/readActorInput.js';
import { silentLogger } from '../../src/log/logger.js';
import { type TurnInput, turnMachine } from '../../src/machines/turnMachine.js';
import { deliveryActorId } from '../../src/store/actorIds.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { createHlc } from '../../src/wire/hlc.js';
import { RecordingPane } from '../support/RecordingPane.js';

let dir: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'bridge-actorinput-int-'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** Rewrites the data of one actor's first event, as a damaged or foreign log would hold it. */
function rewriteFirstRow(
  file: string,
  kind: string,
  id: string,
  set: { event?: string; data?: unknown },
): void {
  const db = new Database(file);
  try {
    const first = db
      .prepare('SELECT seq FROM event_log WHERE actor_kind = ? AND actor_id = ? ORDER BY hlc LIMIT 1')
      .get(kind, id) as { seq: number };
    if (set.event !== undefined)
      db.prepare('UPDATE events SET event = ? WHERE seq = ?').run(set.event, first.seq);
    if (set.data !== undefined) {
      db.prepare('UPDATE events SET data = ? WHERE seq = ?').run(JSON.stringify(set.data), first.seq);
    }
  } finally {
    db.close();
  }
}

describe('readActorInput: an actor recorded input, parsed by its machine input schema', () => {
  const turn: TurnInput = {
    turnId: 'turn-1',
    askMsgId: 'ask-1',
    traceId: 'trace-1',
    asker: 'asker-gid',
    recipient: 'recipient-gid',
    startedAt: 1_000,
    deadline: 61_000,
  };

  async function storeWithTurn(): Promise<{ store: Store; file: string }> {
    const file = join(dir, 'events.db');
    const store = openStore({ file });
    const clock = new SimulatedClock();
    const deps = { store, hlc: createHlc(() => clock.now()), clock, host: 'h1', logger: silentLogger() };
    ActorCell.create(
      turnMachine,
      turn,
      { kind: 'turn', id: turn.turnId, traceId: turn.traceId, msgId: turn.askMsgId, owner: turn.asker },
      deps,
    );
    await store.batch.flush();
    return { store, file };
  }

  it('returns the input the actor was created with, and undefined for an actor the log does not hold', async () => {
    const { store } = await storeWithTurn();
    try {
      expect(readActorInput(store, 'turn', turn.turnId)).toEqual(turn);
      expect(readActorInput(store, 'turn', 'no-such-turn')).toBeUndefined();
    } finally {
      await store.close();
    }
  });

  it('a first row the schema refuses is a damaged row named by its seq, not a guess', async () => {
    const { store, file } = await storeWithTurn();
    try {
      rewriteFirstRow(file, 'turn', turn.turnId, { data: { ...turn, deadline: 'soon' } });
      expect(() => readActorInput(store, 'turn', turn.turnId)).toThrow(
        expect.objectContaining({
          code: ErrorCode.badStore,
          message: expect.stringMatching(
            /damaged row, events seq=\d+ \(the first of turn turn-1\).*deadline/,
          ),
        }),
      );
    } finally {
      await store.close();
    }
  });

  it('a first row that is no creation is a damaged row too', async () => {
    const { store, file } = await storeWithTurn();
    try {
      rewriteFirstRow(file, 'turn', turn.turnId, { event: 'turn.answered' });
      expect(() => readActorInput(store, 'turn', turn.turnId)).toThrow(
        /it is a turn\.answered, not the actor's creation/,
      );
    } finally {
      await store.close();
    }
  });
});

describe('bridge_answer reads the ASK from its delivery input', () => {
  it('an ASK whose recorded delivery input does not parse is refused as a damaged row, never answered', async () => {
    const home = join(dir, 'home');
    const clock = new SimulatedClock();
    clock.set(1_700_000_000_000);
    const { config } = loadConfig({ env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: 'h1' } });
    const pane = new RecordingPane();
    const gateway = new Gateway({ config, logger: silentLogger(), clock, createInjector: () => pane });
    await gateway.start();
    try {
      const asker = await gateway.services.registrations.register({ kind: 'main', name: 'asker' });
      const main = await gateway.services.registrations.register({ kind: 'main', name: 'answerer' });
      const askerEntity = gateway.directory.authenticate(asker.token)!;
      const answerer = gateway.directory.authenticate(main.token)!;
      // The ask stays open (nobody answers within this test); the ASK is held for the answerer.
      const hangUp = new AbortController();
      const asking = gateway.services.asks.ask(askerEntity, {
        to: 'answerer',
        question: 'ready?',
        timeoutMs: 60_000,
        signal: hangUp.signal,
      });
      let askId: string | undefined;
      for (let i = 0; i < 50 && askId === undefined; i++) {
        await gateway.store.batch.flush();
        const db = new Database(join(home, 'events.db'), { readonly: true });
        const row = db
          .prepare(
            "SELECT msg_id FROM event_log WHERE actor_kind = 'delivery' AND event = 'xstate.init' LIMIT 1",
          )
          .get() as { msg_id: string } | undefined;
        db.close();
        askId = row?.msg_id;
        if (askId === undefined) await new Promise((r) => setTimeout(r, 10));
      }
      expect(askId).toBeDefined();
      const id = deliveryActorId(askId as string, main.gid);
      // A sender that is no gid: the old read took it on trust and answered to it.
      const db = new Database(join(home, 'events.db'));
      const first = db
        .prepare(
          "SELECT seq, data FROM event_log WHERE actor_kind = 'delivery' AND actor_id = ? ORDER BY hlc LIMIT 1",
        )
        .get(id) as { seq: number; data: string };
      db.prepare('UPDATE events SET data = ? WHERE seq = ?').run(
        JSON.stringify({ ...JSON.parse(first.data), sender: 42 }),
        first.seq,
      );
      db.close();
      const answered = gateway.services.asks.answer(answerer, askId as string, 'yes');
      await expect(answered).rejects.toBeInstanceOf(BridgeError);
      await expect(answered).rejects.toMatchObject({
        code: ErrorCode.badStore,
        message: expect.stringContaining(`the first of delivery ${id}`),
      });
      hangUp.abort();
      await expect(asking).rejects.toMatchObject({ code: ErrorCode.askAbandoned });
    } finally {
      await gateway.stop();
    }
  });
});
