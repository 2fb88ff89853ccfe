import { statSync } from 'node:fs';

/** How long after its last change a file counts as too fresh for its stamp to tell a change. */
const racyWindowMs = 2_000;

export interface FileStampsOptions {
  /** Least time between two checks of the files' metadata; 0 checks every time. */
  checkIntervalMs?: number;
  /** Milliseconds clock for the check interval (injected in tests). */
  now?: () => number;
}

/**
 * Whether files a running gateway keeps in memory (the trust store, the sealing keys) changed
 * on disk since it read them, asked on every lookup and answered cheaply: a stat of each at most
 * every `checkIntervalMs`, a change being any of device, inode, size, mtime or ctime (an atomic
 * write always changes the inode). A missing file has a stamp of its own; one that cannot be
 * stat'ed counts as changed, so that the read reports the real problem.
 *
 * File timestamps are coarse (a kernel tick): an in-place edit of the same size, in the same tick
 * as the read, would leave the stamp unchanged. While a file is that fresh it is read again at
 * every check instead of trusting its stamp (git's "racy clean" rule). Its mtime is on the file
 * system's clock, so that is what it is compared with, not the gateway's.
 */
export class FileStamps {
  private stamp: string | undefined;
  private racy = false;
  private nextCheckAt = 0;
  private readonly checkIntervalMs: number;
  private readonly now: () => number;

  constructor(
    private readonly paths: readonly string[],
    options: FileStampsOptions = {},
  ) {
    this.checkIntervalMs = options.checkIntervalMs ?? 500;
    this.now = options.now ?? Date.now;
  }

  /** Whether a check is due. */
  get due(): boolean {
    return this.checkIntervalMs === 0 || this.now() >= this.nextCheckAt;
  }

  /**
   * Stats the files now: whether their stamp changed since the last check, and whether they are
   * to be read again (changed, or too fresh at the last check to tell).
   */
  check(): { changed: boolean; reread: boolean } {
    this.nextCheckAt = this.now() + this.checkIntervalMs;
    let modifiedMs = 0;
    const stamps = this.paths.map((path) => {
      try {
        const stat = statSync(path, { bigint: true });
        modifiedMs = Math.max(modifiedMs, Number(stat.mtimeMs));
        return `${stat.dev}:${stat.ino}:${stat.size}:${stat.mtimeNs}:${stat.ctimeNs}`;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'missing';
        modifiedMs = Date.now();
        return `error:${(err as Error).message}`;
      }
    });
    const stamp = stamps.join('\n');
    const changed = stamp !== this.stamp;
    const reread = changed || this.racy;
    this.stamp = stamp;
    this.racy = Date.now() - modifiedMs < racyWindowMs;
    return { changed, reread };
  }
}
