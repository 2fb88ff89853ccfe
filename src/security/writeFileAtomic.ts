import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, linkSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

export interface WriteFileAtomicOptions {
  /** File mode; the temp file is created with it, so the content is never more exposed. */
  mode: number;
  /** Fail with EEXIST instead of replacing an existing file (atomically: no check-then-write race). */
  noClobber?: boolean;
}

/**
 * Writes a file so that readers see either the old content or the new, never a torn one:
 * write a temp file in the same directory, fsync it, then rename (or hard-link, for
 * `noClobber`) it into place.
 */
export function writeFileAtomic(path: string, data: string, options: WriteFileAtomicOptions): void {
  const temp = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
  const fd = openSync(temp, 'wx', options.mode);
  try {
    writeSync(fd, data);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  try {
    if (options.noClobber) linkSync(temp, path);
    else renameSync(temp, path);
  } finally {
    rmSync(temp, { force: true });
  }
}
