import { generateKeyPairSync } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BridgeError, ErrorCode } from '../../src/errors.js';
import { initKeys, keyPaths, loadKeys } from '../../src/security/keys.js';
import {
  parsePublicKey,
  parseTrustString,
  publicKeyString,
  sealingKeyString,
} from '../../src/security/publicKey.js';
import { sign, verify } from '../../src/security/signature.js';
import {
  addTrust,
  listTrust,
  removeTrust,
  TrustStore,
  trustFilePath,
} from '../../src/security/TrustStore.js';
import { runCli } from '../support/GatewayProcess.js';

let home: string;
beforeEach(() => {
  home = mkdtempSync(join(tmpdir(), 'bridge-keys-int-'));
});
afterEach(() => {
  rmSync(home, { recursive: true, force: true });
});

function errorOf(run: () => unknown): BridgeError {
  try {
    run();
  } catch (err) {
    if (err instanceof BridgeError) return err;
    throw err;
  }
  throw new Error('expected a BridgeError, nothing was thrown');
}

const newKey = () => publicKeyString(generateKeyPairSync('ed25519').publicKey);
const newSealingKey = () => sealingKeyString(generateKeyPairSync('x25519').publicKey);
/** What a keys directory holds after init: both keys, the public file, the current sealing key's name. */
const keyFiles = (keyId: string) =>
  ['gateway.key', 'gateway.pub', `sealing-${keyId}.key`, 'sealing.current'].sort();

