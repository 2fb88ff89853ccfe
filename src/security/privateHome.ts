import {
  chmodSync,
  closeSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  type Stats,
  statSync,
} from 'node:fs';
import { userInfo } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { BridgeError, ErrorCode } from '../errors.js';
import { insecureKeyError, isPrivateKeyFile } from './keys.js';

/**
 * The home is private by construction: it holds undelivered bodies, token hashes, the signing
 * key and the admin socket. At start the home and everything in it lose their group and other
 * bits (0755 → 0700, 0644 → 0600), whatever made them (`mkdir -p` under umask 022, an earlier
 * release, a restored backup); what the gateway creates there afterwards is created private
 * (`createPrivateFile`; SQLite gives `-wal` and `-shm` the mode of their database). What cannot
 * be made private refuses the start (HOME_INSECURE, with the command that fixes it): an entry
 * another user owns, which that user can read and open up again whatever mode it has, or one
 * whose mode cannot be changed. The private keys (signing and sealing) are the exception:
 * readable by others one is refused (KEY_INSECURE), since a key others may have read is to be
 * replaced, not hidden.
 */

const privateBits = 0o700;

export interface PrivateHomeOptions {
  /**
   * Directories in the home whose contents belong to the agents (the repositories of spawned
   * agents): made private themselves, their contents left as the agents keep them.
   */
  agentDirs?: readonly string[];
}

/** An entry whose mode let group or others in, and that mode (`0644`). */
export interface OpenedEntry {
  path: string;
  mode: string;
}

/**
 * Creates `home` if needed and makes it and everything in it private; returns the entries that
 * were not (relative to the home), for the caller to log: anyone who could read them may have.
 * Symbolic links are not followed: what they point to is not the home's.
 */
export function makeHomePrivate(home: string, options: PrivateHomeOptions = {}): OpenedEntry[] {
  mkdirSync(home, { recursive: true, mode: 0o700 });
  if (process.platform === 'win32') return [];
  const uid = process.getuid?.() ?? 0;
  const opened: OpenedEntry[] = [];
  walkHome(home, options, (path, stat) => {
    if (stat.uid !== uid) throw ownedByAnother(home, path, stat.uid);
    if ((stat.mode & 0o077) === 0) return;
    if (isPrivateKeyFile(home, path)) throw insecureKeyError(path, stat.mode);
    try {
      chmodSync(path, stat.mode & privateBits);
    } catch (err) {
      throw notPrivate(home, path, err);
    }
    opened.push({ path: relative(home, path) || '.', mode: octal(stat.mode) });
  });
  return opened;
}

/**
 * The entries of `home` open to group or others, changing nothing (what `makeHomePrivate`
 * would close at the next start): for `agentbridge doctor`.
 */
export function openEntries(home: string, options: PrivateHomeOptions = {}): OpenedEntry[] {
  if (process.platform === 'win32') return [];
  const open: OpenedEntry[] = [];
  walkHome(home, options, (path, stat) => {
    if ((stat.mode & 0o077) !== 0) open.push({ path: relative(home, path) || '.', mode: octal(stat.mode) });
  });
  return open;
}

/** Every entry of the home, symbolic links and the agents' own directories' contents aside. */
function walkHome(
  home: string,
  options: PrivateHomeOptions,
  visit: (path: string, stat: Stats) => void,
): void {
  const agentDirs = new Set((options.agentDirs ?? []).map((dir) => resolve(dir)));
  const walk = (path: string, stat: Stats) => {
    if (stat.isSymbolicLink()) return;
    visit(path, stat);
    if (!stat.isDirectory() || agentDirs.has(resolve(path))) return;
    for (const name of readdirSync(path)) {
      const child = join(path, name);
      const childStat = lstatOrGone(child);
      if (childStat) walk(child, childStat);
    }
  };
  walk(home, statSync(home));
}

/**
 * Creates `path` empty with mode 0600 if it does not exist (an existing file keeps its content),
 * for files another library creates with its own default mode: SQLite makes a database 0644
 * less the umask.
 */
export function createPrivateFile(path: string): void {
  closeSync(openSync(path, 'a', 0o600));
}

function lstatOrGone(path: string): Stats | undefined {
  try {
    return lstatSync(path);
  } catch (err) {
    // Removed since its directory was read (a stale socket, a temp file): nothing to protect.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

function octal(mode: number): string {
  return (mode & 0o777).toString(8).padStart(4, '0');
}

function ownedByAnother(home: string, path: string, owner: number): BridgeError {
  const user = userInfo().username;
  return new BridgeError(
    ErrorCode.homeInsecure,
    `${path} in the gateway's home belongs to another user (uid ${owner}), who can read it and open it ` +
      `up whatever its mode; as root run \`chown -R ${user} ${home} && chmod -R go-rwx ${home}\` ` +
      '(or give the gateway a home of its own: BRIDGE_HOME)',
    { details: { home, path, uid: owner } },
  );
}

function notPrivate(home: string, path: string, err: unknown): BridgeError {
  return new BridgeError(
    ErrorCode.homeInsecure,
    `${path} in the gateway's home is open to group or others and could not be made private ` +
      `(${(err as Error).message}); run \`chmod -R go-rwx ${home}\`, then start again`,
    { cause: err, details: { home, path } },
  );
}
