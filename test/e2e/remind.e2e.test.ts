import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { remindActorId } from '../../src/store/actorIds.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';
import { startTmuxServer, type TmuxTestServer } from '../support/tmux.js';
import { waitFor } from '../support/waitFor.js';

/**
 * U3 / R-DL3 with real parts: a gateway daemon as its own process, a private tmux server, and
 * MCP SDK clients. A main that does not drain is nudged (in its pane and as MCP log
 * notifications) at growing intervals, a drain stops that, and the reminder survives a
 * restart (SIGTERM and SIGKILL) where it was.
 */

const firstMs = 300;
const maxMs = 2_400;
/** How much later than due a nudge may be logged (commit, timers, a loaded CI machine). */
const lateMs = 600;
/** How much earlier than due: none in principle; a millisecond of clock rounding. */
const earlyMs = 5;

interface Registered {
  gid: string;
  token: string;
  name: string;
  host: string;
  kind: string;
}

interface RemindRow {
  seq: number;
  event: string;
  from: string | null;
  to: string;
  at: number | undefined;
}

interface NudgeData {
  type: string;
  entity: string;
  name: string;
  waiting: number;
  oldestAt: number;
  oldestFrom: string;
  text: string;
}

interface Heard {
  /** When the notification reached the client (ms since epoch). */
  receivedAt: number;
  data: NudgeData;
}

/** The wait before nudge `n + 1` of a round, as U3 has it: first, doubling, capped. */
const expectedInterval = (n: number): number => Math.min(maxMs, firstMs * 2 ** n);

