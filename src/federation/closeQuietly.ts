import type { Logger } from '../log/logger.js';

/**
 * Closes a channel or connection that may be closed already (by the broker's error, or the
 * connection going down under it). Failing to close what is gone cannot matter, so it is
 * logged at debug only; `what` names it in that line.
 */
export async function closeQuietly(
  closable: { close(): Promise<void> } | undefined,
  logger: Logger,
  what: string,
): Promise<void> {
  try {
    await closable?.close();
  } catch (err) {
    logger.debug({ err }, `${what} was closed already`);
  }
}
