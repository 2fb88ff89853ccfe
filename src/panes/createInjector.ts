import type { Config } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { Clock } from '../kernel/clock.js';
import type { Logger } from '../log/logger.js';
import type { BusyPolicy } from '../wire/agentHost.js';
import type { PaneTarget } from '../wire/paneTarget.js';
import { agentHostHello, createAgentHostInjector } from './agentHostInjector.js';
import { createHerdrInjector } from './herdrInjector.js';
import { HerdrErrorCode, HerdrMethod } from './herdrProtocol.js';
import { createHerdrSession, herdrCodeOf } from './herdrSession.js';
import type { PaneInjector } from './paneInjector.js';
import { resolveHerdrSocketPath } from './resolveHerdrSocketPath.js';
import { createTmuxInjector, tmuxPaneExists } from './tmuxInjector.js';
import type { SubmissionTiming } from './verifiedSubmission.js';

export interface InjectorFactoryOptions {
  /** herdr socket from the config; else HERDR_SOCKET_PATH / the default location. */
  herdrSocketPath?: string | undefined;
  logger: Logger;
  /** How submission is verified (R-DL6): the `delivery.*` timing keys. */
  timing?: Partial<SubmissionTiming> | undefined;
  /** What the injectors' waits and deadlines read (the gateway's). */
  clock: Clock;
  /** `delivery.busy`: a worker behind an agent host that names no policy of its own gets this. */
  busy?: BusyPolicy | undefined;
}

/** The verification timing from the `delivery` config. */
export function submissionTiming(delivery: Config['delivery']): SubmissionTiming {
  return {
    showTimeoutMs: delivery.showTimeoutMs,
    submitTimeoutMs: delivery.submitTimeoutMs,
    proofTimeoutMs: delivery.proofTimeoutMs,
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
      return createTmuxInjector({
        target: pane.target,
        socket: pane.socket,
        timing: options.timing,
        clock: options.clock,
      });
    }
    if (pane.type === 'agent')
      return createAgentHostInjector({ socketPath: pane.socketPath, busy: pane.busy ?? options.busy });
    return createHerdrInjector({
      paneId: pane.paneId,
      socketPath: pane.socketPath ?? options.herdrSocketPath,
      logger: options.logger,
      clock: options.clock,
    });
  };
}

/**
 * The check made before a worker is registered on a pane: the pane must exist, so that a typo
 * or a herdr that does not answer (a wrong socket) is an error at once, not a worker whose
 * messages wait forever behind a roster that reads `busy`. A registered herdr pane whose herdr
 * goes away later is the injector's to wait out.
 */
export function paneChecker(herdrSocketPath: string | undefined): (pane: PaneTarget) => Promise<void> {
  return async (pane) => {
    if (pane.type === 'tmux') {
      if (!(await tmuxPaneExists(pane.target, pane.socket))) {
        throw new BridgeError(
          ErrorCode.paneUnavailable,
          `tmux pane ${pane.target} not found${pane.socket ? ` on the tmux server at ${pane.socket}` : ''}: ` +
            'check the target with `tmux list-panes -a -F "#{pane_id} #{session_name}:#{window_index}.#{pane_index}"`',
        );
      }
      return;
    }
    if (pane.type === 'agent') {
      // Says hello, or throws PANE_UNAVAILABLE saying how to start the host.
      await agentHostHello(pane.socketPath);
      return;
    }
    const socketPath = pane.socketPath ?? herdrSocketPath ?? resolveHerdrSocketPath(process.env);
    const session = createHerdrSession({
      paneId: pane.paneId,
      socketPath,
      requestTimeoutMs: 5_000,
      connectTimeoutMs: 2_000,
    });
    try {
      await session.request(HerdrMethod.paneGet, { pane_id: pane.paneId });
    } catch (err) {
      // herdr's own "no such pane" already says what to do.
      if (herdrCodeOf(err) === HerdrErrorCode.paneNotFound) throw err;
      throw new BridgeError(
        ErrorCode.paneUnavailable,
        `herdr does not answer at ${socketPath} (${err instanceof Error ? err.message : String(err)}): ` +
          "start herdr, or give the gateway herdr's socket (herdr.socketPath in its config, BRIDGE_HERDR_SOCKET) and register again",
        { cause: err },
      );
    } finally {
      session.close();
    }
  };
}
