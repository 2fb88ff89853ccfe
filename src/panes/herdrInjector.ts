/**
 * The herdr pane injector: types messages into a herdr pane, submits and verifies them (R-DL6),
 * finds them again after a crash (R-DL5), and follows the status of the agent running there
 * (R-DL2), over herdr's unix-socket API.
 *
 * Assembled from its parts, one concern each: the requests and the server's features
 * (`herdrSession.ts`), the status subscription (`herdrStatusWatch.ts`), reading the pane back
 * (`herdrPaneReader.ts`), and typing and submitting (`herdrSubmission.ts`).
 */
import { BridgeError, ErrorCode } from '../errors.js';
import { type Clock, systemClock } from '../kernel/clock.js';
import { neutralise } from '../text/neutralise.js';
import { createHerdrPaneReader } from './herdrPaneReader.js';
import { DEFAULT_PROMPT_LINE } from './herdrScreen.js';
import { createHerdrSession, type HerdrLogger } from './herdrSession.js';
import { createHerdrStatusWatch } from './herdrStatusWatch.js';
import { createHerdrSubmission } from './herdrSubmission.js';
import type { PaneInjector, PaneMessage } from './paneInjector.js';
import { resolveHerdrSocketPath } from './resolveHerdrSocketPath.js';

export interface HerdrInjectorOptions {
  /** herdr pane id, preferably the stable form (`w64e95948145ed1-1`) a pane sees in HERDR_PANE_ID. */
  readonly paneId: string;
  /** Socket path; when absent it is resolved from `env` with `resolveHerdrSocketPath`. */
  readonly socketPath?: string | undefined;
  readonly env?: Readonly<Record<string, string | undefined>> | undefined;
  /** How long one request may take. herdr itself gives its UI thread 5 s to answer. Default 7000. */
  readonly requestTimeoutMs?: number | undefined;
  /** Default 2000. */
  readonly connectTimeoutMs?: number | undefined;
  /** First delay before reopening a dropped status subscription; doubles up to the max. Default 100. */
  readonly reconnectMinMs?: number | undefined;
  /** Default 5000. */
  readonly reconnectMaxMs?: number | undefined;
  /** Lines `contains` and `locate` read when the caller gives none. Default 200. */
  readonly readLines?: number | undefined;
  /**
   * Pause between typing and Enter where herdr has no `agent.prompt`. Default 300, what herdr's
   * own prompt waits (AGENT_PROMPT_SUBMIT_DELAY, from 0.8.0); never less than 40.
   */
  readonly submitDelayMs?: number | undefined;
  /** How long to read the pane back for typed text to show, or to leave the input area. Default 1500. */
  readonly confirmTimeoutMs?: number | undefined;
  /** Between two reads of that. Default 50. */
  readonly pollIntervalMs?: number | undefined;
  /** Enter presses `submit` makes at most: the first, and this many minus one again. Default 3. */
  readonly maxEnterPresses?: number | undefined;
  /**
   * How long `agent.prompt` waits, in herdr, for the agent to react. Default 5000, herdr's own
   * limit for a prompt's first state change.
   */
  readonly promptWaitMs?: number | undefined;
  /** A line that starts the agent's input area. Default `DEFAULT_PROMPT_LINE`. */
  readonly promptLine?: RegExp | undefined;
  readonly logger?: HerdrLogger | undefined;
  /** What its waits and deadlines read; default the system clock. */
  readonly clock?: Clock | undefined;
}

// Typed as keys, a message's control characters would act and its bidi or zero-width ones
// would change what is read: the neutralisation the tmux injector applies too.
function checked(message: PaneMessage): PaneMessage {
  return { text: neutralise(message.text), marker: message.marker };
}

/**
 * Creates an injector for one herdr pane. Resolves the socket path at once (and throws on a
 * bad HERDR_SESSION) but connects only when used: each request on its own connection, and the
 * status subscription from the first `watchStatus` until the last unsubscribe or `close`.
 *
 * `type` and `submit` look at the status themselves and never type into a blocked or working
 * agent, but holding a message until the pane is ready (R-DL2) is still the caller's
 * decision, made from `watchStatus`.
 */
export function createHerdrInjector(options: HerdrInjectorOptions): PaneInjector {
  const paneId = options.paneId;
  if (paneId.trim() === '') {
    throw new BridgeError(ErrorCode.badConfig, 'herdr pane id is empty: pass the pane id (HERDR_PANE_ID)');
  }
  const requestTimeoutMs = options.requestTimeoutMs ?? 7000;
  const connectTimeoutMs = options.connectTimeoutMs ?? 2000;
  const promptLine = options.promptLine ?? DEFAULT_PROMPT_LINE;
  const logger = options.logger;

  const session = createHerdrSession({
    paneId,
    socketPath: options.socketPath ?? resolveHerdrSocketPath(options.env ?? process.env),
    requestTimeoutMs,
    connectTimeoutMs,
    logger,
  });
  const status = createHerdrStatusWatch(session, {
    requestTimeoutMs,
    connectTimeoutMs,
    reconnectMinMs: options.reconnectMinMs ?? 100,
    reconnectMaxMs: options.reconnectMaxMs ?? 5000,
    logger,
  });
  const pane = createHerdrPaneReader(session, status, { readLines: options.readLines ?? 200, promptLine });
  const submission = createHerdrSubmission(session, status, pane, {
    requestTimeoutMs,
    submitDelayMs: Math.max(40, options.submitDelayMs ?? 300),
    confirmTimeoutMs: options.confirmTimeoutMs ?? 1500,
    pollIntervalMs: options.pollIntervalMs ?? 50,
    maxEnterPresses: Math.max(1, options.maxEnterPresses ?? 3),
    promptWaitMs: options.promptWaitMs ?? 5000,
    promptLine,
    clock: options.clock ?? systemClock,
  });

  return {
    inspect: pane.hold,
    type: (message) => submission.type(checked(message)),
    submit: (message) => submission.submit(checked(message)),
    locate: (message) => pane.locate(checked(message)),
    async contains(marker, lines) {
      return (await pane.read(lines)).includes(marker);
    },
    watchStatus: status.watch,
    async close() {
      if (session.closed) return;
      session.close();
      status.close();
    },
  };
}
