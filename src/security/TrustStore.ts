import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { hostIdSchema } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import { FileStamps, type FileStampsOptions } from './FileStamps.js';
import {
  isSealingKey,
  type PublicKeyString,
  parseTrustString,
  type SealingKeyString,
  type TrustedKey,
  trustedKeySchema,
} from './publicKey.js';
import { writeFileAtomic } from './writeFileAtomic.js';

/**
 * The trust store (R-ID3): `<home>/trust.json`, written by `agentbridge trust add|remove`, maps each
 * peer host id to its public keys: the ones allowed to sign for it (`ed25519:`) and the ones it
 * is sealed to (`x25519:`, issue 34) — usually one of each, two during a rotation. It is the
 * only source of peers' keys: nothing from the wire is ever added to it.
 */
export const trustFileSchema = z.strictObject({
  version: z.literal(1),
  hosts: z.record(
    hostIdSchema,
    z
      .array(trustedKeySchema)
      .min(1, 'a host needs at least one key (remove the host instead)')
      .refine((keys) => new Set(keys).size === keys.length, 'a key is listed twice'),
  ),
});
export type TrustFile = z.output<typeof trustFileSchema>;

export interface TrustEntry {
  host: string;
  keys: TrustedKey[];
}

export function trustFilePath(home: string): string {
  return join(home, 'trust.json');
}

function badTrustStore(path: string, problem: string, cause?: unknown): BridgeError {
  return new BridgeError(
    ErrorCode.badTrustStore,
    `the trust store ${path} is invalid: ${problem}; fix or delete the file, then re-add peers with ` +
      '`agentbridge trust add HOST PUBKEY`',
    { details: { path }, ...(cause === undefined ? {} : { cause }) },
  );
}

/** Parses trust file text; throws BAD_TRUST_STORE naming the file and the first problems. */
export function parseTrustFile(path: string, text: string): TrustFile {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw badTrustStore(path, `not valid JSON (${(err as Error).message})`, err);
  }
  const result = trustFileSchema.safeParse(json);
  if (!result.success) {
    const problems = result.error.issues
      .slice(0, 3)
      .map((issue) => `${issue.path.join('.') || '(top level)'}: ${issue.message}`)
      .join('; ');
    throw badTrustStore(path, problems);
  }
  return result.data;
}

/** Reads the trust store; a missing file is an empty store (no peers trusted yet). */
export function readTrustFile(home: string): TrustFile {
  const path = trustFilePath(home);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { version: 1, hosts: {} };
    throw badTrustStore(path, `cannot read it (${(err as Error).message})`, err);
  }
  return parseTrustFile(path, text);
}

function writeTrustFile(home: string, file: TrustFile): void {
  const sorted: TrustFile = {
    version: 1,
    hosts: Object.fromEntries(Object.entries(file.hosts).sort(([a], [b]) => a.localeCompare(b))),
  };
  writeFileAtomic(trustFilePath(home), `${JSON.stringify(sorted, null, 2)}\n`, { mode: 0o600 });
}

function parseHost(host: string): string {
  const result = hostIdSchema.safeParse(host);
  if (!result.success) {
    throw new BridgeError(
      ErrorCode.badRequest,
      `"${host}" is not a host id: ${result.error.issues[0]?.message}`,
    );
  }
  return result.data;
}

/**
 * Trusts the keys in `text` for `host` (its signing key, its sealing key, or both as `keys show`
 * prints them), alongside any it already has. Adding a known key is a no-op.
 */
export function addTrust(home: string, host: string, text: string): { added: boolean; entry: TrustEntry } {
  const hostId = parseHost(host);
  const given = parseTrustString(text);
  const file = readTrustFile(home);
  const keys = file.hosts[hostId] ?? [];
  const fresh = given.filter((key) => !keys.includes(key));
  if (fresh.length === 0) return { added: false, entry: { host: hostId, keys } };
  const next = [...keys, ...fresh];
  writeTrustFile(home, { version: 1, hosts: { ...file.hosts, [hostId]: next } });
  return { added: true, entry: { host: hostId, keys: next } };
}

/**
 * Stops trusting one key of `host` (the end of a rotation), or the whole host when `pubkey` is
 * omitted. Returns the keys removed and those left; removing nothing is not an error here.
 */
