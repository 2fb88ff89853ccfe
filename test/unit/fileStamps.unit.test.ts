import { mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { FileStamps } from '../../src/security/FileStamps.js';

/**
 * What the trust store and the sealing keys re-read on: a change of any of the files (or one
 * appearing), and a file too fresh to trust its stamp read again at every check.
 */
describe('FileStamps', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it('says a change of any file, a file that appears, and re-reads a fresh one until it settles', () => {
    const dir = mkdtempSync(join(tmpdir(), 'bridge-stamps-'));
    dirs.push(dir);
    const [a, b] = [join(dir, 'a'), join(dir, 'b')];
    writeFileSync(a, 'one');
    const past = (path: string) =>
      utimesSync(path, new Date(Date.now() - 60_000), new Date(Date.now() - 60_000));
    past(a);
    let now = 0;
    const stamps = new FileStamps([a, b], { checkIntervalMs: 1_000, now: () => now });
    expect(stamps.check()).toEqual({ changed: true, reread: true });
    expect(stamps.check()).toEqual({ changed: false, reread: false });
    expect(stamps.due).toBe(false);
    now = 1_000;
    expect(stamps.due).toBe(true);

    // b appears, fresh: read again at the next check too, though its stamp is the same.
    writeFileSync(b, 'two');
    expect(stamps.check()).toEqual({ changed: true, reread: true });
    expect(stamps.check()).toEqual({ changed: false, reread: true });
    past(b);
    expect(stamps.check()).toEqual({ changed: true, reread: true });
    expect(stamps.check()).toEqual({ changed: false, reread: false });

    // The same size written in place, its time set back: still a change (ctime, mtime).
    writeFileSync(a, 'uno');
    past(a);
    expect(stamps.check()).toEqual({ changed: true, reread: true });
  });
});
