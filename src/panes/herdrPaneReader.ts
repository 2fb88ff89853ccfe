/**
 * Reading one herdr pane back: its recent text, where a message is on it, and whether the
 * pane can take a message now, from the agent's status and from what the screen shows.
 */
import { HERDR_MAX_READ_LINES, HerdrMethod } from './herdrProtocol.js';
import { knownAgentScreen, locateOnScreen, pendingInput } from './herdrScreen.js';
import type { HerdrSession } from './herdrSession.js';
import type { HerdrStatusWatch } from './herdrStatusWatch.js';
import {
  DeferReason,
  type PaneHold,
  type PaneMessage,
  PaneStatus,
  type Whereabouts,
} from './paneInjector.js';

export interface HerdrPaneReaderOptions {
  /** Lines `read` returns when the caller gives none. */
  readonly readLines: number;
  /** A line that starts the agent's input area. */
  readonly promptLine: RegExp;
}

export interface HerdrPaneReader {
  /** The pane's last `lines` lines, as text. */
  read(lines?: number): Promise<string>;
  locate(message: PaneMessage): Promise<Whereabouts>;
  /** Why herdr's status keeps hands off the pane, or undefined. */
  statusHold(now: PaneStatus): PaneHold | undefined;
  /** Why the screen keeps hands off the pane (a dialog, someone's half-typed input), or undefined. */
  screenHold(screen: string): PaneHold | undefined;
  /** Why the pane cannot take a message now, from its status and then its screen; the injector's `inspect`. */
  hold(): Promise<PaneHold | undefined>;
}

export function createHerdrPaneReader(
  session: HerdrSession,
  status: HerdrStatusWatch,
  options: HerdrPaneReaderOptions,
): HerdrPaneReader {
  const { paneId } = session;
  const { readLines, promptLine } = options;

  async function read(lines = readLines): Promise<string> {
    const result = await session.request(HerdrMethod.paneRead, {
      pane_id: paneId,
      // Soft wraps joined, so a marker the pane width broke in two still matches.
      source: 'recent_unwrapped',
      lines: Math.max(1, Math.min(Math.trunc(lines), HERDR_MAX_READ_LINES)),
      format: 'text',
      strip_ansi: true,
    });
    return result.read.text;
  }

  function statusHold(now: PaneStatus): PaneHold | undefined {
    if (now === PaneStatus.blocked) {
      return { reason: DeferReason.blocked, detail: `the agent in herdr pane ${paneId} waits at a dialog` };
    }
    if (now === PaneStatus.working) {
      return { reason: DeferReason.busy, detail: `the agent in herdr pane ${paneId} is working` };
    }
    return undefined;
  }

  function screenHold(screen: string): PaneHold | undefined {
    // herdr's status and the agent table agree on most dialogs; either is enough to hold.
    const known = knownAgentScreen(screen);
    if (known?.blocked) {
      return {
        reason: DeferReason.blocked,
        detail: `herdr pane ${paneId} shows a dialog ("${known.blocked}")`,
      };
    }
    const pending = pendingInput(screen, promptLine);
    if (pending !== undefined && pending !== '') {
      return {
        reason: DeferReason.dirtyInput,
        detail: `the input area of herdr pane ${paneId} already holds text (${JSON.stringify(pending.slice(0, 40))})`,
      };
    }
    return undefined;
  }

  return {
    read,
    async locate(message) {
      return locateOnScreen(await read(), message, promptLine);
    },
    statusHold,
    screenHold,
    async hold() {
      return statusHold(await status.now()) ?? screenHold(await read());
    },
  };
}
