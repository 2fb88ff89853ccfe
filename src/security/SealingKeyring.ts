import type { BridgeError } from '../errors.js';
import { FileStamps, type FileStampsOptions } from './FileStamps.js';
import { keyPaths, loadSealingKeys, type SealingKeys } from './keys.js';

/**
 * A running gateway's sealing keys, re-read when `keys rotate` or `keys retire` changed them
 * (the key directory or `sealing.current` changed: `FileStamps`, as the trust store is), so
 * neither needs a restart: a rotated key opens what peers seal to it and is announced in the
 * next PRESENCE; a retired one opens nothing more. A change that does not load (a file half
 * restored by hand) keeps the keys it had, and says why through `onError`.
 */
export class SealingKeyring {
  private keys: SealingKeys;
  private readonly files: FileStamps;

  constructor(
    private readonly home: string,
    initial: SealingKeys,
    private readonly options: FileStampsOptions & { onError?: (err: BridgeError) => void } = {},
  ) {
    this.keys = initial;
    const { dir, sealingCurrentPath } = keyPaths(home);
    this.files = new FileStamps([dir, sealingCurrentPath], options);
    this.files.check();
  }

  /** The keys as they are on disk now (within the check interval). */
  get current(): SealingKeys {
    if (this.files.due && this.files.check().reread) this.reload();
    return this.keys;
  }

  private reload(): void {
    try {
      const keys = loadSealingKeys(this.home);
      if (keys) this.keys = keys;
    } catch (err) {
      this.options.onError?.(err as BridgeError);
    }
  }
}
