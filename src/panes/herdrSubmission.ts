/**
 * Typing a message into a herdr pane and submitting it, each step verified by reading the pane
 * back (R-DL6), never typing a message twice (R-DL5). From herdr 0.8.2 on, `agent.prompt`
 * types and submits in one request, refusing a blocked agent without typing; before that,
 * typing (`pane.send_input` with text only) and Enter (its own `pane.send_input`, after a
 * pause) are two requests.
 */

import { BridgeError, ErrorCode } from '../errors.js';
import { type Clock, sleep } from '../kernel/clock.js';
import type { HerdrPaneReader } from './herdrPaneReader.js';
import { HerdrErrorCode, HerdrMethod } from './herdrProtocol.js';
import { locateOnScreen, shownOnScreen } from './herdrScreen.js';
import { type HerdrSession, herdrCodeOf } from './herdrSession.js';
import type { HerdrStatusWatch } from './herdrStatusWatch.js';
import {
  DeferReason,
  type PaneInjector,
  type PaneMessage,
  PaneStatus,
  type SubmitOutcome,
  type TypeOutcome,
} from './paneInjector.js';

export interface HerdrSubmissionOptions {
  /** How long one request may take; `agent.prompt` gets `promptWaitMs` on top. */
  readonly requestTimeoutMs: number;
  /** Pause between typing and Enter where herdr has no `agent.prompt`. */
  readonly submitDelayMs: number;
  /** How long to read the pane back for typed text to show, or to leave the input area. */
  readonly confirmTimeoutMs: number;
  /** Between two reads of that. */
  readonly pollIntervalMs: number;
  /** Enter presses `submit` makes at most. */
  readonly maxEnterPresses: number;
  /** How long `agent.prompt` waits, in herdr, for the agent to react. */
  readonly promptWaitMs: number;
  /** A line that starts the agent's input area. */
  readonly promptLine: RegExp;
  readonly clock: Clock;
}

/** The injector's `type` and `submit`, for a message already neutralised for the pane. */
export type HerdrSubmission = Pick<PaneInjector, 'type' | 'submit'>;

/** Statuses after an `agent.prompt` that show the agent took it: a turn started, ended, or asks. */
const PROMPT_TOOK: readonly PaneStatus[] = [PaneStatus.working, PaneStatus.done, PaneStatus.blocked];

/** So a caller that never calls `submit` after an `agent.prompt` cannot grow the set without bound. */
const MAX_REMEMBERED_PROMPTS = 256;

const deferred = (reason: DeferReason, detail: string): TypeOutcome & SubmitOutcome => ({
  kind: 'deferred',
  reason,
  detail,
});

