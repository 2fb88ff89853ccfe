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

import { type Clock, sleep, systemClock } from '../kernel/clock.js';
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
  dialogFor,
  inputEmpty,
  inputHolds,
  placeholderFits,
  queuedShows,
  readScreen,
  type Screen,
  type ScreenReading,
  shownTo,
  shows,
} from './readScreen.js';

/** What the procedure needs from a pane. */
export interface PanePort {
  /** The visible screen and the cursor. */
  capture(): Promise<Screen>;
  /** The last `lines` lines of output, scrollback included. */
  history(lines: number): Promise<string>;
  /** The last `lines` lines of scrollback above the visible screen (soft wraps joined). */
  scrollback(lines: number): Promise<string>;
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
  /**
   * How long an agent whose cleared input is no proof (`taken: shown`, Gemini CLI) may take to
   * show the message in its transcript or queue once its input cleared.
   */
  readonly proofTimeoutMs: number;
  /** How often the pane is read while waiting. */
  readonly pollMs: number;
  /** Enters pressed, at most, before the message counts as not submitted. */
  readonly enterAttempts: number;
  /** Lines of scrollback `locate` searches for the marker. */
  readonly historyLines: number;
  /** The least pause between an agent's paste and its Enter (the agent table's own applies when longer). */
  readonly enterPauseMs: number;
  /**
   * How long after a new program started in a pane it may still be read as a line reader (a
   * TUI that has just started has not drawn its prompt yet).
   */
  readonly programSettleMs: number;
}

export const defaultSubmissionTiming: SubmissionTiming = {
  showTimeoutMs: 2_000,
  submitTimeoutMs: 1_500,
  proofTimeoutMs: 5_000,
  pollMs: 25,
  enterAttempts: 3,
  historyLines: 500,
  enterPauseMs: 0,
  programSettleMs: 1_500,
};

export interface VerifiedSubmission {
  inspect(): Promise<PaneHold | undefined>;
  type(message: PaneMessage): Promise<TypeOutcome>;
  submit(message: PaneMessage): Promise<SubmitOutcome>;
  locate(message: PaneMessage): Promise<Whereabouts>;
}

