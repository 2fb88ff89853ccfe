import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { mkdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { BridgeError, ErrorCode } from '../errors.js';
import { type PublicKeyString, publicKeyString } from './publicKey.js';
import { writeFileAtomic } from './writeFileAtomic.js';

/**
 * The gateway's own ed25519 key pair (R-ID3), under `<home>/keys/`:
 * `gateway.key` (PKCS#8 PEM, mode 0600) and `gateway.pub` (the compact public key string, for
 * operators to copy). The public key is always derived from the private key when loading, so
 * a stale or edited `gateway.pub` cannot change what the gateway signs as.
 */
export interface GatewayKeys {
  privateKey: KeyObject;
  publicKey: KeyObject;
  /** `ed25519:<base64url>`, what peers put in their trust store. */
  publicKeyString: PublicKeyString;
  privateKeyPath: string;
  publicKeyPath: string;
}

export interface InitKeysOptions {
  /** Replace an existing key pair (peers must then trust the new public key). */
  force?: boolean | undefined;
}

export function keyPaths(home: string): { dir: string; privateKeyPath: string; publicKeyPath: string } {
  const dir = join(home, 'keys');
  return { dir, privateKeyPath: join(dir, 'gateway.key'), publicKeyPath: join(dir, 'gateway.pub') };
}

function errnoOf(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | undefined)?.code;
}

/** Creates this gateway's key pair. Refuses to replace an existing private key unless `force`. */
export function initKeys(home: string, options: InitKeysOptions = {}): GatewayKeys {
  const { dir, privateKeyPath, publicKeyPath } = keyPaths(home);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const pem = privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
  try {
    writeFileAtomic(privateKeyPath, pem, { mode: 0o600, noClobber: !options.force });
  } catch (err) {
    if (errnoOf(err) === 'EEXIST') {
      throw new BridgeError(
        ErrorCode.keyExists,
        `a gateway key already exists at ${privateKeyPath}; \`agentbridge keys show\` prints its public key. ` +
          'To replace it run `agentbridge keys init --force`, then give the new public key to every peer ' +
          '(`agentbridge trust add`): they will refuse this gateway until they have it',
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
  const text = publicKeyString(publicKey);
  writeFileAtomic(publicKeyPath, `${text}\n`, { mode: 0o600 });
  return { privateKey, publicKey, publicKeyString: text, privateKeyPath, publicKeyPath };
}

/**
 * KEY_INSECURE: the private key is accessible to group or others. Not mended by a chmod, as the
 * rest of the home is: a key others may have read is replaced, and the operator must decide that.
 */
export function insecureKeyError(privateKeyPath: string, mode: number): BridgeError {
  const octal = (mode & 0o777).toString(8).padStart(4, '0');
  return new BridgeError(
    ErrorCode.keyInsecure,
    `the gateway key ${privateKeyPath} is accessible to group or others (mode ${octal}); ` +
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
  let mode: number;
  let pem: string;
  try {
    mode = statSync(privateKeyPath).mode;
    pem = readFileSync(privateKeyPath, 'utf8');
  } catch (err) {
    if (errnoOf(err) === 'ENOENT') {
      throw new BridgeError(
        ErrorCode.keyMissing,
        `this gateway has no key pair: ${privateKeyPath} does not exist; run \`agentbridge keys init\` ` +
          '(with the same BRIDGE_HOME) to create one',
        { cause: err, details: { path: privateKeyPath } },
      );
    }
    throw new BridgeError(
      ErrorCode.badKey,
      `cannot read the gateway key ${privateKeyPath}: ${(err as Error).message}; make it readable by ` +
        'the user running bridge (and only by it: chmod 600), or replace it with `agentbridge keys init --force`',
      { cause: err, details: { path: privateKeyPath } },
    );
  }
  if (process.platform !== 'win32' && (mode & 0o077) !== 0) throw insecureKeyError(privateKeyPath, mode);
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey({ key: pem, format: 'pem' });
  } catch (err) {
    throw new BridgeError(
      ErrorCode.badKey,
      `the gateway key ${privateKeyPath} is not a PEM private key (${(err as Error).message}); ` +
        'replace it with `agentbridge keys init --force`',
      { cause: err, details: { path: privateKeyPath } },
    );
  }
  if (privateKey.asymmetricKeyType !== 'ed25519') {
    throw new BridgeError(
      ErrorCode.badKey,
      `the gateway key ${privateKeyPath} is a ${privateKey.asymmetricKeyType} key, not ed25519; ` +
        'replace it with `agentbridge keys init --force`',
      { details: { path: privateKeyPath } },
    );
  }
  const publicKey = createPublicKey(privateKey);
  return {
    privateKey,
    publicKey,
    publicKeyString: publicKeyString(publicKey),
    privateKeyPath,
    publicKeyPath,
  };
}