describe('gateway keys', () => {
  it('init creates a 0600 PKCS#8 private key in a 0700 directory, and the public key file', () => {
    const keys = initKeys(home);
    const { dir, privateKeyPath, publicKeyPath } = keyPaths(home);
    expect(statSync(privateKeyPath).mode & 0o777).toBe(0o600);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(readFileSync(privateKeyPath, 'utf8')).toMatch(/^-----BEGIN PRIVATE KEY-----\n/);
    expect(parsePublicKey(keys.publicKeyString)).toBe(keys.publicKeyString);
    // The sealing key beside it: 0600 too, named by its id, the current one named in a file.
    const sealing = keys.sealing!.current;
    expect(sealing.publicKeyString).toMatch(/^x25519:[A-Za-z0-9_-]{43}$/);
    expect(statSync(sealing.path).mode & 0o777).toBe(0o600);
    expect(readFileSync(publicKeyPath, 'utf8')).toBe(`${keys.publicKeyString},${sealing.publicKeyString}\n`);
    expect(keys.trustString).toBe(`${keys.publicKeyString},${sealing.publicKeyString}`);
    // No temp files left behind by the atomic write.
    expect(readdirSync(dir).sort()).toEqual(keyFiles(sealing.keyId));
  });

  it('a home made before sealing keys gets one from init, its signing key kept; --force replaces both', () => {
    const first = initKeys(home);
    rmSync(first.sealing!.current.path);
    rmSync(keyPaths(home).sealingCurrentPath);
    expect(loadKeys(home).sealing).toBeUndefined();
    expect(loadKeys(home).trustString).toBe(first.publicKeyString);
    const added = initKeys(home);
    expect(added.created).toBe('sealing');
    expect(added.publicKeyString).toBe(first.publicKeyString);
    expect(added.sealing!.current.keyId).not.toBe(first.sealing!.current.keyId);
    expect(loadKeys(home).trustString).toBe(added.trustString);
    const forced = initKeys(home, { force: true });
    expect(forced.created).toBe('both');
    expect(forced.publicKeyString).not.toBe(added.publicKeyString);
    expect([...forced.sealing!.byId.keys()]).toEqual([forced.sealing!.current.keyId]);
    expect(readdirSync(keyPaths(home).dir).sort()).toEqual(keyFiles(forced.sealing!.current.keyId));
  });

  it.skipIf(process.platform === 'win32')(
    'loadKeys refuses a sealing key readable by others, or not what its name says',
    () => {
      const keys = initKeys(home);
      const { path, keyId } = keys.sealing!.current;
      chmodSync(path, 0o644);
      expect(errorOf(() => loadKeys(home)).code).toBe(ErrorCode.keyInsecure);
      chmodSync(path, 0o600);
      const other = generateKeyPairSync('x25519').privateKey.export({ format: 'pem', type: 'pkcs8' });
      writeFileSync(path, other, { mode: 0o600 });
      const error = errorOf(() => loadKeys(home));
      expect(error.code).toBe(ErrorCode.badKey);
      expect(error.message).toContain(`not the key its name says (${keyId})`);
    },
  );

  it('loadKeys returns the same key pair, able to sign what the public key verifies', () => {
    const created = initKeys(home);
    const loaded = loadKeys(home);
    expect(loaded.publicKeyString).toBe(created.publicKeyString);
    const bytes = Buffer.from('exact published bytes');
    expect(verify(bytes, sign(bytes, loaded.privateKey), [created.publicKeyString])).toBe(true);
  });

  it('init refuses to replace an existing key, leaving it untouched; --force replaces it', () => {
    const first = initKeys(home);
    const error = errorOf(() => initKeys(home));
    expect(error.code).toBe(ErrorCode.keyExists);
    expect(error.message).toContain(first.privateKeyPath);
    expect(error.message).toContain('agentbridge keys init --force');
    expect(loadKeys(home).publicKeyString).toBe(first.publicKeyString);
    expect(readdirSync(keyPaths(home).dir).sort()).toEqual(keyFiles(first.sealing!.current.keyId));

    const second = initKeys(home, { force: true });
    expect(second.publicKeyString).not.toBe(first.publicKeyString);
    expect(loadKeys(home).publicKeyString).toBe(second.publicKeyString);
    expect(statSync(second.privateKeyPath).mode & 0o777).toBe(0o600);
  });

  it('loadKeys without a key says where it looked and to run `agentbridge keys init`', () => {
    const error = errorOf(() => loadKeys(home));
    expect(error.code).toBe(ErrorCode.keyMissing);
    expect(error.message).toContain(keyPaths(home).privateKeyPath);
    expect(error.message).toContain('agentbridge keys init');
  });

  it.skipIf(process.platform === 'win32')(
    'loadKeys refuses a private key readable by group or others',
    () => {
      const { privateKeyPath } = initKeys(home);
      for (const mode of [0o644, 0o640, 0o604]) {
        chmodSync(privateKeyPath, mode);
        const error = errorOf(() => loadKeys(home));
        expect(error.code).toBe(ErrorCode.keyInsecure);
        expect(error.message).toContain(`chmod 600 ${privateKeyPath}`);
      }
      chmodSync(privateKeyPath, 0o400);
      expect(() => loadKeys(home)).not.toThrow();
    },
  );

  it('loadKeys refuses a file that is not an ed25519 private key', () => {
    const { privateKeyPath } = initKeys(home);
    writeFileSync(privateKeyPath, 'not a key\n', { mode: 0o600 });
    expect(errorOf(() => loadKeys(home)).code).toBe(ErrorCode.badKey);
    const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey;
    writeFileSync(privateKeyPath, rsa.export({ format: 'pem', type: 'pkcs8' }), { mode: 0o600 });
    const error = errorOf(() => loadKeys(home));
    expect(error.code).toBe(ErrorCode.badKey);
    expect(error.message).toContain('not ed25519');
  });

  it('parsePublicKey accepts the compact form only', () => {
    const key = newKey();
    expect(parsePublicKey(` ${key}\n`)).toBe(key);
    for (const bad of [
      '',
      key.slice(8),
      `ed25519:${key.slice(9)}`,
      `${key}A`,
      key.replace('ed25519', 'Ed25519'),
    ]) {
      const error = errorOf(() => parsePublicKey(bad));
      expect(error.code).toBe(ErrorCode.badKey);
      expect(error.message).toContain('agentbridge keys show');
    }
  });
});

