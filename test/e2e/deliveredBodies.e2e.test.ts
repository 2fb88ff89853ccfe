import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { uniqueHostId } from '../support/broker.js';
import { GatewayProcess } from '../support/GatewayProcess.js';

/**
 * Issue 29 item 9: a delivered body stayed on disk. With `secure_delete` off, a body drained
 * minutes earlier was still in `events.db-wal`, and after a checkpoint in the free pages of
 * `events.db`, against the rule that the log keeps only a digest once delivered. No byte of a
 * delivered body may stay in `events.db`, `-wal` or `-shm` once the gateway has had a moment.
 */

const files = ['events.db', 'events.db-wal', 'events.db-shm'];

/** Where `marker`'s bytes are in the event log's files, as `file ×count`. */
function traces(home: string, marker: string): string[] {
  const needle = Buffer.from(marker);
  const found: string[] = [];
  for (const name of files) {
    const path = join(home, name);
    if (!existsSync(path)) continue;
    const bytes = readFileSync(path);
    let count = 0;
    for (let at = bytes.indexOf(needle); at !== -1; at = bytes.indexOf(needle, at + 1)) count++;
    if (count > 0) found.push(`${name} ×${count}`);
  }
  return found;
}

/** Polls until no trace of any marker is left, or 20 s pass; returns what is left. */
async function tracesLeftAfterAWhile(home: string, markers: string[]): Promise<string[]> {
  const left = () => markers.flatMap((marker) => traces(home, marker).map((t) => `${marker} in ${t}`));
  const deadline = Date.now() + 20_000;
  while (left().length > 0 && Date.now() < deadline) await sleep(250);
  return left();
}

describe('a delivered body leaves no bytes in the event log files', () => {
  let gateway: GatewayProcess;
  const short = `delivered-short-${randomUUID()}`;
  // Larger than a page: its overflow pages are freed on purge, the case of free pages.
  const long = `delivered-long-${randomUUID()}`;
  const longBody = Array.from({ length: 600 }, (_, i) => `${long}:${i};`).join(' ');
  const held = `held-${randomUUID()}`;

  afterAll(async () => {
    await gateway?.dispose();
  });

  it('drained by a main: gone from events.db, -wal and -shm while the gateway runs, and after it stops', async () => {
    gateway = new GatewayProcess({ hostId: uniqueHostId('deliveredBodies') });
    await gateway.start();
    const registered = await gateway.cli(['register', '--kind', 'main', '--name', 'inbox', '--json']);
    expect(registered.code, registered.stderr || registered.stdout).toBe(0);
    const { token } = JSON.parse(registered.stdout) as { token: string };
    const asInbox = { BRIDGE_TOKEN: token };

    for (const text of [`please review ${short}`, longBody]) {
      const sent = await gateway.cli(['send', 'inbox', text], asInbox);
      expect(sent.code, sent.stderr || sent.stdout).toBe(0);
    }
    // Held, so on disk: the search finds a body where it is.
    expect(traces(gateway.home, short)).not.toEqual([]);
    expect(traces(gateway.home, long)).not.toEqual([]);

    const drained = await gateway.cli(['drain', '--json'], asInbox);
    expect(drained.code, drained.stderr || drained.stdout).toBe(0);
    const texts = (JSON.parse(drained.stdout) as { text: string }[]).map((m) => m.text);
    expect(texts).toEqual([`please review ${short}`, longBody]);

    // One more, left undelivered: kept, as it must be, beside the delivered ones' absence.
    const kept = await gateway.cli(['send', 'inbox', `not yet drained ${held}`], asInbox);
    expect(kept.code, kept.stderr || kept.stdout).toBe(0);

    expect(await tracesLeftAfterAWhile(gateway.home, [short, long])).toEqual([]);
    expect(traces(gateway.home, held)).not.toEqual([]);

    // A clean stop checkpoints whatever the WAL held into events.db: still nothing there.
    expect(await gateway.stop()).toBe(0);
    expect([...traces(gateway.home, short), ...traces(gateway.home, long)]).toEqual([]);
    expect(traces(gateway.home, held)).not.toEqual([]);
  });
});