export function createHerdrSubmission(
  session: HerdrSession,
  status: HerdrStatusWatch,
  pane: HerdrPaneReader,
  options: HerdrSubmissionOptions,
): HerdrSubmission {
  const { paneId, socketPath } = session;
  const {
    requestTimeoutMs,
    submitDelayMs,
    confirmTimeoutMs,
    pollIntervalMs,
    maxEnterPresses,
    promptWaitMs,
    promptLine,
    clock,
  } = options;

  /** Runs `probe` until it returns a value or `confirmTimeoutMs` has passed. */
  async function pollFor<T>(probe: () => Promise<T | undefined>): Promise<T | undefined> {
    const deadline = clock.now() + confirmTimeoutMs;
    for (;;) {
      const found = await probe();
      if (found !== undefined) return found;
      if (clock.now() >= deadline) return undefined;
      await sleep(clock, pollIntervalMs);
    }
  }

  // Messages `agent.prompt` typed and submitted, for `submit` to confirm without reading.
  const prompted = new Set<string>();

  function rememberPrompted(marker: string): void {
    prompted.add(marker);
    if (prompted.size > MAX_REMEMBERED_PROMPTS) {
      const oldest = prompted.values().next().value;
      if (oldest !== undefined) prompted.delete(oldest);
    }
  }

  /** herdr types and submits: undefined when it cannot for this pane, so the caller types by keys. */
  async function typeByPrompt(message: PaneMessage): Promise<TypeOutcome | undefined> {
    try {
      await session.request(
        HerdrMethod.agentPrompt,
        {
          target: paneId,
          text: message.text,
          wait: { until: PROMPT_TOOK, timeout_ms: promptWaitMs },
        },
        { typing: 'text', timeoutMs: promptWaitMs + requestTimeoutMs },
      );
      rememberPrompted(message.marker);
      return { kind: 'submitted', how: 'herdr agent.prompt' };
    } catch (err) {
      switch (herdrCodeOf(err)) {
        case HerdrErrorCode.agentBlocked:
          return deferred(
            DeferReason.blocked,
            `herdr refused agent.prompt: the agent in pane ${paneId} waits at a dialog; nothing was typed`,
          );
        case HerdrErrorCode.invalidRequest:
          session.withoutFeature('agentPrompt');
          return undefined;
        case HerdrErrorCode.agentNotFound:
          // No agent herdr recognises runs there (a plain line reader, say), and nothing was
          // written: type it key by key instead.
          return undefined;
        case HerdrErrorCode.agentNotReady:
          // An agent herdr knows, still starting or gone from the foreground: its shell may be
          // what reads keys now, so type nothing.
          return deferred(
            DeferReason.busy,
            `herdr says the agent in pane ${paneId} is not ready for a prompt; nothing was typed`,
          );
        case HerdrErrorCode.agentPromptStalled:
        case HerdrErrorCode.timeout:
          // Typed and Enter pressed, but the agent did not visibly react: `submit` reads the
          // pane back and presses Enter again if the text still waits in the input area.
          return { kind: 'typed' };
        case HerdrErrorCode.agentNotRunning:
          throw new BridgeError(
            ErrorCode.injectFailed,
            `the agent in herdr pane ${paneId} went away while it was prompted: the text may have been typed; check the pane's output for the message id before typing it again`,
            {
              cause: err,
              details: { paneId, socketPath, herdrCode: HerdrErrorCode.agentNotRunning, ambiguous: true },
            },
          );
        default:
          throw err;
      }
    }
  }

  /** Types without Enter (`pane.send_input` text only), then waits to see it in the input area. */
  async function typeByKeys(message: PaneMessage): Promise<TypeOutcome> {
    await session.request(
      HerdrMethod.paneSendInput,
      { pane_id: paneId, text: message.text },
      { typing: 'text' },
    );
    const seen = await pollFor(async () => {
      const where = await pane.locate(message);
      return where === 'absent' ? undefined : where;
    });
    if (seen === 'typed') return { kind: 'typed' };
    if (seen === 'submitted')
      return { kind: 'submitted', how: 'herdr pane.send_input (the agent took the text as typed)' };
    return deferred(
      DeferReason.notShown,
      `typed into herdr pane ${paneId}, but it did not show in the input area within ${confirmTimeoutMs} ms (dropped, or the agent is not at its prompt)`,
    );
  }

  return {
    async type(message) {
      if (message.text === '') {
        // Enter alone would submit whatever the user has half-typed (R-DL2).
        throw new BridgeError(
          ErrorCode.injectFailed,
          `refusing to type an empty message into herdr pane ${paneId}`,
        );
      }
      const known = await session.features();
      const held = pane.statusHold(await status.now());
      if (held) return deferred(held.reason, held.detail);
      const screen = await pane.read();
      // Typed before a crash, or already taken: never type it twice (R-DL5).
      const where = locateOnScreen(screen, message, promptLine);
      if (where === 'typed') return { kind: 'typed' };
      if (where === 'submitted') return { kind: 'submitted', how: 'already in herdr pane transcript' };
      const onScreen = pane.screenHold(screen);
      if (onScreen) return deferred(onScreen.reason, onScreen.detail);
      // Folded into one line unless the table knows the agent: one message, one input.
      const typed = { ...message, text: shownOnScreen(screen, message.text) };
      if (known.agentPrompt) {
        const outcome = await typeByPrompt(typed);
        if (outcome !== undefined) return outcome;
      }
      return typeByKeys(typed);
    },

    async submit(message) {
      if (prompted.delete(message.marker)) return { kind: 'submitted', how: 'herdr agent.prompt' };
      // herdr's own prompt waits before Enter, so a TUI that reads a paste in chunks has it all.
      await sleep(clock, submitDelayMs);
      let presses = 0;
      for (;;) {
        const where = await pane.locate(message);
        if (where === 'submitted' || (where === 'absent' && presses > 0)) {
          return {
            kind: 'submitted',
            how:
              presses === 0
                ? 'already left the input area'
                : 'herdr pane.send_input Enter; the text left the input area',
          };
        }
        if (where === 'absent') {
          return {
            kind: 'not-submitted',
            detail: `the message is not in the input area of herdr pane ${paneId}: nothing was pressed`,
          };
        }
        if (presses >= maxEnterPresses) {
          return {
            kind: 'not-submitted',
            detail: `Enter pressed ${presses} times in herdr pane ${paneId} and the text still waits in the input area`,
          };
        }
        const now = await status.now();
        if (now === PaneStatus.blocked) {
          return deferred(
            DeferReason.blocked,
            `the agent in herdr pane ${paneId} waits at a dialog: Enter would answer it; nothing was pressed`,
          );
        }
        if (now === PaneStatus.working) {
          if (presses > 0)
            return { kind: 'submitted', how: 'herdr pane.send_input Enter; the agent is working' };
          return deferred(DeferReason.busy, `the agent in herdr pane ${paneId} is working: Enter waits`);
        }
        await session.request(
          HerdrMethod.paneSendInput,
          { pane_id: paneId, keys: ['Enter'] },
          { typing: 'enter' },
        );
        presses++;
        const took = await pollFor(async () => {
          if ((await status.now()) === PaneStatus.working) return 'the agent is working';
          return (await pane.locate(message)) === 'typed' ? undefined : 'the text left the input area';
        });
        if (took !== undefined) return { kind: 'submitted', how: `herdr pane.send_input Enter; ${took}` };
      }
    },
  };
}