describe('trust store', () => {
  it('add, rotate to two keys, remove the old one, remove the host', () => {
    const [oldKey, newKeyOfB, keyOfC] = [newKey(), newKey(), newKey()];
    expect(listTrust(home)).toEqual([]);
    expect(addTrust(home, 'host-b', oldKey)).toEqual({
      added: true,
      entry: { host: 'host-b', keys: [oldKey] },
    });
    expect(addTrust(home, 'host-b', oldKey).added).toBe(false);
    addTrust(home, 'host-c', keyOfC);
    addTrust(home, 'host-b', newKeyOfB);
    expect(listTrust(home)).toEqual([
      { host: 'host-b', keys: [oldKey, newKeyOfB] },
      { host: 'host-c', keys: [keyOfC] },
    ]);

    expect(removeTrust(home, 'host-b', oldKey)).toEqual({
      removed: [oldKey],
      entry: { host: 'host-b', keys: [newKeyOfB] },
    });
    expect(removeTrust(home, 'host-b', oldKey).removed).toEqual([]);
    expect(removeTrust(home, 'host-c')).toEqual({ removed: [keyOfC], entry: { host: 'host-c', keys: [] } });
    expect(listTrust(home)).toEqual([{ host: 'host-b', keys: [newKeyOfB] }]);
  });

  it('one string carries both keys (keys show’s form); the signing key alone is still taken; each key goes to its use', () => {
    const [signing, sealing, nextSealing] = [newKey(), newSealingKey(), newSealingKey()];
    expect(addTrust(home, 'host-b', `${signing},${sealing}`)).toEqual({
      added: true,
      entry: { host: 'host-b', keys: [signing, sealing] },
    });
    expect(addTrust(home, 'host-b', `${signing},${sealing}`).added).toBe(false);
    const old = newKey();
    addTrust(home, 'host-c', old);
    addTrust(home, 'host-b', nextSealing);
    const store = new TrustStore(home, { checkIntervalMs: 0 });
    expect(store.keysFor('host-b')).toEqual([signing]);
    expect(store.sealingKeysFor('host-b')).toEqual([sealing, nextSealing]);
    expect(store.keysFor('host-c')).toEqual([old]);
    expect(store.sealingKeysFor('host-c')).toEqual([]);
    expect(removeTrust(home, 'host-b', sealing).removed).toEqual([sealing]);
    expect(store.sealingKeysFor('host-b')).toEqual([nextSealing]);
  });

  it('parseTrustString says what is not a key, and takes one key of each kind at most', () => {
    const [signing, sealing] = [newKey(), newSealingKey()];
    expect(parseTrustString(` ${signing},${sealing}\n`)).toEqual([signing, sealing]);
    expect(parseTrustString(sealing)).toEqual([sealing]);
    for (const bad of [
      `${signing};${sealing}`,
      `${signing},x25519:nope`,
      `${signing},`,
      sealing.replace('x25519', 'X25519'),
    ]) {
      const error = errorOf(() => parseTrustString(bad));
      expect(error.code, bad).toBe(ErrorCode.badKey);
      expect(error.message).toContain('agentbridge keys show');
    }
    expect(errorOf(() => parseTrustString(`${signing},${newKey()}`)).message).toContain(
      'one signing key and one sealing key at most',
    );
  });

  it('writes atomically: a new file each time (new inode), no temp files left, valid JSON', () => {
    addTrust(home, 'host-b', newKey());
    const before = statSync(trustFilePath(home)).ino;
    addTrust(home, 'host-c', newKey());
    expect(statSync(trustFilePath(home)).ino).not.toBe(before);
    expect(readdirSync(home)).toEqual(['trust.json']);
    expect(JSON.parse(readFileSync(trustFilePath(home), 'utf8'))).toMatchObject({ version: 1 });
  });

  it('refuses bad host ids and bad keys without touching the file', () => {
    expect(errorOf(() => addTrust(home, '../etc', newKey())).code).toBe(ErrorCode.badRequest);
    expect(errorOf(() => addTrust(home, 'host-b', 'ed25519:nope')).code).toBe(ErrorCode.badKey);
    expect(existsSync(trustFilePath(home))).toBe(false);
  });

  it('a bad trust.json is an error naming the file and the problem', () => {
    const path = trustFilePath(home);
    const cases: [string, string][] = [
      ['{not json', 'not valid JSON'],
      ['{"version":2,"hosts":{}}', 'version'],
      ['{"version":1,"hosts":{"host-b":["ed25519:short"]}}', 'hosts.host-b.0'],
      [`{"version":1,"hosts":{"bad host":["${newKey()}"]}}`, 'hosts'],
      ['{"version":1,"hosts":{},"extra":true}', 'extra'],
    ];
    for (const [text, problem] of cases) {
      writeFileSync(path, text);
      const error = errorOf(() => listTrust(home));
      expect(error.code).toBe(ErrorCode.badTrustStore);
      expect(error.message).toContain(path);
      expect(error.message).toContain(problem);
      expect(errorOf(() => new TrustStore(home)).code).toBe(ErrorCode.badTrustStore);
    }
  });

  it('TrustStore picks up an external edit, checking at most once per interval', () => {
    const [keyB, keyB2] = [newKey(), newKey()];
    addTrust(home, 'host-b', keyB);
    let now = 0;
    const store = new TrustStore(home, { checkIntervalMs: 1000, now: () => now });
    expect(store.keysFor('host-b')).toEqual([keyB]);
    expect(store.keysFor('host-x')).toEqual([]);

    // An operator edits the file by hand (in place, not via rename).
    writeFileSync(trustFilePath(home), JSON.stringify({ version: 1, hosts: { 'host-b': [keyB2] } }));
    now = 999;
    expect(store.keysFor('host-b')).toEqual([keyB]);
    now = 1000;
    expect(store.keysFor('host-b')).toEqual([keyB2]);

    // ... and through `agentbridge trust` (atomic rename).
    removeTrust(home, 'host-b');
    now = 2000;
    expect(store.keysFor('host-b')).toEqual([]);
  });

  it('TrustStore fails closed on a broken edit, reports it once, and recovers when fixed', () => {
    const keyB = newKey();
    addTrust(home, 'host-b', keyB);
    const errors: BridgeError[] = [];
    const store = new TrustStore(home, { checkIntervalMs: 0, onError: (err) => errors.push(err) });
    expect(store.keysFor('host-b')).toEqual([keyB]);

    writeFileSync(trustFilePath(home), '{"version":1,"hosts":');
    expect(store.keysFor('host-b')).toEqual([]);
    expect(store.keysFor('host-b')).toEqual([]);
    expect(errors).toHaveLength(1);
    expect(errors[0]?.code).toBe(ErrorCode.badTrustStore);
    expect(store.problem?.code).toBe(ErrorCode.badTrustStore);

    writeFileSync(trustFilePath(home), JSON.stringify({ version: 1, hosts: { 'host-b': [keyB] } }));
    expect(store.keysFor('host-b')).toEqual([keyB]);
    expect(store.problem).toBeUndefined();
  });

  it('a missing trust.json is an empty store, and a file created later is picked up', () => {
    const store = new TrustStore(home, { checkIntervalMs: 0 });
    expect(store.keysFor('host-b')).toEqual([]);
    const keyB = newKey();
    addTrust(home, 'host-b', keyB);
    expect(store.keysFor('host-b')).toEqual([keyB]);
  });
});