export function removeTrust(
  home: string,
  host: string,
  pubkey?: string,
): { removed: TrustedKey[]; entry: TrustEntry } {
  const hostId = parseHost(host);
  const file = readTrustFile(home);
  const keys = file.hosts[hostId] ?? [];
  const named = pubkey === undefined ? undefined : parseTrustString(pubkey);
  const removed = named === undefined ? keys : keys.filter((k) => named.includes(k));
  if (removed.length === 0) return { removed, entry: { host: hostId, keys } };
  const left = keys.filter((k) => !removed.includes(k));
  const hosts = { ...file.hosts };
  if (left.length === 0) delete hosts[hostId];
  else hosts[hostId] = left;
  writeTrustFile(home, { version: 1, hosts });
  return { removed, entry: { host: hostId, keys: left } };
}

/** Every trusted host with its keys, sorted by host id. */
export function listTrust(home: string): TrustEntry[] {
  return Object.entries(readTrustFile(home).hosts)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([host, keys]) => ({ host, keys }));
}

/** How often the file is checked for a change (`FileStamps`), and who hears of one that does not load. */
export interface TrustStoreOptions extends FileStampsOptions {
  /** Called once for each change of the file that cannot be loaded (the store then trusts no one). */
  onError?: (err: BridgeError) => void;
}

/** A host's keys by use. */
interface HostKeys {
  signing: PublicKeyString[];
  sealing: SealingKeyString[];
}

function splitKeys(keys: readonly TrustedKey[]): HostKeys {
  const split: HostKeys = { signing: [], sealing: [] };
  for (const key of keys) {
    if (isSealingKey(key)) split.sealing.push(key);
    else split.signing.push(key);
  }
  return split;
}

/**
 * The gateway's view of the trust store. `keysFor` is on the receive hot path: it costs a map
 * lookup, plus a stat of the file at most every `checkIntervalMs`; the file is re-read only when
 * its inode, size or mtime changed (an atomic `agentbridge trust` write always changes the inode).
 *
 * The first load throws, so a gateway with a broken trust store does not start. A later edit that
 * breaks the file makes the store trust no one (fail closed: messages are dead-lettered and can be
 * requeued once it is fixed) and reports the error through `onError`; `problem` holds it.
 */
export class TrustStore {
  readonly path: string;
  private hosts: ReadonlyMap<string, HostKeys> = new Map();
  private readonly file: FileStamps;
  private lastProblem: BridgeError | undefined;
  /** What was loaded last, to tell a change of the keys from a re-read of the same file. */
  private loaded: string | undefined;
  private changes = 0;
  private readonly onError: ((err: BridgeError) => void) | undefined;

  constructor(
    readonly home: string,
    options: TrustStoreOptions = {},
  ) {
    this.path = trustFilePath(home);
    this.file = new FileStamps([this.path], options);
    this.onError = options.onError;
    this.refresh(true);
  }

  /** The keys trusted to sign for `host`; empty when the host is not trusted. */
  keysFor(host: string): readonly PublicKeyString[] {
    return this.current(host)?.signing ?? [];
  }

  /** The keys `host` is sealed to (its newest last); empty when it gave none. */
  sealingKeysFor(host: string): readonly SealingKeyString[] {
    return this.current(host)?.sealing ?? [];
  }

  /** The hosts that gave a sealing key: a broadcast is sealed to each. */
  hostsWithSealingKeys(): string[] {
    this.current('');
    return [...this.hosts].filter(([, keys]) => keys.sealing.length > 0).map(([host]) => host);
  }

  /** How many times the trusted keys changed since this store was made (a host's, any host's). */
  get generation(): number {
    this.current('');
    return this.changes;
  }

  private current(host: string): HostKeys | undefined {
    if (this.file.due) this.refresh(false);
    return this.hosts.get(host);
  }

  /** Why the current file could not be loaded, if it could not. */
  get problem(): BridgeError | undefined {
    return this.lastProblem;
  }

  private refresh(initial: boolean): void {
    const { changed, reread } = this.file.check();
    if (!initial && !reread) return;
    try {
      const file = readTrustFile(this.home);
      this.hosts = new Map(Object.entries(file.hosts).map(([host, keys]) => [host, splitKeys(keys)]));
      this.lastProblem = undefined;
      this.keysLoaded(JSON.stringify(file.hosts));
    } catch (err) {
      const error = err instanceof BridgeError ? err : badTrustStore(this.path, (err as Error).message, err);
      if (initial) throw error;
      this.hosts = new Map();
      this.keysLoaded('');
      const fresh = changed || this.lastProblem?.message !== error.message;
      this.lastProblem = error;
      if (fresh) this.onError?.(error);
    }
  }

  private keysLoaded(keys: string): void {
    if (keys !== this.loaded) this.changes++;
    this.loaded = keys;
  }
}
