import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  initKeys,
  loadKeys,
  loadSealingKeys,
  retireSealingKeys,
  rotateSealingKey,
} from '../../src/security/keys.js';
import { createSealer } from '../../src/security/messageSealing.js';
import { newPrivateKey, sealingKeyString } from '../../src/security/publicKey.js';
import { SealingKeyring } from '../../src/security/SealingKeyring.js';
import { addTrust, removeTrust, TrustStore } from '../../src/security/TrustStore.js';
import { decodeEnvelope } from '../../src/wire/codec.js';
import { openedText } from '../../src/wire/sealedEnvelope.js';
import { sendEnvelope } from '../support/sendEnvelope.js';

/** keys retire's guard out of the way: these cases are about what it deletes. */
const noOverlap = { overlapMs: 0, force: false };

const homes: string[] = [];
function home(): string {
  const dir = mkdtempSync(join(tmpdir(), 'bridge-rotate-'));
  homes.push(dir);
  return dir;
}
afterAll(() => {
  for (const dir of homes) rmSync(dir, { recursive: true, force: true });
});

const sender = {
  gid: '6d5c7a7e-3f4f-4f55-9a43-1f0b7a4e2c11',
  name: 'lead',
  host: 'alpha',
  kind: 'main' as const,
};

/** A running gateway's sealer over `dir`'s keys (re-read at once when they change). */
function sealerOf(host: string, dir: string, now: () => number = Date.now) {
  const keys = loadSealingKeys(dir);
  if (!keys) throw new Error('no keys');
  const keyring = new SealingKeyring(dir, keys, { checkIntervalMs: 0, now });
  return createSealer({
    host,
    keys: keyring,
    trust: new TrustStore(dir, { checkIntervalMs: 0 }),
    required: true,
  });
}

/** What `host`'s sealer opens of `bytes`: the text, or the reason it does not. */
function textAt(sealer: ReturnType<typeof sealerOf>, bytes: Buffer): string {
  const decoded = decodeEnvelope(bytes, 1 << 20);
  if (!decoded.ok || !decoded.sealed) throw new Error('not a sealed envelope');
  const text = openedText(sealer.open(decoded.sealed.sealed, decoded.sealed.aad), decoded.sealed.size);
  return text.ok ? text.text : text.reason;
}

describe('sealing key rotation (keys rotate, keys retire) and the keys a sealer uses', () => {
  it('a running gateway opens with the rotated key at once and with the old one until it is retired', () => {
    const beta = home();
    initKeys(beta);
    const alpha = home();
    initKeys(alpha);
    addTrust(alpha, 'beta', initKeysString(beta));
    const atBeta = sealerOf('beta', beta);
    const atAlpha = sealerOf('alpha', alpha);
    const envelope = sendEnvelope(sender, 'beta-entity', { text: 'before the rotation' });
    const toOld = atAlpha.sealEnvelope(envelope, atAlpha.recipients(['beta']).recipients);

    const { keys, previous } = rotateSealingKey(beta);
    expect(keys.sealing?.byId.size).toBe(2);
    expect(atBeta.currentKey()).toBe(keys.sealing?.current.publicKeyString);
    expect(textAt(atBeta, toOld)).toBe('before the rotation');

    // Alpha learns the new key from beta's PRESENCE and seals to it from then on.
    atAlpha.learn('beta', atBeta.currentKey() as never);
    const toNew = atAlpha.sealEnvelope(
      sendEnvelope(sender, 'beta-entity', { text: 'after' }),
      atAlpha.recipients(['beta']).recipients,
    );
    expect(textAt(atBeta, toNew)).toBe('after');

    expect(retireSealingKeys(beta, previous, noOverlap).retired).toEqual([previous]);
    expect(textAt(atBeta, toOld)).toBe('unknown-sealing-key');
    expect(textAt(atBeta, toNew)).toBe('after');
  });

  it('retire keeps the current key: refused by name, and "all" leaves it', () => {
    const dir = home();
    initKeys(dir);
    const first = loadSealingKeys(dir)?.current.keyId as string;
    expect(() => retireSealingKeys(dir, first, noOverlap)).toThrow(
      /is the current sealing key.*keys rotate. first/,
    );
    expect(retireSealingKeys(dir, undefined, noOverlap).retired).toEqual([]);
    rotateSealingKey(dir);
    rotateSealingKey(dir);
    const after = retireSealingKeys(dir, undefined, noOverlap);
    expect(after.retired).toHaveLength(2);
    expect(after.retired).toContain(first);
    expect(loadSealingKeys(dir)?.byId.size).toBe(1);
    expect(() => retireSealingKeys(dir, 'AAAAAAAAAAAA', noOverlap)).toThrow(
      /keeps no sealing key AAAAAAAAAAAA/,
    );
  });

  it('a broadcast is sealed to every host it trusts to sign, with the key each announced, and to itself', () => {
    const dir = home();
    initKeys(dir);
    const beta = home();
    initKeys(beta);
    addTrust(dir, 'beta', initKeysString(beta));
    const gammaKey = sealingKeyString(newPrivateKey('x25519'));
    const sealer = sealerOf('alpha', dir);
    // gamma announced a key but is not trusted to sign: not sealed to.
    sealer.learn('gamma', gammaKey);
    expect(
      sealer
        .everyone()
        .map((r) => r.host)
        .sort(),
    ).toEqual(['alpha', 'beta']);
    const announced = sealingKeyString(newPrivateKey('x25519'));
    sealer.learn('beta', announced);
    expect(sealer.recipients(['beta', 'delta'])).toEqual({
      recipients: [{ host: 'beta', key: announced }],
      missing: ['delta'],
    });
  });

  it('an announced key is sealed to only while the host’s trust entry is as it was when it was announced', () => {
    const dir = home();
    initKeys(dir);
    const beta = home();
    initKeys(beta);
    addTrust(dir, 'beta', initKeysString(beta));
    const sealer = sealerOf('alpha', dir);
    const announced = sealingKeyString(newPrivateKey('x25519'));
    sealer.learn('beta', announced);
    expect(sealer.recipients(['beta']).recipients).toEqual([{ host: 'beta', key: announced }]);
    // A key given by hand after the announcement wins over it.
    const byHand = sealingKeyString(newPrivateKey('x25519'));
    addTrust(dir, 'beta', byHand);
    expect(sealer.recipients(['beta']).recipients).toEqual([{ host: 'beta', key: byHand }]);
    // Announced again under the new entry: taken again. Trust removed: sealed to no key of it.
    sealer.learn('beta', announced);
    expect(sealer.recipients(['beta']).recipients).toEqual([{ host: 'beta', key: announced }]);
    removeTrust(dir, 'beta');
    expect(sealer.recipients(['beta'])).toEqual({ recipients: [], missing: ['beta'] });
    expect(sealer.everyone().map((r) => r.host)).toEqual(['alpha']);
  });
});

/** What `keys show` prints for the gateway of `dir`: its signing and sealing keys. */
function initKeysString(dir: string): string {
  return loadKeys(dir).trustString;
}
