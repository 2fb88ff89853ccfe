/**
 * Verified submission (R-DL6): the procedure that types a message into a pane, presses Enter
 * as its own step and reads the pane back until the agent has taken it, over any pane that
 * can be captured, pasted into and sent an Enter (tmux; herdr servers without `agent.prompt`).
 *
 * What it never does: type into a dialog (the pane is read before the paste and again before
 * every Enter), submit someone's half-typed input (a known agent's input area must be empty
 * before the paste), type a body with `send-keys -l` (letters are hotkeys in dialogs), or press
 * Esc (it brings a submitted message back into Claude Code's input).
 */

import { isLineReader } from './agentScreens.js';
import {
  DeferReason,
  type PaneHold,
  type PaneMessage,
  type SubmitOutcome,
  type TypeOutcome,
  type Whereabouts,
} from './paneInjector.js';
import {
  compact,
  inputEmpty,
  inputHolds,
  messageHead,
  readScreen,
  type Screen,
  type ScreenReading,
  shownTo,
} from './readScreen.js';

/** What the procedure needs from a pane. */
export interface PanePort {
  /** The visible screen and the cursor. */
  capture(): Promise<Screen>;
  /** The last `lines` lines of output, scrollback included. */
  history(lines: number): Promise<string>;
  /**
   * Pastes `text` as one paste, followed by Enter in the same step when `enter` (a line
   * reader), else not submitting it. May return the screen read a moment after (in the same
   * round trip), which saves the first look.
   */
  paste(text: string, enter: boolean): Promise<Screen | undefined>;
  /** Presses Enter, alone; may return the screen read a moment after, as `paste` does. */
  pressEnter(): Promise<Screen | undefined>;
}

export interface SubmissionTiming {
  /** How long a paste may take to show in the input area. */
  readonly showTimeoutMs: number;
  /** How long the agent may take to clear its input after one Enter. */
  readonly submitTimeoutMs: number;
  /** How often the pane is read while waiting. */
  readonly pollMs: number;
  /** Enters pressed, at most, before the message counts as not submitted. */
  readonly enterAttempts: number;
  /** Lines of scrollback `locate` searches for the marker. */
  readonly historyLines: number;
  /** The least pause between an agent's paste and its Enter (the agent table's own applies when longer). */
  readonly enterPauseMs: number;
}

export const defaultSubmissionTiming: SubmissionTiming = {
  showTimeoutMs: 2_000,
  submitTimeoutMs: 1_500,
  pollMs: 25,
  enterAttempts: 3,
  historyLines: 500,
  enterPauseMs: 0,
};