/** Why a pane that is not ready is held, from its reading; undefined when it can take a message. */
export function holdReason(reading: ScreenReading): PaneHold | undefined {
  const name = reading.agent.name;
  const dialog = dialogFor(reading);
  if (dialog !== null) {
    return {
      reason: DeferReason.blocked,
      detail: `${name} shows a dialog ("${dialog}"): held until it is answered`,
    };
  }
  if (isLineReader(reading.agent)) {
    if (inputEmpty(reading)) return undefined;
    return {
      reason: DeferReason.dirtyInput,
      detail: `the ${name}'s line already holds text someone typed: held until it is sent or cleared`,
    };
  }
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
  clock: Clock = systemClock,
): VerifiedSubmission {
  /** When each message was last pasted, so Enter never follows too closely. */
  const pastedAt = new Map<string, number>();
  /**
   * The collapsed paste each message showed as when it was pasted into the empty input
   * (`[Pasted text #3 +12 lines]`): the only proof that such a placeholder is ours.
   */
  const shownAs = new Map<string, string>();

  /**
   * A line reader's reading that confirmed our own paste or Enter, and when: the next step
   * may start from it (a line reader has no dialog to open between two looks).
   */
  let confirmed: { reading: ScreenReading; at: number } | undefined;
  /** The pane's program as last seen, and since when (long ago for the first one seen). */
  let program: { id: string | undefined; since: number } | undefined;

  async function read(screen?: Screen): Promise<ScreenReading> {
    const seen = screen ?? (await port.capture());
    const reading = readScreen(seen);
    const now = clock.now();
    // Its start time where the pane tells it; else the moment a change was seen (the first
    // program seen counts as long settled).
    if (program === undefined || seen.program !== program.id) {
      const since = program === undefined ? Number.NEGATIVE_INFINITY : now;
      program = { id: seen.program, since: seen.programStartedAt ?? since };
    }
    confirmed = undefined;
    return reading;
  }

  /**
   * A pane whose program has just changed (a new program started in it, even the same one) is
   * not read as a line reader until `programSettleMs` have passed: a TUI that has just started
   * shows a blank or half-drawn screen before its prompt, and typing into it then loses the
   * text in its start-up. The program's first prompt ends the wait at once.
   */
  function starting(reading: ScreenReading): PaneHold | undefined {
    if (!isLineReader(reading.agent) || program === undefined) return undefined;
    if (clock.now() - program.since >= timing.programSettleMs) return undefined;
    const screen = reading.blank ? 'shows a blank screen' : 'has not drawn a prompt the agent table knows';
    return {
      reason: DeferReason.busy,
      detail: `a new program started in the pane and ${screen}: held until it settles`,
    };
  }

  /** The line reader's reading that confirmed our last step, if it was taken a moment ago; used once. */
  function recentLineReader(): ScreenReading | undefined {
    const recent = confirmed;
    confirmed = undefined;
    if (!recent || !isLineReader(recent.reading.agent) || clock.now() - recent.at > 250) return undefined;
    return recent.reading;
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
    const deadline = clock.now() + ms;
    let screen = first;
    // Most screens change within milliseconds: look again soon, then every pollMs.
    for (let wait = Math.min(4, timing.pollMs); ; wait = Math.min(wait * 2, timing.pollMs)) {
      const reading = await read(screen);
      screen = undefined;
      if (done(reading)) return [reading, true];
      if (clock.now() >= deadline) return [reading, false];
      await sleep(clock, wait);
    }
  }

  const holds = (reading: ScreenReading, message: PaneMessage): boolean =>
    inputHolds(reading, message, shownAs.get(message.marker));

  /** Done with a message: nothing of it is remembered. */
  function settled(message: PaneMessage): void {
    pastedAt.delete(message.marker);
    shownAs.delete(message.marker);
  }

  return {
    async inspect() {
      const reading = await read();
      return starting(reading) ?? holdReason(reading);
    },

    async type(message) {
      // Back to back into a line reader, the look that confirmed the last Enter will do (a line
      // reader has no dialog to open); an agent's screen is always read again.
      const before = recentLineReader() ?? (await read());
      if (holds(before, message)) return { kind: 'typed' };
      // Typed and submitted already (by an Enter while it was held, or before a crash): the
      // transcript on screen shows it, so it is not typed again. One pasted before and not
      // seen to show may have gone in and scrolled away since: the scrollback is searched too.
      if (await submittedBefore(before, message, pastedAt.has(message.marker))) {
        settled(message);
        return { kind: 'submitted', how: 'found in the transcript' };
      }
      const hold = starting(before) ?? holdReason(before);
      if (hold) return { kind: 'deferred', ...hold };
      // A line reader gets the message folded into one line, pasted with its Enter, then the
      // read-back: its terminal echoes the line, and the cursor leaves it once the program has
      // read it. An agent TUI gets the paste alone; Enter follows in `submit`, once the paste
      // shows in its input: as the text itself, or as one collapsed paste that counts what it
      // does (the input was empty before, so that placeholder is this paste's).
      const lineReader = isLineReader(before.agent);
      const text = shownTo(before, message.text);
      const pasted = await port.paste(text, lineReader);
      pastedAt.set(message.marker, clock.now());
      const [after, shown] = await until(
        timing.showTimeoutMs,
        lineReader
          ? (r) => dialogFor(r, message) !== null || consumed(r, message)
          : (r) => r.blocked !== null || holds(r, message) || placeholderFits(r, text),
        pasted,
      );
      if (!lineReader && shown && !holds(after, message) && after.placeholder) {
        shownAs.set(message.marker, after.input ?? '');
      }
      if (dialogFor(after, message, shownAs.get(message.marker)) !== null && !holds(after, message)) {
        // A dialog opened under the paste; dialogs drop pasted text, so nothing waits to be submitted.
        settled(message);
        return {
          kind: 'deferred',
          reason: DeferReason.blocked,
          detail: `${after.agent.name} opened a dialog ("${dialogFor(after)}") as the message was pasted`,
        };
      }
      if (lineReader) {
        // A line longer than the screen: its echo has scrolled up out of sight.
        if (shown || (!holds(after, message) && (await submittedBefore(after, message, true)))) {
          settled(message);
          confirmed = { reading: after, at: clock.now() };
          return { kind: 'submitted', how: `${after.agent.name} echoed it and read the line` };
        }
        // Echoed and still on the cursor's line: `submit` presses Enter again and looks.
        if (holds(after, message)) {
          confirmed = { reading: after, at: clock.now() };
          return { kind: 'typed' };
        }
      }
      if (!shown) {
        // Its paste time is kept: typed again, the scrollback is searched first.
        shownAs.delete(message.marker);
        return {
          kind: 'deferred',
          reason: DeferReason.notShown,
          detail: `the paste did not show in ${after.agent.name}'s input within ${timing.showTimeoutMs} ms`,
        };
      }
      return { kind: 'typed' };
    },

    async submit(message) {
      const since = clock.now() - (pastedAt.get(message.marker) ?? 0);
      // A line reader has no dialog to open between two looks: the look that saw the paste
      // will do, if it is recent. An agent is looked at again right before Enter.
      let reading = recentLineReader() ?? (await read());
      const pause = Math.max(reading.agent.enterDelayMs, timing.enterPauseMs) - since;
      if (pause > 0) {
        await sleep(clock, pause);
        reading = await read();
      }
      for (let attempt = 1; attempt <= timing.enterAttempts; attempt++) {
        const dialog = dialogFor(reading, message, shownAs.get(message.marker));
        if (dialog !== null) {
          return {
            kind: 'deferred',
            reason: DeferReason.blocked,
            detail: `${reading.agent.name} shows a dialog ("${dialog}"): Enter not pressed`,
          };
        }
        if (!holds(reading, message)) {
          if (attempt === 1) {
            // Not (or no longer only) ours before any Enter of ours: it went in as typed, or
            // someone cleared it or typed beside it. Enter is pressed on nothing but our text.
            const where = await locateIn(reading, message);
            settled(message);
            if (where === 'submitted') return { kind: 'submitted', how: 'found in the transcript' };
            return {
              kind: 'deferred',
              reason: DeferReason.notShown,
              detail: 'the input no longer holds the typed message alone: Enter not pressed',
            };
          }
          break;
        }
        const entered = await port.pressEnter();
        const [after, left] = await until(timing.submitTimeoutMs, (r) => !holds(r, message), entered);
        reading = after;
        if (left) return cleared(after, message, attempt);
      }
      if (!holds(reading, message)) return cleared(reading, message, timing.enterAttempts);
      return {
        kind: 'not-submitted',
        detail: `still in ${reading.agent.name}'s input after ${timing.enterAttempts} Enter presses`,
      };
    },

    async locate(message) {
      return locateIn(await read(), message);
    },
  };

  /**
   * The outcome once Enter has taken the message out of the input: submitted, where a cleared
   * input proves it. Where it does not (`taken: shown`), the message must show in the
   * transcript or the agent's queue in time; else the agent dropped it, and it is typed again
   * (the retry looks for it on the screen and in the scrollback first, so a late one is found).
   */
  async function cleared(
    reading: ScreenReading,
    message: PaneMessage,
    enters: number,
  ): Promise<SubmitOutcome> {
    const how = describeSubmitted(reading, enters);
    if (reading.agent.taken.kind === 'input-cleared') {
      settled(message);
      return { kind: 'submitted', how };
    }
    const where = await shownAfter(reading, message);
    if (where !== undefined) {
      settled(message);
      return {
        kind: 'submitted',
        how: `${how}; ${where === 'queued' ? 'it queued it' : 'its transcript shows it'}`,
      };
    }
    shownAs.delete(message.marker);
    return {
      kind: 'deferred',
      reason: DeferReason.notShown,
      detail: `${reading.agent.name}'s input cleared, but neither its transcript nor its queue showed the message within ${timing.proofTimeoutMs} ms: dropped, typed again`,
    };
  }

  /** Where the agent shows the message it took, looked for until `proofTimeoutMs` pass. */
  async function shownAfter(first: ScreenReading, message: PaneMessage): Promise<Shown | undefined> {
    const deadline = clock.now() + timing.proofTimeoutMs;
    for (let reading = first; ; reading = await read()) {
      // A screen without an input area reads whole as the transcript, our input too: it proves
      // nothing. The scrollback is searched each time: a message longer than the screen scrolls
      // its own header out of sight at once.
      const where = reading.input === null ? undefined : await shownWhere(reading, message, true);
      if (where !== undefined) return where;
      if (clock.now() >= deadline) return undefined;
      await sleep(clock, Math.max(timing.pollMs, 50));
    }
  }

  /**
   * Where a message is after a crash or an interruption: in the input (provably, as above), in
   * the transcript above the input area, the agent's queue or the scrollback above the screen,
   * or absent. The input area itself is never searched: text there is not submitted.
   */
  async function locateIn(reading: ScreenReading, message: PaneMessage): Promise<Whereabouts> {
    if (holds(reading, message)) return 'typed';
    return (await submittedBefore(reading, message, true)) ? 'submitted' : 'absent';
  }

  /** Whether the message shows as taken (see `shownWhere`). */
  async function submittedBefore(reading: ScreenReading, message: PaneMessage, scrollback: boolean) {
    return (await shownWhere(reading, message, scrollback)) !== undefined;
  }

  /**
   * Where the message shows as taken: in the agent's queue (drawn above the input, so looked at
   * first), the transcript above the input area, or (`scrollback`) the lines above the screen.
   */
  async function shownWhere(
    reading: ScreenReading,
    message: PaneMessage,
    scrollback: boolean,
  ): Promise<Shown | undefined> {
    if (queuedShows(reading, message)) return 'queued';
    if (shows(reading.above, message)) return 'transcript';
    if (scrollback && shows(await port.scrollback(timing.historyLines), message)) return 'transcript';
    return undefined;
  }
}

/**
 * A line reader took the line: the whole of it was echoed above the cursor's line and the
 * cursor's line no longer ends with it (a new prompt, or nothing, after it). A prompt alone,
 * even one a body ends with, never counts: the echo of the whole line must stand above it.
 */
function consumed(reading: ScreenReading, message: PaneMessage): boolean {
  const line = compact(shownTo(reading, message.text));
  return compact(reading.above).includes(line) && !inputHolds(reading, message);
}

/** Where a taken message shows: the agent's queue, or its transcript (on screen or scrolled above it). */
type Shown = 'queued' | 'transcript';

function describeSubmitted(reading: ScreenReading, enters: number): string {
  const presses = enters === 1 ? '' : ` after ${enters} Enter presses`;
  if (reading.blocked !== null) return `${reading.agent.name} took it and asks for a permission${presses}`;
  if (reading.busy) return `${reading.agent.name} started a turn${presses}`;
  return `${reading.agent.name}'s input took it${presses}`;
}
