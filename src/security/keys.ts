import { createPrivateKey, createPublicKey, type KeyObject } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { BridgeError, ErrorCode } from '../errors.js';
import {
  newPrivateKey,
  type PublicKeyString,
  publicKeyString,
  type SealingKeyString,
  sealingKeyId,
  sealingKeyString,
  trustString,
} from './publicKey.js';
import { writeFileAtomic } from './writeFileAtomic.js';

/**
 * The gateway's own keys, under `<home>/keys/`: its ed25519 signing key (R-ID3), `gateway.key`
 * (PKCS#8 PEM, mode 0600), its X25519 sealing keys (issue 34, `SealingKeys`), and `gateway.pub`
 * (the public keys as a peer's `trust add` takes them, for operators to copy). Public keys are
 * always derived from the private keys when loading, so a stale or edited `gateway.pub` cannot
 * change what the gateway signs as or is sealed to.
 */
export interface GatewayKeys {
  privateKey: KeyObject;
  publicKey: KeyObject;
  /** `ed25519:<base64url>`, the key peers verify this gateway's signatures with. */
  publicKeyString: PublicKeyString;
  privateKeyPath: string;
  publicKeyPath: string;
  /** Its sealing keys (issue 34), once it has one. */
  sealing: SealingKeys | undefined;
  /** What a peer's `agentbridge trust add` takes: the signing key and the current sealing key. */
  trustString: string;
}

/** One of this gateway's sealing key pairs (X25519): what peers seal to, and what opens it. */
export interface SealingKeyPair {
  keyId: string;
  privateKey: KeyObject;
  publicKeyString: SealingKeyString;
  path: string;
}

/**
 * This gateway's sealing keys, under `<home>/keys/`: `sealing-<keyId>.key` each (PKCS#8 PEM,
 * mode 0600) and `sealing.current` naming the one peers are given. A key stays until it is
 * retired, so what was sealed to it still opens.
 */
export interface SealingKeys {
  current: SealingKeyPair;
  /** Every key kept, the current one included, by key id (what a sealed message names). */
  byId: ReadonlyMap<string, SealingKeyPair>;
}

export interface InitKeysOptions {
  /** Replace an existing key pair (peers must then trust the new public key). */
  force?: boolean | undefined;
}

export function keyPaths(home: string): {
  dir: string;
  privateKeyPath: string;
  publicKeyPath: string;
  sealingCurrentPath: string;
} {
  const dir = join(home, 'keys');
  return {
    dir,
    privateKeyPath: join(dir, 'gateway.key'),
    publicKeyPath: join(dir, 'gateway.pub'),
    sealingCurrentPath: join(dir, 'sealing.current'),
  };
}

const sealingFilePattern = /^sealing-([A-Za-z0-9_-]{12})\.key$/;

/**
 * Whether `path` is one of this gateway's private keys (signing or sealing): readable by others,
 * such a file is refused (KEY_INSECURE), never only hidden (privateHome.ts).
 */
export function isPrivateKeyFile(home: string, path: string): boolean {
  const { dir, privateKeyPath } = keyPaths(home);
  return path === privateKeyPath || (dirname(path) === dir && sealingFilePattern.test(basename(path)));
}

function sealingKeyPath(dir: string, keyId: string): string {
  return join(dir, `sealing-${keyId}.key`);
}

function errnoOf(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | undefined)?.code;
}

/**
 * Creates this gateway's signing key and sealing key. Refuses to replace an existing signing key
 * unless `force` (which also drops the old sealing keys); a home that has a signing key and no
 * sealing key yet (made before issue 34) gets the sealing key only. `created` says which.
 */
