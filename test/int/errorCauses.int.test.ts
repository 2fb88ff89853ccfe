import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BridgeError, ErrorCode } from '../../src/errors.js';
import { openSource } from '../../src/replay/readSource.js';
import { initKeys, loadKeys } from '../../src/security/keys.js';

/** What an operator's failure was thrown with, for a log line or a bug report to show. */
function thrownBy(run: () => unknown): BridgeError {
  try {
    run();
  } catch (err) {
    expect(err).toBeInstanceOf(BridgeError);
    return err as BridgeError;
  }
  throw new Error('expected a throw');
}

/**
 * A BridgeError that wraps a failure from below (a file, a parser) keeps it as `cause`, so a
 * log line shows what the system said and not only our summary of it.
 */
describe('wrapped failures keep their cause', () => {
  let home: string;

  beforeEach(() => {
    home = mkdtempSync(join(tmpdir(), 'bridge-causes-'));
  });

  afterEach(() => {
    rmSync(home, { recursive: true, force: true });
  });

  it('replay: an unreadable file, and an export line that is not JSON', () => {
    const missing = thrownBy(() => openSource(join(home, 'nope.db'), undefined));
    expect(missing.code).toBe(ErrorCode.badRequest);
    expect(missing.cause).toMatchObject({ code: 'ENOENT' });

    const file = join(home, 'export.jsonl');
    writeFileSync(file, '{not json\n');
    const notJson = thrownBy(() => openSource(file, undefined));
    expect(notJson.message).toMatch(/export\.jsonl:1: not JSON/);
    expect(notJson.cause).toBeInstanceOf(SyntaxError);
  });

  it('keys: a missing key pair, and a key that exists already', () => {
    const missing = thrownBy(() => loadKeys(home));
    expect(missing.code).toBe(ErrorCode.keyMissing);
    expect(missing.cause).toMatchObject({ code: 'ENOENT' });

    initKeys(home);
    const exists = thrownBy(() => initKeys(home));
    expect(exists.code).toBe(ErrorCode.keyExists);
    expect(exists.cause).toMatchObject({ code: 'EEXIST' });
  });
});
