import type { Logger } from '../log/logger.js';
import { isDamagedFile } from '../store/storeDamage.js';

/**
 * Runs one actor's resumption at start. A record that no longer folds into its machine (an
 * older release's, a hand-edited or damaged database) must not keep the gateway down: it is
 * logged with what it is, left in the store as it is for a post-mortem (`agentbridge replay`), and
 * the rest start. Returns whether it resumed. A damaged file is no one actor's: SQLite's word
 * for it goes on up, and the gateway does not start (see storeDamage).
 */
export function resumeOrReport(
  logger: Logger,
  identity: Readonly<Record<string, string | null>>,
  resume: () => void,
): boolean {
  try {
    resume();
    return true;
  } catch (err) {
    if (isDamagedFile(err)) throw err;
    logger.error(
      { err, ...identity },
      'a stored actor does not fold into its machine: left in the store as it is, not resumed',
    );
    return false;
  }
}