describe('agentbridge keys / agentbridge trust (CLI, built dist/)', () => {
  const cli = (args: string[]) =>
    runCli(args, { BRIDGE_HOME: home, BRIDGE_HOST_ID: 'host-a', BRIDGE_CONFIG: '' });
  const json = (stdout: string) => JSON.parse(stdout) as Record<string, unknown>;

  it('keys init, show, refuse overwrite, --force', async () => {
    const init = await cli(['keys', 'init', '--json']);
    expect(init.code).toBe(0);
    const created = json(init.stdout);
    expect(created).toMatchObject({ host: 'host-a', privateKeyPath: join(home, 'keys', 'gateway.key') });
    expect(statSync(join(home, 'keys', 'gateway.key')).mode & 0o777).toBe(0o600);

    // One string for a peer's trust add: the signing key, then the sealing key.
    expect(created.publicKey).toBe(`${created.signingKey as string},${created.sealingKey as string}`);
    expect(created.sealingKey).toMatch(/^x25519:/);
    const show = await cli(['keys', 'show', '--json']);
    expect(json(show.stdout).publicKey).toBe(created.publicKey);
    const human = await cli(['keys', 'show']);
    expect(human.stdout).toContain(`agentbridge trust add host-a ${created.publicKey as string}`);
    // What show printed is what a peer's trust add takes, as one shell word.
    const peerHome = mkdtempSync(join(tmpdir(), 'bridge-keys-peer-'));
    try {
      const added = await runCli(['trust', 'add', 'host-a', created.publicKey as string, '--json'], {
        BRIDGE_HOME: peerHome,
        BRIDGE_HOST_ID: 'host-b',
        BRIDGE_CONFIG: '',
      });
      expect(json(added.stdout)).toMatchObject({
        added: true,
        keys: [created.signingKey, created.sealingKey],
      });
    } finally {
      rmSync(peerHome, { recursive: true, force: true });
    }

    const again = await cli(['keys', 'init', '--json']);
    expect(again.code).toBe(1);
    expect(json(again.stdout)).toMatchObject({ ok: false, error: { code: 'KEY_EXISTS' } });

    const forced = await cli(['keys', 'init', '--force', '--json']);
    expect(forced.code).toBe(0);
    expect(json(forced.stdout).publicKey).not.toBe(created.publicKey);
  });

  it('keys show without keys, and with a 0644 key, says what to do', async () => {
    const missing = await cli(['keys', 'show']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('KEY_MISSING');
    expect(missing.stderr).toContain('agentbridge keys init');

    await cli(['keys', 'init']);
    chmodSync(join(home, 'keys', 'gateway.key'), 0o644);
    const insecure = await cli(['keys', 'show', '--json']);
    expect(json(insecure.stdout)).toMatchObject({ ok: false, error: { code: 'KEY_INSECURE' } });
  });

  it('trust add / list / remove with a rotation', async () => {
    const [oldKey, nextKey] = [newKey(), newKey()];
    expect(json((await cli(['trust', 'add', 'host-b', oldKey, '--json'])).stdout)).toEqual({
      added: true,
      host: 'host-b',
      keys: [oldKey],
    });
    await cli(['trust', 'add', 'host-b', nextKey]);
    expect(json((await cli(['trust', 'list', '--json'])).stdout)).toEqual({
      hosts: [{ host: 'host-b', keys: [oldKey, nextKey] }],
    });
    expect((await cli(['trust', 'list'])).stdout).toBe(`host-b\t${oldKey}\nhost-b\t${nextKey}\n`);

    expect(json((await cli(['trust', 'remove', 'host-b', oldKey, '--json'])).stdout)).toEqual({
      removed: [oldKey],
      host: 'host-b',
      keys: [nextKey],
    });
    const again = await cli(['trust', 'remove', 'host-b', oldKey]);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain('agentbridge trust list');

    await cli(['trust', 'remove', 'host-b']);
    expect(json((await cli(['trust', 'list', '--json'])).stdout)).toEqual({ hosts: [] });
  });

  it('trust add refuses a malformed key and a broken trust.json with clear errors', async () => {
    const bad = await cli(['trust', 'add', 'host-b', 'ed25519:abc', '--json']);
    expect(json(bad.stdout)).toMatchObject({ ok: false, error: { code: 'BAD_KEY' } });
    const missingArg = await cli(['trust', 'add', 'host-b']);
    expect(missingArg.code).toBe(2);

    writeFileSync(join(home, 'trust.json'), '[]');
    const broken = await cli(['trust', 'list']);
    expect(broken.code).toBe(2); // bad local state, like a bad config
    expect(broken.stderr).toContain(
      `BAD_TRUST_STORE: the trust store ${join(home, 'trust.json')} is invalid`,
    );
  });
});
