import {
  closeSync,
  copyFileSync,
  openSync,
  renameSync,
  rmSync,
  statSync,
  truncateSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uniqueHostId } from '../support/broker.js';
import { withEventsDb } from '../support/eventsDb.js';
import { GatewayProcess, runCli } from '../support/GatewayProcess.js';

interface Registered {
  gid: string;
  token: string;
}

/**
 * Issue 13 item 7: a damaged `events.db` stopped `agentbridge start` with `INTERNAL: internal error:
 * database disk image is malformed` (or a bare JSON parser message for a damaged row), exit 1,
 * naming no file. It must exit 2 like other bad local state, name the file (and the row), say
 * what lives in it and how to go on: restore it from a backup, or move it aside and start empty.
 */
describe('a damaged events.db stops agentbridge start with exit 2, naming the file and what to do', () => {
  let gateway: GatewayProcess;
  let keep: Registered;
  let file: string;
  let good: string;

  /** `agentbridge start` on the gateway's home, as the operator runs it; it must not come up. */
  const start = () => runCli(['start'], gateway.cliEnv());

  /** What every refusal of a damaged log says: the file, exit 2, and the two ways on. */
  const expectDamagedLogRefusal = (result: { code: number; stderr: string }) => {
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toMatch(/^agentbridge: BAD_STORE: /m);
    expect(result.stderr).toContain(file);
    expect(result.stderr).toMatch(/restore it from a backup/);
    expect(result.stderr).toMatch(/move it aside/);
    expect(result.stderr).toMatch(/registered entit/); // what an empty log loses
    expect(result.stderr).not.toMatch(/INTERNAL/);
  };

  beforeAll(async () => {
    gateway = new GatewayProcess({ hostId: uniqueHostId('brokenFiles') });
    await gateway.start();
    const registered = await gateway.cli(['register', '--kind', 'main', '--name', 'keep', '--json']);
    expect(registered.code, registered.stderr || registered.stdout).toBe(0);
    keep = JSON.parse(registered.stdout) as Registered;
    for (const name of ['a', 'b', 'c']) await gateway.cli(['register', '--kind', 'main', '--name', name]);
    // Held for keep (a main that has not drained): bodies and deliveries in the log.
    for (let i = 0; i < 5; i++) {
      const sent = await gateway.cli(['send', 'keep', `${i} ${'x'.repeat(60_000)}`], {
        BRIDGE_TOKEN: keep.token,
      });
      expect(sent.code, sent.stderr || sent.stdout).toBe(0);
    }
    expect(await gateway.stop()).toBe(0);
    file = join(gateway.home, 'events.db');
    good = join(gateway.home, 'events.db.good');
    copyFileSync(file, good);
  });

  afterAll(async () => {
    await gateway?.dispose();
  });

  const restoreGood = () => {
    for (const suffix of ['-wal', '-shm']) rmSync(`${file}${suffix}`, { force: true });
    copyFileSync(good, file);
  };

  it('truncated to half its size (SQLite: database disk image is malformed)', async () => {
    restoreGood();
    const size = statSync(file).size;
    expect(size).toBeGreaterThan(100_000);
    truncateSync(file, Math.floor(size / 2));
    expectDamagedLogRefusal(await start());
  });

  it('a table page overwritten (found at the first read, not at open)', async () => {
    restoreGood();
    const { root, pageSize } = withEventsDb(gateway.home, (db) => ({
      root: (
        db.prepare("SELECT rootpage FROM sqlite_master WHERE name = 'events'").get() as { rootpage: number }
      ).rootpage,
      pageSize: db.pragma('page_size', { simple: true }) as number,
    }));
    const fd = openSync(file, 'r+');
    writeSync(fd, Buffer.alloc(pageSize, 0x5a), 0, pageSize, (root - 1) * pageSize);
    closeSync(fd);
    expectDamagedLogRefusal(await start());
  });

  it('its header overwritten (SQLite: file is not a database)', async () => {
    restoreGood();
    const fd = openSync(file, 'r+');
    writeSync(fd, Buffer.from('this is no sqlite header at all!'), 0, 32, 0);
    closeSync(fd);
    expectDamagedLogRefusal(await start());
  });

  it("an entity's row whose groups are no JSON: names the row, the column, and the ways on", async () => {
    restoreGood();
    withEventsDb(gateway.home, (db) =>
      db.prepare("UPDATE entities SET groups = '{x' WHERE gid = ?").run(keep.gid),
    );
    const result = await start();
    expectDamagedLogRefusal(result);
    expect(result.stderr).toContain(`entities gid=${keep.gid}`);
    expect(result.stderr).toMatch(/groups is not JSON/);
    expect(result.stderr).toContain(`DELETE FROM entities WHERE gid = '${keep.gid}'`);
  });

  it('starts again once the damaged file is moved aside, as the message says', async () => {
    restoreGood();
    truncateSync(file, Math.floor(statSync(file).size / 2));
    expect((await start()).code).toBe(2);
    renameSync(file, `${file}.damaged`);
    for (const suffix of ['-wal', '-shm']) rmSync(`${file}${suffix}`, { force: true });
    await gateway.start();
    const roster = await gateway.cli(['roster', '--json']);
    expect(roster.code, roster.stderr || roster.stdout).toBe(0);
  });
});
