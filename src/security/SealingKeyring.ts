import { statSync } from 'node:fs';
import type { BridgeError } from '../errors.js';
import { keyPaths, loadSealingKeys, type SealingKeys } from './keys.js';

/**
 * A running gateway's sealing keys, re-read when `keys rotate` or `keys retire` changed them
 * (the key directory or `sealing.current` changed), so neither needs a restart: a rotated key
 * opens what peers seal to it and is announced in the next PRESENCE; a retired one opens nothing
 * more. Checked at most every `checkIntervalMs`. A change that does not load (a file half
 * restored by hand) keeps the keys it had, and says why through `onError`.
 */
export class SealingKeyring {
  private keys: SealingKeys;
  private stamp: string;
  private nextCheckAt = 0;

  constructor(
    private readonly home: string,
    initial: SealingKeys,
    private readonly options: {
      checkIntervalMs?: number;
      now?: () => number;
      onError?: (err: BridgeError) => void;
    } = {},
  ) {
    this.keys = initial;
    this.stamp = this.currentStamp();
  }

  /** The keys as they are on disk now (within the check interval). */
  get current(): SealingKeys {
    const now = (this.options.now ?? Date.now)();
    if (now >= this.nextCheckAt) {
      this.nextCheckAt = now + (this.options.checkIntervalMs ?? 500);
      const stamp = this.currentStamp();
      if (stamp !== this.stamp) this.reload(stamp);
    }
    return this.keys;
  }

  private reload(stamp: string): void {
    try {
      const keys = loadSealingKeys(this.home);
      if (keys) this.keys = keys;
      this.stamp = stamp;
    } catch (err) {
      this.options.onError?.(err as BridgeError);
    }
  }

  private currentStamp(): string {
    const { dir, sealingCurrentPath } = keyPaths(this.home);
    try {
      const directory = statSync(dir);
      const current = statSync(sealingCurrentPath);
      return `${directory.mtimeMs}:${current.mtimeMs}:${current.ino}`;
    } catch {
      return 'unreadable';
    }
  }
}
