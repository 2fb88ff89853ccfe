import type { Config } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { Logger } from '../log/logger.js';
import { createHerdrInjector } from './herdrInjector.js';
import type { PaneInjector, PaneTarget } from './paneInjector.js';
import { createTmuxInjector, tmuxPaneExists } from './tmuxInjector.js';
import type { SubmissionTiming } from './verifiedSubmission.js';

export interface InjectorFactoryOptions {
  /** herdr socket from the config; else HERDR_SOCKET_PATH / the default location. */
  herdrSocketPath?: string | undefined;
  logger: Logger;
  /** How submission is verified (R-DL6): the `delivery.*` timing keys. */
  timing?: Partial<SubmissionTiming> | undefined;
}

/** The verification timing from the `delivery` config. */
export function submissionTiming(delivery: Config['delivery']): SubmissionTiming {
  return {
    showTimeoutMs: delivery.showTimeoutMs,
    submitTimeoutMs: delivery.submitTimeoutMs,
    pollMs: delivery.pollMs,
    enterAttempts: delivery.enterAttempts,
    historyLines: delivery.captureLines,
    enterPauseMs: delivery.enterPauseMs,
    programSettleMs: delivery.programSettleMs,
  };
}

/** Builds the injector for a pane target. */
export function createInjectorFactory(options: InjectorFactoryOptions): (pane: PaneTarget) => PaneInjector {
  return (pane) => {
    if (pane.type === 'tmux') {
      return createTmuxInjector({ target: pane.target, socket: pane.socket, timing: options.timing });
    }
    return createHerdrInjector({
      paneId: pane.paneId,
      socketPath: pane.socketPath ?? options.herdrSocketPath,
      logger: options.logger,
    });
  };
}

/**
 * Refuses to register a worker on a tmux pane that does not exist. herdr panes are checked
 * when the injector connects: herdr may legitimately start after the gateway.
 */
export async function checkPane(pane: PaneTarget): Promise<void> {
  if (pane.type !== 'tmux') return;
  if (!(await tmuxPaneExists(pane.target, pane.socket))) {
    throw new BridgeError(
      ErrorCode.paneUnavailable,
      `tmux pane ${pane.target} not found${pane.socket ? ` on the tmux server at ${pane.socket}` : ''}: ` +
        'check the target with `tmux list-panes -a -F "#{pane_id} #{session_name}:#{window_index}.#{pane_index}"`',
    );
  }
}
