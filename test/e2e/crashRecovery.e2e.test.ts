import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';
import { startTmuxServer, type TmuxTestServer } from '../support/tmux.js';

const messages = Number(process.env.BRIDGE_CRASH_MESSAGES ?? 1000);
// One round in the suite: its kills are what explore the crash windows, not its length; more
// rounds (BRIDGE_CRASH_ROUNDS) sample more kill moments in a soak run.
const rounds = Number(process.env.BRIDGE_CRASH_ROUNDS ?? 1);
const killsPerRound = Number(process.env.BRIDGE_CRASH_KILLS ?? 6);

/**
 * Invariants 3 and 5 and R-DL5 under SIGKILL: 1,000 same-host messages flow from a main to a
 * worker in a real tmux pane while the gateway is killed -9 at random moments and restarted.
 * The sender retries with idempotency keys, as an agent would. At the end every message is in
 * the pane's output exactly once, in send order.
 */
// Each round ends on a condition (every message typed); its budget is what a loaded 2-core
// machine needs, not the e2e default (a CPU burner made a round take 180 s).
describe('SIGKILL during a same-host stream', { timeout: 480_000 }, () => {
  let tmux: TmuxTestServer;
  let dir: string;

  beforeAll(async () => {
    tmux = await startTmuxServer();
    dir = mkdtempSync(join(tmpdir(), 'bridge-crash-'));
  });
  afterAll(async () => {
    await tmux?.kill();
    rmSync(dir, { recursive: true, force: true });
  });

  for (let round = 1; round <= rounds; round++) {
    it(`round ${round}: ${messages} messages, ${killsPerRound} kills, every message typed once and in order`, async () => {
      const gateway = new GatewayProcess();
      const out = join(dir, `round-${round}.txt`);
      const pane = await tmux.newPane(`cat >> ${out}`);
      try {
        await gateway.start();
        const workerReg = await gateway.cli([
          'register',
          '--kind',
          'worker',
          '--name',
          'sink',
          '--tmux',
          pane,
          '--tmux-socket',
          tmux.socket,
          '--json',
        ]);
        expect(workerReg.code, workerReg.stderr || workerReg.stdout).toBe(0);
        const mainReg = await gateway.cli(['register', '--kind', 'main', '--name', 'source', '--json']);
        const { token } = JSON.parse(mainReg.stdout) as { token: string };

        let client: Client | undefined;
        let sent = 0;
        let retries = 0;
        const sender = (async () => {
          for (let i = 1; i <= messages; i++) {
            for (;;) {
              try {
                client ??= await connectMcp(gateway.mcpUrl, token);
                const result = await callTool(
                  client,
                  'bridge_send',
                  {
                    to: 'sink',
                    text: `seq-${i}`,
                    idempotency_key: `k-${i}`,
                  },
                  10_000,
                );
                if (result.isError) throw new Error(JSON.stringify(result.content));
                break;
              } catch {
                retries++;
                await client?.close().catch(() => {});
                client = undefined;
                await sleep(50);
              }
            }
            sent = i;
          }
        })();

        // Kill k lands at a random point of the stream's k-th part, so every round has all its
        // kills however fast the machine sends (a pause between kills ran out of stream).
        let kills = 0;
        const killer = (async () => {
          const part = messages / killsPerRound;
          for (let k = 0; k < killsPerRound; k++) {
            const at = Math.floor(k * part + Math.random() * part * 0.8);
            while (sent < at) await sleep(20);
            await gateway.kill9();
            kills++;
            await gateway.start();
          }
        })();

        await Promise.all([sender, killer]);
        await client?.close().catch(() => {});

        const lines = await waitForLines(out, messages, 60_000);
        const seqs = lines.map((line) => Number(/\] seq-(\d+)$/.exec(line)?.[1]));
        const expected = Array.from({ length: messages }, (_, i) => i + 1);
        const dupes = seqs.length - new Set(seqs).size;
        expect({ count: seqs.length, dupes, retries: retries >= 0 }).toEqual({
          count: messages,
          dupes: 0,
          retries: true,
        });
        expect(seqs).toEqual(expected);

        const status = await gateway.cli(['status', '--json']);
        const deliveries = (JSON.parse(status.stdout) as { deliveries: Record<string, number> }).deliveries;
        expect(deliveries).toEqual({ acked: messages });
        expect(kills).toBe(killsPerRound);

        // How the kills landed: deliveries resumed at restart, and interrupted injections that
        // recovery found submitted, still in the input (typed: Enter only) or absent (typed
        // again) — the R-DL5 window.
        const resumed = [...gateway.log.matchAll(/"resumedDeliveries":(\d+)/g)].map((m) => Number(m[1]));
        const db = new Database(join(gateway.home, 'events.db'), { readonly: true });
        const recovery = db
          .prepare(
            "SELECT json_extract(data, '$.where') AS found, count(*) AS n FROM event_log WHERE event = 'delivery.located' GROUP BY found",
          )
          .all();
        db.close();
        console.log(JSON.stringify({ round, kills, retries, resumedAtRestart: resumed.slice(1), recovery }));
      } finally {
        await gateway.dispose();
      }
    });
  }
});

async function waitForLines(file: string, count: number, ms: number): Promise<string[]> {
  const deadline = Date.now() + ms;
  let lines: string[] = [];
  while (Date.now() < deadline) {
    try {
      lines = readFileSync(file, 'utf8')
        .split('\n')
        .filter((l) => l.length > 0);
    } catch {
      lines = [];
    }
    if (lines.length >= count) {
      await sleep(500); // anything extra (a duplicate) would arrive now
      return readFileSync(file, 'utf8')
        .split('\n')
        .filter((l) => l.length > 0);
    }
    await sleep(100);
  }
  return lines;
}