export function initKeys(
  home: string,
  options: InitKeysOptions = {},
): GatewayKeys & { created: 'both' | 'sealing' } {
  const { dir, privateKeyPath } = keyPaths(home);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const privateKey = newPrivateKey('ed25519');
  const pem = privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
  try {
    writeFileAtomic(privateKeyPath, pem, { mode: 0o600, noClobber: !options.force });
  } catch (err) {
    if (errnoOf(err) === 'EEXIST') {
      if (loadSealingKeys(home) === undefined) return { ...addSealingKey(home), created: 'sealing' };
      throw new BridgeError(
        ErrorCode.keyExists,
        `a gateway key already exists at ${privateKeyPath}; \`agentbridge keys show\` prints its public keys. ` +
          'To replace it run `agentbridge keys init --force`, then give the new public keys to every peer ' +
          '(`agentbridge trust add`): they will refuse this gateway until they have them',
        { cause: err, details: { path: privateKeyPath } },
      );
    }
    throw new BridgeError(
      ErrorCode.badKey,
      `cannot write gateway key ${privateKeyPath}: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
  }
  if (options.force) {
    for (const file of readdirSync(dir)) if (sealingFilePattern.test(file)) rmSync(join(dir, file));
  }
  return { ...addSealingKey(home), created: 'both' };
}

/**
 * Gives this gateway a new current sealing key (the keys kept before stay, to open what was
 * sealed to them) and writes `gateway.pub` anew; returns its keys as they are now.
 */
export function addSealingKey(home: string): GatewayKeys {
  createSealingKey(home);
  const keys = loadKeys(home);
  writeFileAtomic(keys.publicKeyPath, `${keys.trustString}\n`, { mode: 0o600 });
  return keys;
}

/**
 * `keys rotate`: a new current sealing key; the ones before are kept, to open what was sealed to
 * them (letters held, messages in flight, the DLQ), until `keys retire`. Returns the keys as they
 * are now and the id of the key that was current.
 */
export function rotateSealingKey(home: string): { keys: GatewayKeys; previous: string } {
  const before = loadSealingKeys(home);
  if (!before) {
    throw new BridgeError(
      ErrorCode.keyMissing,
      'this gateway has no sealing key to rotate: run `agentbridge keys init` (or start it federated) first',
    );
  }
  return { keys: addSealingKey(home), previous: before.current.keyId };
}

/**
 * `keys retire [keyId]`: deletes the kept sealing keys that are not the current one (all of them,
 * or the one named), refused while the current key is younger than `guard.overlapMs` (peers
 * may still seal to the old one) unless `guard.force`. What is still sealed to a retired key no longer opens here
 * (`unknown-sealing-key`). Returns the ids retired, the current key and when it became current.
 */
export function retireSealingKeys(
  home: string,
  keyId: string | undefined,
  guard: { overlapMs: number; force: boolean },
): { retired: string[]; current: string; currentSinceMs: number } {
  const keys = loadSealingKeys(home);
  if (!keys)
    throw new BridgeError(ErrorCode.keyMissing, 'this gateway has no sealing keys: nothing to retire');
  const { current, byId } = keys;
  const currentSinceMs = statSync(current.path).mtimeMs;
  const age = Date.now() - currentSinceMs;
  if (age < guard.overlapMs && !guard.force) {
    throw new BridgeError(
      ErrorCode.badRequest,
      `the current sealing key is ${Math.round(age / 1000)} s old: peers learn it from this gateway's PRESENCE ` +
        `(within ${Math.round(guard.overlapMs / 1000)} s) and seal to the old key until then; retire after that, ` +
        'or now with --force (what is sealed to a retired key is dead-lettered as unknown-sealing-key)',
    );
  }
  if (keyId === current.keyId) {
    throw new BridgeError(
      ErrorCode.badRequest,
      `${keyId} is the current sealing key, the one peers seal to: \`agentbridge keys rotate\` first, then retire it`,
    );
  }
  if (keyId !== undefined && !byId.has(keyId)) {
    throw new BridgeError(
      ErrorCode.badRequest,
      `this gateway keeps no sealing key ${keyId}; it keeps ${[...byId.keys()].join(', ')}`,
    );
  }
  const retired = [...byId.values()].filter(
    (pair) => pair !== current && (keyId === undefined || pair.keyId === keyId),
  );
  for (const pair of retired) rmSync(pair.path);
  return { retired: retired.map((pair) => pair.keyId), current: current.keyId, currentSinceMs };
}

/** Makes a new sealing key pair the current one (the one given to peers). */
function createSealingKey(home: string): void {
  const { dir, sealingCurrentPath } = keyPaths(home);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const privateKey = newPrivateKey('x25519');
  const keyId = sealingKeyId(sealingKeyString(privateKey));
  const pem = privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
  writeFileAtomic(sealingKeyPath(dir, keyId), pem, { mode: 0o600 });
  writeFileAtomic(sealingCurrentPath, `${keyId}\n`, { mode: 0o600 });
}

/**
 * KEY_INSECURE: the private key is accessible to group or others. Not mended by a chmod, as the
 * rest of the home is: a key others may have read is replaced, and the operator must decide that.
 */
export function insecureKeyError(privateKeyPath: string, mode: number): BridgeError {
  const octal = (mode & 0o777).toString(8).padStart(4, '0');
  return new BridgeError(
    ErrorCode.keyInsecure,
    `the private key ${privateKeyPath} is accessible to group or others (mode ${octal}); ` +
      `run \`chmod 600 ${privateKeyPath}\`, and if others may have read it, replace it with \`agentbridge keys init --force\``,
    { details: { path: privateKeyPath, mode: octal } },
  );
}