export interface VerifiedSubmission {
  inspect(): Promise<PaneHold | undefined>;
  type(message: PaneMessage): Promise<TypeOutcome>;
  submit(message: PaneMessage): Promise<SubmitOutcome>;
  locate(message: PaneMessage): Promise<Whereabouts>;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Why a pane that is not ready is held, from its reading; undefined when it can take a message. */
export function holdReason(reading: ScreenReading): PaneHold | undefined {
  const name = reading.agent.name;
  if (reading.blocked !== null) {
    return {
      reason: DeferReason.blocked,
      detail: `${name} shows a dialog ("${reading.blocked}"): held until it is answered`,
    };
  }
  if (isLineReader(reading.agent)) return undefined;
  if (reading.input === null) {
    return { reason: DeferReason.busy, detail: `${name} shows no input area: held until its prompt is back` };
  }
  if (!inputEmpty(reading)) {
    return {
      reason: DeferReason.dirtyInput,
      detail: `${name}'s input already holds text someone typed: held until it is empty`,
    };
  }
  if (reading.busy)
    return { reason: DeferReason.busy, detail: `${name} is working on a turn: held until it is idle` };
  return undefined;
}

export function createVerifiedSubmission(
  port: PanePort,
  timing: SubmissionTiming = defaultSubmissionTiming,
): VerifiedSubmission {
  /** When each message was last pasted, so Enter never follows too closely. */
  const pastedAt = new Map<string, number>();

  /** The last reading, and when it was taken: a line reader's submit starts from it. */
  let last: { reading: ScreenReading; at: number } | undefined;

  async function read(screen?: Screen): Promise<ScreenReading> {
    const reading = readScreen(screen ?? (await port.capture()));
    last = { reading, at: Date.now() };
    return reading;
  }

  /** The last reading, if it is a line reader's and was taken a moment ago. */
  function recentLineReader(): ScreenReading | undefined {
    if (!last || !isLineReader(last.reading.agent) || Date.now() - last.at > 250) return undefined;
    return last.reading;
  }

  /**
   * Reads the pane until `done` says yes or `ms` pass; returns the last reading and whether it
   * said yes. `first` is a screen already read (after a paste or an Enter).
   */
  async function until(
    ms: number,
    done: (reading: ScreenReading) => boolean,
    first?: Screen,
  ): Promise<[ScreenReading, boolean]> {
    const deadline = Date.now() + ms;
    let screen = first;
    // Most screens change within milliseconds: look again soon, then every pollMs.
    for (let wait = Math.min(4, timing.pollMs); ; wait = Math.min(wait * 2, timing.pollMs)) {
      const reading = await read(screen);
      screen = undefined;
      if (done(reading)) return [reading, true];
      if (Date.now() >= deadline) return [reading, false];
      await sleep(wait);
    }
  }

  return {
    async inspect() {
      return holdReason(await read());
    },

    async type(message) {
      // Back to back into a line reader, the look that confirmed the last Enter will do (a line
      // reader has no dialog to open); an agent's screen is always read again.
      const before = recentLineReader() ?? (await read());
      if (inputHolds(before, message)) return { kind: 'typed' };
      // Typed and submitted already (by an Enter while it was held, or before a crash): the
      // transcript on screen shows it, so it is not typed again.
      if (compact(before.above).includes(messageHead(message))) {
        return { kind: 'submitted', how: 'found in the transcript' };
      }
      const hold = holdReason(before);
      if (hold) return { kind: 'deferred', ...hold };
      // A line reader gets the message folded into one line, pasted with its Enter, then the
      // read-back: its terminal echoes the line, and the cursor leaves it once the program has
      // read it. An agent TUI gets the paste alone; Enter follows in `submit`, once the paste
      // shows in its input.
      const lineReader = isLineReader(before.agent);
      const pasted = await port.paste(shownTo(before, message.text), lineReader);
      pastedAt.set(message.marker, Date.now());
      const [after, shown] = await until(
        timing.showTimeoutMs,
        lineReader
          ? (r) => r.blocked !== null || (echoed(r, message) && !inputHolds(r, message))
          : (r) => r.blocked !== null || inputHolds(r, message),
        pasted,
      );
      if (after.blocked !== null && !inputHolds(after, message)) {
        // A dialog opened under the paste; dialogs drop pasted text, so nothing waits to be submitted.
        return {
          kind: 'deferred',
          reason: DeferReason.blocked,
          detail: `${after.agent.name} opened a dialog ("${after.blocked}") as the message was pasted`,
        };
      }
      if (lineReader) {
        if (shown) {
          pastedAt.delete(message.marker);
          return { kind: 'submitted', how: `${after.agent.name} echoed it and read the line` };
        }
        // Echoed and still on the cursor's line: `submit` presses Enter again and looks.
        if (inputHolds(after, message)) return { kind: 'typed' };
      }
      if (!shown) {
        return {
          kind: 'deferred',
          reason: DeferReason.notShown,
          detail: `the paste did not show in ${after.agent.name}'s input within ${timing.showTimeoutMs} ms`,
        };
      }
      return { kind: 'typed' };
    },

    async submit(message) {
      const since = Date.now() - (pastedAt.get(message.marker) ?? 0);
      // A line reader has no dialog to open between two looks: the look that saw the paste
      // will do, if it is recent. An agent is looked at again right before Enter.
      let reading = recentLineReader() ?? (await read());
      const pause = Math.max(reading.agent.enterDelayMs, timing.enterPauseMs) - since;
      if (pause > 0) {
        await sleep(pause);
        reading = await read();
      }
      for (let attempt = 1; attempt <= timing.enterAttempts; attempt++) {
        if (reading.blocked !== null) {
          return {
            kind: 'deferred',
            reason: DeferReason.blocked,
            detail: `${reading.agent.name} shows a dialog ("${reading.blocked}"): Enter not pressed`,
          };
        }
        if (!inputHolds(reading, message)) {
          if (attempt === 1) {
            // Gone before any Enter of ours: someone cleared it, or it went in as typed.
            const where = await locateIn(reading, message);
            if (where === 'submitted') return { kind: 'submitted', how: 'found in the transcript' };
            return {
              kind: 'deferred',
              reason: DeferReason.notShown,
              detail: 'the typed message left the input before Enter',
            };
          }
          break;
        }
        const entered = await port.pressEnter();
        const [after, left] = await until(timing.submitTimeoutMs, (r) => !inputHolds(r, message), entered);
        reading = after;
        if (left) {
          pastedAt.delete(message.marker);
          return { kind: 'submitted', how: describeSubmitted(after, attempt) };
        }
      }
      if (!inputHolds(reading, message)) {
        pastedAt.delete(message.marker);
        return { kind: 'submitted', how: describeSubmitted(reading, timing.enterAttempts) };
      }
      return {
        kind: 'not-submitted',
        detail: `still in ${reading.agent.name}'s input after ${timing.enterAttempts} Enter presses`,
      };
    },

    async locate(message) {
      return locateIn(await read(), message);
    },
  };

  async function locateIn(reading: ScreenReading, message: PaneMessage): Promise<Whereabouts> {
    if (inputHolds(reading, message)) return 'typed';
    const history = compact(await port.history(timing.historyLines));
    if (history.includes(compact(message.marker)) || history.includes(messageHead(message)))
      return 'submitted';
    return 'absent';
  }
}

/**
 * A line reader's terminal echoes what is typed; its own output may land on the same line
 * (a program printing while the paste arrives), so the echo anywhere on screen counts.
 */
function echoed(reading: ScreenReading, message: PaneMessage): boolean {
  return compact(`${reading.above}\n${reading.input ?? ''}`).includes(messageHead(message));
}

function describeSubmitted(reading: ScreenReading, enters: number): string {
  const presses = enters === 1 ? '' : ` after ${enters} Enter presses`;
  if (reading.blocked !== null) return `${reading.agent.name} took it and asks for a permission${presses}`;
  if (reading.busy) return `${reading.agent.name} started a turn${presses}`;
  return `${reading.agent.name}'s input took it${presses}`;
}