describe('remind/backoff: mains that have not drained are nudged (U3, R-DL3)', () => {
  let gateway: GatewayProcess;
  let tmux: TmuxTestServer;
  const clients: Client[] = [];
  let sender: Registered;
  let senderClient: Client;
  let senderHeard: Heard[];

  const register = async (args: string[]): Promise<Registered> => {
    const result = await gateway.cli(['register', ...args, '--json']);
    expect(result.code, result.stderr || result.stdout).toBe(0);
    return JSON.parse(result.stdout) as Registered;
  };

  /** An MCP client with the entity's token that keeps every nudge notification it gets. */
  const listen = async (token: string): Promise<{ client: Client; heard: Heard[] }> => {
    const client = await connectMcp(gateway.mcpUrl, token);
    clients.push(client);
    const heard: Heard[] = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => {
      const { logger, data, level } = notification.params;
      const nudge = data as NudgeData | undefined;
      if (logger === 'bridge' && level === 'notice' && nudge?.type === 'nudge') {
        heard.push({ receivedAt: Date.now(), data: nudge });
      }
    });
    // The client opens its notification stream (GET /mcp) after initialize; let it get there.
    await sleep(200);
    return { client, heard };
  };

  /** The reminder actor's rows in the event log, oldest first. */
  const remindRows = (gid: string): RemindRow[] => {
    const db = new Database(join(gateway.home, 'events.db'), { readonly: true });
    try {
      const rows = db
        .prepare(
          `SELECT seq, event, from_state AS "from", to_state AS "to", data FROM event_log
           WHERE actor_kind = 'remind' AND actor_id = ? ORDER BY hlc`,
        )
        .all(remindActorId(gid)) as Array<Omit<RemindRow, 'at'> & { data: string | null }>;
      return rows.map(({ data, ...row }) => {
        const parsed = data === null ? {} : (JSON.parse(data) as { at?: number });
        return { ...row, at: parsed.at };
      });
    } finally {
      db.close();
    }
  };
  const rowsOf = (gid: string, event: string): RemindRow[] =>
    remindRows(gid).filter((r) => r.event === event);
  const atOf = (row: RemindRow | undefined): number => {
    expect(row?.at, `${row?.event} carries its time`).toBeTypeOf('number');
    return row?.at ?? Number.NaN;
  };
  /** Waits until the log has at least `n` remind.nudged rows for `gid`; returns them. */
  const nudgedRows = (gid: string, n: number, ms = 15_000): Promise<RemindRow[]> =>
    waitFor(
      `${n} remind.nudged rows for ${gid}`,
      () => {
        const rows = rowsOf(gid, 'remind.nudged');
        return rows.length >= n ? rows : undefined;
      },
      ms,
    );

  const send = async (to: string, text: string): Promise<string> => {
    const result = await callTool(senderClient, 'bridge_send', { to, text });
    expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
    return (result.structuredContent as { msgId: string }).msgId;
  };
  const drain = async (client: Client): Promise<Array<{ msgId: string; text: string }>> => {
    const result = await callTool(client, 'bridge_drain', {});
    expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
    return (result.structuredContent as { messages: Array<{ msgId: string; text: string }> }).messages;
  };
  const nudgeLines = async (pane: string): Promise<string[]> =>
    (await tmux.capture(pane)).split('\n').filter((line) => line.includes('[bridge NUDGE]'));

  /** Interval i (0-based) of a round must be ≈ expectedInterval(i): never early, a little late. */
  const expectInterval = (gap: number, i: number, label: string): void => {
    const expected = expectedInterval(i);
    expect(gap, `${label}: interval ${i + 1} (expected ≈${expected} ms)`).toBeGreaterThanOrEqual(
      expected - earlyMs,
    );
    expect(gap, `${label}: interval ${i + 1} (expected ≈${expected} ms)`).toBeLessThanOrEqual(
      expected + lateMs,
    );
  };
  const gapsOf = (times: number[]): number[] => times.slice(1).map((t, i) => t - (times[i] ?? t));

  /** Starts the gateway again on its home; the restart made every MCP session unknown. */
  const startAgain = async (): Promise<void> => {
    await gateway.start();
    senderClient = await connectMcp(gateway.mcpUrl, sender.token);
    clients.push(senderClient);
  };
  // Nudges go into `cat` panes started a moment before: no wait for a new program to settle.
  const delivery = { programSettleMs: 0 };
  const writeConfig = (enabled: boolean): void =>
    writeFileSync(
      join(gateway.home, 'config.json'),
      JSON.stringify({ remind: { enabled, firstMs, maxMs }, delivery }),
    );

  beforeAll(async () => {
    tmux = await startTmuxServer();
    gateway = new GatewayProcess({ config: { remind: { firstMs, maxMs }, delivery } });
    await gateway.start();
    // Another main, without a pane: it sends everything and never has anything waiting.
    sender = await register(['--kind', 'main', '--name', 'sender']);
    ({ client: senderClient, heard: senderHeard } = await listen(sender.token));
  });

  afterAll(async () => {
    for (const c of clients) await c.close().catch(() => {});
    await gateway?.dispose();
    await tmux?.kill();
  });

  it('nudges a main in its pane and over MCP at growing intervals, capped, until a drain stops them', async () => {
    const pane = await tmux.newPane('cat');
    const lead = await register([
      '--kind',
      'main',
      '--name',
      'lead',
      '--tmux',
      pane,
      '--tmux-socket',
      tmux.socket,
    ]);
    const { client: leadClient, heard } = await listen(lead.token);

    await send('lead', 'first: review the plan');
    await send('lead', 'second: and the tests');

    // Five nudges: 300, 600, 1200, 2400 (capped), 2400 after the messages started waiting.
    const nudged = await nudgedRows(lead.gid, 5, 20_000);
    const [held, ...more] = rowsOf(lead.gid, 'remind.held');
    expect(more, 'one round: held once').toEqual([]);
    const times = [atOf(held), ...nudged.map(atOf)];
    const gaps = gapsOf(times);
    console.log(`measured nudge intervals (event log, ms): ${gaps.join(', ')}`);
    gaps.forEach((gap, i) => {
      expectInterval(gap, i, 'event log');
    });
    // Growing while below the cap, then flat at the cap: each gap is its own doubled interval
    // (never early, at most lateMs late, above). Not one gap against the one before: a nudge
    // logged late on a loaded machine makes its gap long and the next one short.
    expect(Math.max(...gaps)).toBeLessThanOrEqual(maxMs + lateMs);

    // The pane shows them (typed in; `cat` echoes each line back).
    const lines = await waitFor('nudges typed into the main’s pane', async () => {
      const found = await nudgeLines(pane);
      return found.length >= nudged.length ? found : undefined;
    });
    expect(lines[0]).toMatch(
      new RegExp(
        `^\\[bridge NUDGE\\] 2 messages waiting for you \\(oldest from sender@${gateway.hostId}, \\d+ s ago\\): call bridge_drain$`,
      ),
    );

    // The main's own MCP session hears every nudge, as a log notification.
    await waitFor('nudge notifications', () => (heard.length >= nudged.length ? heard : undefined));
    expect(heard[0]?.data).toMatchObject({
      type: 'nudge',
      entity: lead.gid,
      name: 'lead',
      waiting: 2,
      oldestFrom: `sender@${gateway.hostId}`,
    });
    expect(heard[0]?.data.text).toContain('[bridge NUDGE] 2 messages waiting for you');
    expect(heard[0]?.data.text).toContain('call bridge_drain');
    expect(heard[0]?.data.oldestAt).toBeLessThanOrEqual(atOf(held));
    const heardGaps = gapsOf(heard.map((h) => h.receivedAt));
    console.log(`measured nudge intervals (MCP arrivals, ms): ${heardGaps.join(', ')}`);
    // Arrival times jitter more than the log; still: growing, then capped.
    expect(heardGaps[1] ?? 0).toBeGreaterThan(heardGaps[0] ?? 0);
    expect(heardGaps[2] ?? 0).toBeGreaterThan(heardGaps[1] ?? 0);
    expect(Math.max(...heardGaps)).toBeLessThanOrEqual(maxMs + lateMs);
    // Nobody else is nudged about lead's messages.
    expect(senderHeard).toEqual([]);

    // A drain takes everything; the reminder goes quiet and stays quiet.
    const messages = await drain(leadClient);
    expect(messages.map((m) => m.text)).toEqual(['first: review the plan', 'second: and the tests']);
    const drained = await waitFor('remind.drained in the log', () => rowsOf(lead.gid, 'remind.drained')[0]);
    expect(drained.to).toBe('quiet');
    const nudgesAtDrain = rowsOf(lead.gid, 'remind.nudged').length;
    const heardAtDrain = heard.length;
    const paneAtDrain = (await nudgeLines(pane)).length;
    await sleep(2 * maxMs);
    expect(rowsOf(lead.gid, 'remind.nudged')).toHaveLength(nudgesAtDrain);
    expect(heard).toHaveLength(heardAtDrain);
    expect(await nudgeLines(pane)).toHaveLength(paneAtDrain);
    expect(remindRows(lead.gid).at(-1)?.to).toBe('quiet');
    expect(await drain(leadClient)).toEqual([]);
  });

  it('never nudges an entity with nothing waiting, nor a worker whose messages are typed in', async () => {
    const idle = await register(['--kind', 'main', '--name', 'idle-main']);
    const { heard: idleHeard } = await listen(idle.token);
    const workerPane = await tmux.newPane('cat');
    const worker = await register([
      '--kind',
      'worker',
      '--name',
      'typist',
      '--tmux',
      workerPane,
      '--tmux-socket',
      tmux.socket,
    ]);
    const { heard: workerHeard } = await listen(worker.token);

    const msgId = await send('typist', 'format the changelog');
    await waitFor('the message typed into the worker’s pane', async () =>
      (await tmux.capture(workerPane)).includes(`msg ${msgId}] format the changelog`) ? true : undefined,
    );

    // Ten first intervals: long enough for several nudges, had any been due.
    await sleep(10 * firstMs);
    expect(idleHeard).toEqual([]);
    expect(workerHeard).toEqual([]);
    expect(remindRows(idle.gid).map((r) => r.event)).not.toContain('remind.nudged');
    expect(remindRows(idle.gid).map((r) => r.event)).not.toContain('remind.held');
    // A worker in a pane gets its messages typed in (inject mode): it has no reminder at all.
    expect(remindRows(worker.gid)).toEqual([]);
    expect(await nudgeLines(workerPane)).toEqual([]);
    expect(rowsOf(sender.gid, 'remind.nudged')).toEqual([]);
    expect(senderHeard).toEqual([]);
  });

  for (const how of ['stop', 'kill9'] as const) {
    it(`keeps nudging where it was across a gateway restart (${how === 'stop' ? 'SIGTERM' : 'SIGKILL'}), until a drain`, async () => {
      const pane = await tmux.newPane('cat');
      const name = `lead-${how}`;
      const main = await register([
        '--kind',
        'main',
        '--name',
        name,
        '--tmux',
        pane,
        '--tmux-socket',
        tmux.socket,
      ]);
      await listen(main.token);
      await send(name, `held across a ${how}`);

      // Two nudges (300, 600), then the gateway goes down with the third due 1200 ms later.
      // SIGTERM: back before it is due. SIGKILL: down past its due time, so it is overdue at start.
      const before = await nudgedRows(main.gid, 2);
      const downAt = Date.now();
      if (how === 'stop') await gateway.stop();
      else {
        await gateway.kill9();
        await sleep(expectedInterval(2) + 300);
      }
      await startAgain();
      const upAt = Date.now();
      const { client: mainClient, heard } = await listen(main.token);

      const nudged = await nudgedRows(main.gid, 4);
      const rows = remindRows(main.gid);
      expect(
        rows.filter((r) => r.event === 'remind.held'),
        'the same round: no new remind.held',
      ).toHaveLength(1);
      expect(rows.map((r) => r.event)).toContain('actor.rehydrated');
      const [held] = rowsOf(main.gid, 'remind.held');
      const times = [atOf(held), ...nudged.map(atOf)];
      const gaps = gapsOf(times);
      console.log(
        `measured nudge intervals across ${how} (event log, ms; down for ${upAt - downAt} ms after nudge 2): ${gaps.join(', ')}`,
      );
      expectInterval(gaps[0] ?? 0, 0, how);
      expectInterval(gaps[1] ?? 0, 1, how);
      // The third was due 1200 ms after the second: never earlier, later only by as much as the
      // gateway was down (a due time that passed while it was down fires at once on start).
      expect(gaps[2] ?? 0).toBeGreaterThanOrEqual(expectedInterval(2) - earlyMs);
      expect(atOf(nudged[2])).toBeLessThanOrEqual(
        Math.max(atOf(before[1]) + expectedInterval(2), upAt) + lateMs,
      );
      // And the one after continues the round: 2400 (capped), not a new round's 300 or 600.
      expectInterval(gaps[3] ?? 0, 3, how);

      // After the restart the pane and the new MCP session still get the nudges.
      await waitFor(
        'a nudge notification after the restart',
        () => (heard.length > 0 ? heard : undefined),
        10_000,
      );
      expect(heard[0]?.data).toMatchObject({
        entity: main.gid,
        waiting: 1,
        oldestFrom: `sender@${gateway.hostId}`,
      });
      expect((await nudgeLines(pane)).length).toBeGreaterThanOrEqual(nudged.length);

      // A drain after the restart stops them.
      const messages = await drain(mainClient);
      expect(messages.map((m) => m.text)).toEqual([`held across a ${how}`]);
      await waitFor('remind.drained in the log', () => rowsOf(main.gid, 'remind.drained')[0]);
      const nudgesAtDrain = rowsOf(main.gid, 'remind.nudged').length;
      const heardAtDrain = heard.length;
      // Longer than the capped interval the next nudge would have come after.
      await sleep(1.5 * maxMs);
      expect(rowsOf(main.gid, 'remind.nudged')).toHaveLength(nudgesAtDrain);
      expect(heard).toHaveLength(heardAtDrain);
      expect(remindRows(main.gid).at(-1)?.to).toBe('quiet');
    });
  }

  it('ends a round left waiting while reminders were off, instead of nudging about nothing', async () => {
    const name = 'lead-toggled';
    const main = await register(['--kind', 'main', '--name', name]);
    await send(name, 'drained while reminders are off');
    await nudgedRows(main.gid, 1);

    // Reminders off for one run: the main drains, and its reminder is not told (it is not open).
    try {
      writeConfig(false);
      await gateway.stop();
      await startAgain();
      const { client } = await listen(main.token);
      expect((await drain(client)).map((m) => m.text)).toEqual(['drained while reminders are off']);
    } finally {
      writeConfig(true);
    }
    await gateway.stop();
    expect(remindRows(main.gid).at(-1)?.to, 'left waiting, its next nudge due').toBe('waiting');

    // On again: the overdue nudge finds nothing waiting and ends the round, once.
    await startAgain();
    const { heard } = await listen(main.token);
    const ended = await waitFor('the round to end', () => {
      const last = remindRows(main.gid).at(-1);
      return last?.event === 'remind.drained' ? last : undefined;
    });
    expect(ended.to).toBe('quiet');
    const nudges = rowsOf(main.gid, 'remind.nudged').length;
    await sleep(maxMs);
    expect(rowsOf(main.gid, 'remind.nudged')).toHaveLength(nudges);
    expect(heard).toEqual([]);
    expect(remindRows(main.gid).at(-1)?.to).toBe('quiet');
  });
});