/**
 * Loads this gateway's key pair. Throws KEY_MISSING when there is none, KEY_INSECURE when the
 * private key file is accessible to group or others, BAD_KEY when it is unreadable or not an
 * ed25519 private key; each message names the file and the fix.
 */
export function loadKeys(home: string): GatewayKeys {
  const { privateKeyPath, publicKeyPath } = keyPaths(home);
  const privateKey = readPrivateKey(privateKeyPath, 'ed25519', (err) => {
    return new BridgeError(
      ErrorCode.keyMissing,
      `this gateway has no key pair: ${privateKeyPath} does not exist; run \`agentbridge keys init\` ` +
        '(with the same BRIDGE_HOME) to create one',
      { cause: err, details: { path: privateKeyPath } },
    );
  });
  const publicKey = createPublicKey(privateKey);
  const signing = publicKeyString(publicKey);
  const sealing = loadSealingKeys(home);
  return {
    privateKey,
    publicKey,
    publicKeyString: signing,
    privateKeyPath,
    publicKeyPath,
    sealing,
    trustString: trustString(signing, sealing?.current.publicKeyString),
  };
}

/**
 * Loads this gateway's sealing keys, or undefined when it has none yet (`sealing.current`
 * absent). Each file is held to the signing key's rules: 0600, a PEM private key of its kind.
 */
export function loadSealingKeys(home: string): SealingKeys | undefined {
  const { dir, sealingCurrentPath } = keyPaths(home);
  let currentId: string;
  try {
    currentId = readFileSync(sealingCurrentPath, 'utf8').trim();
  } catch (err) {
    if (errnoOf(err) === 'ENOENT') return undefined;
    throw new BridgeError(ErrorCode.badKey, `cannot read ${sealingCurrentPath}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const byId = new Map<string, SealingKeyPair>();
  for (const file of readdirSync(dir)) {
    const keyId = sealingFilePattern.exec(file)?.[1];
    if (keyId === undefined) continue;
    const pair = readSealingKey(join(dir, file));
    if (pair.keyId !== keyId) {
      throw new BridgeError(
        ErrorCode.badKey,
        `the sealing key ${pair.path} is not the key its name says (${keyId}): restore it, or make a new one with \`agentbridge keys init --force\``,
      );
    }
    byId.set(keyId, pair);
  }
  const current = byId.get(currentId);
  if (!current) {
    throw new BridgeError(
      ErrorCode.badKey,
      `${sealingCurrentPath} names sealing key ${currentId}, which is not in ${dir}: restore it, or make a new one with \`agentbridge keys init --force\``,
    );
  }
  return { current, byId };
}

function readSealingKey(path: string): SealingKeyPair {
  const privateKey = readPrivateKey(path, 'x25519', (err) => {
    return new BridgeError(ErrorCode.badKey, `the sealing key ${path} went away while it was read`, {
      cause: err,
    });
  });
  const publicKeyString = sealingKeyString(privateKey);
  return { keyId: sealingKeyId(publicKeyString), privateKey, publicKeyString, path };
}

/**
 * A private key file held to the rules: mode 0600 (else KEY_INSECURE), a PEM private key of
 * `type` (else BAD_KEY); each refusal names the file and the fix. `missing` says what an absent
 * file means where it is read.
 */
function readPrivateKey(
  path: string,
  type: 'ed25519' | 'x25519',
  missing: (err: unknown) => BridgeError,
): KeyObject {
  const name = type === 'ed25519' ? 'the gateway key' : 'the sealing key';
  const replace = 'replace it with `agentbridge keys init --force`';
  let mode: number;
  let pem: string;
  try {
    mode = statSync(path).mode;
    pem = readFileSync(path, 'utf8');
  } catch (err) {
    if (errnoOf(err) === 'ENOENT') throw missing(err);
    throw new BridgeError(
      ErrorCode.badKey,
      `cannot read ${name} ${path}: ${(err as Error).message}; make it readable by ` +
        `the user running bridge (and only by it: chmod 600), or ${replace}`,
      { cause: err, details: { path } },
    );
  }
  if (process.platform !== 'win32' && (mode & 0o077) !== 0) throw insecureKeyError(path, mode);
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey({ key: pem, format: 'pem' });
  } catch (err) {
    throw new BridgeError(
      ErrorCode.badKey,
      `${name} ${path} is not a PEM private key (${(err as Error).message}); ${replace}`,
      { cause: err, details: { path } },
    );
  }
  if (privateKey.asymmetricKeyType !== type) {
    throw new BridgeError(
      ErrorCode.badKey,
      `${name} ${path} is a ${privateKey.asymmetricKeyType} key, not ${type}; ${replace}`,
      { details: { path } },
    );
  }
  return privateKey;
}
