/**
 * Reads a pane's screen (R-DL6): which agent runs there, whether a dialog holds it, whether it
 * is busy, and what its input area holds. Pure: it gets the captured text and the cursor, so
 * the same reading serves tmux captures, herdr's `pane.read` and the fixtures in the tests.
 */
import {
  type AgentScreen,
  agentScreens,
  commonDialogs,
  type InputArea,
  isLineReader,
  lineReader,
  type PastePlaceholder,
} from './agentScreens.js';
import type { PaneMessage } from './paneInjector.js';
import { oneLine } from './paneText.js';

/** A pane's visible screen as captured, and where the cursor is (row 0 = the screen's top line). */
export interface Screen {
  readonly text: string;
  readonly cursor?: { readonly x: number; readonly y: number } | undefined;
  /**
   * Which program runs in the pane, where the multiplexer can tell (tmux: the pane's process
   * and its terminal's foreground process group): a change means a new program started.
   */
  readonly program?: string | undefined;
  /** When that program started (epoch ms), where the multiplexer can tell. */
  readonly programStartedAt?: number | undefined;
}

export interface ScreenReading {
  readonly agent: AgentScreen;
  /**
   * The dialog text that holds the pane, or null: looked for below the input area (where a
   * dialog replaces or follows it), or anywhere when the screen shows no input area; never in
   * the transcript above, where a message's words stand once submitted.
   */
  readonly blocked: string | null;
  /**
   * A dialog's text inside what reads as the input area (Codex draws its dialog's choices with
   * its prompt glyph), or null. It holds the pane unless the input is a message of ours, whose
   * words it then are: see {@link dialogFor}.
   */
  readonly inputDialog: string | null;
  readonly busy: boolean;
  /**
   * The input area's text with its prompt, placeholders and line breaks removed ('' = empty);
   * null when the screen shows no input area (a dialog replaced it, or the agent is not up).
   * For a line reader: the cursor's line up to the cursor.
   */
  readonly input: string | null;
  /** Whether the input area shows a collapsed paste (`[Pasted text #1 +80 lines]`). */
  readonly pasted: boolean;
  /** The input area holds one collapsed paste and nothing else: its placeholder and what it counts. */
  readonly placeholder: { readonly count: number; readonly counts: PastePlaceholder['counts'] } | undefined;
  /** A line reader's screen up to the cursor, compacted: what its typed line ends; '' for an agent. */
  readonly typed: string;
  /** The screen above the input area (all of it when there is none). */
  readonly above: string;
  /**
   * The messages the agent lists as queued (typed while it was busy), each compacted and
   * without the `…` that cuts it at the pane's width; empty when it lists none.
   */
  readonly queued: readonly string[];
  /** Nothing is drawn: a program that has just started, or one that never draws (a fresh `cat`). */
  readonly blank: boolean;
}

/** Reads `screen` with the first agent entry that recognises it, else as a line reader. */
export function readScreen(screen: Screen, agents: readonly AgentScreen[] = agentScreens): ScreenReading {
  const agent =
    agents.find((entry) => entry.recognise.some((pattern) => pattern.test(screen.text))) ?? lineReader;
  return readAs(agent, screen);
}

/** Reads `screen` as `agent`'s. */
export function readAs(agent: AgentScreen, screen: Screen): ScreenReading {
  const lines = screen.text.replace(/\s+$/, '').split('\n');
  const area = agent.input
    .map((input) => findInput(input, lines, screen.cursor))
    .find((found) => found !== undefined);
  const below = area ? lines.slice(area.end) : [];
  const raw = area ? area.lines.join('\n') : null;
  const above = (area ? lines.slice(0, area.start) : lines).join('\n');
  const dialogs = [...agent.blocked, ...commonDialogs];
  const dialogIn = (text: string): string | null =>
    dialogs.map((pattern) => pattern.exec(text)).find((match) => match !== null)?.[0] ?? null;
  // Busy lines sit just above or below the input area (a spinner, a footer), each a line of
  // the agent's own drawing; without an input area, anywhere.
  const near = area ? lines.slice(Math.max(0, area.start - 10), area.start) : lines;
  const busy =
    agent.busy.above.some((pattern) => near.some((line) => pattern.test(line))) ||
    agent.busy.below.some((pattern) => (area ? below : lines).some((line) => pattern.test(line)));
  let input: string | null = null;
  let pasted = false;
  let placeholder: ScreenReading['placeholder'];
  if (raw !== null) {
    // An empty input's hint is the whole input, never one wrapped line of a longer one.
    const whole = raw
      .split('\n')
      .map((line) => line.trim())
      .join(' ')
      .trim();
    input = agent.emptyInput.some((pattern) => pattern.test(whole)) ? '' : compact(whole);
    for (const { pattern, counts } of agent.pastePlaceholders) {
      const match = pattern.exec(raw);
      if (!match) continue;
      pasted = true;
      if (compact(match[0]) === input) placeholder = { count: Number(match[1] ?? 0), counts };
    }
  }
  const typed =
    area && isLineReader(agent) && screen.cursor
      ? compact([...lines.slice(0, area.start), ...area.lines].join(''))
      : '';
  return {
    agent,
    queued: queuedIn(agent, area ? lines.slice(0, area.start) : lines),
    blocked: dialogIn(area ? below.join('\n') : screen.text),
    inputDialog: raw === null ? null : dialogIn(raw),
    busy,
    input,
    pasted,
    placeholder,
    typed,
    above,
    blank: screen.text.trim() === '',
  };
}

/** The agent's queue, from the last heading above the input: the indented lines under it. */
function queuedIn(agent: AgentScreen, lines: readonly string[]): string[] {
  if (agent.taken.kind !== 'shown') return [];
  const { queueHeading } = agent.taken;
  let heading = lines.length - 1;
  while (heading >= 0 && !queueHeading.test(lines[heading] as string)) heading--;
  if (heading < 0) return [];
  const queued: string[] = [];
  for (const line of lines.slice(heading + 1)) {
    if (!/^ {4}\S/.test(line)) break;
    queued.push(compact(line).replace(/…$/, ''));
  }
  return queued;
}

interface Area {
  /** First and one-past-last screen line of the area. */
  readonly start: number;
  readonly end: number;
  /** The area's lines with the prompt (and box sides) removed. */
  readonly lines: string[];
}

function findInput(input: InputArea, lines: readonly string[], cursor: Screen['cursor']): Area | undefined {
  switch (input.kind) {
    case 'ruled': {
      // The last top line with a bottom line after it, the prompt on the line below the top.
      for (let top = lines.length - 1; top >= 0; top--) {
        if (!input.top.test(lines[top] as string)) continue;
        const first = lines[top + 1];
        if (first === undefined || !input.prompt.test(first.trimStart())) continue;
        let bottom = top + 1;
        while (bottom < lines.length && !input.bottom.test(lines[bottom] as string)) bottom++;
        if (bottom >= lines.length) continue;
        return {
          start: top + 1,
          end: bottom,
          lines: stripPrompt(lines.slice(top + 1, bottom), input.prompt),
        };
      }
      return undefined;
    }
    case 'prompt-line': {
      for (let i = lines.length - 1; i >= 0; i--) {
        // The prompt starts its row (after at most one blank, Gemini's ` > `): a row indented
        // further is a wrapped row of the input, whatever it reads (a body may hold `› `).
        if (!input.prompt.test((lines[i] as string).replace(/^ /, ''))) continue;
        let end = i + 1;
        while (
          end < lines.length &&
          /^ {2,}\S/.test(lines[end] as string) &&
          !input.end.some((pattern) => pattern.test(lines[end] as string))
        ) {
          end++;
        }
        return { start: i, end, lines: stripPrompt(lines.slice(i, end), input.prompt) };
      }
      return undefined;
    }
    case 'cursor-line': {
      if (!cursor) return undefined;
      const line = lines[cursor.y] ?? '';
      return { start: cursor.y, end: cursor.y + 1, lines: [line.slice(0, cursor.x)] };
    }
  }
}

function stripPrompt(body: readonly string[], prompt: RegExp): string[] {
  const [first = '', ...rest] = body;
  return [first.trimStart().replace(prompt, ''), ...rest];
}

/** Text without whitespace: what survives the wrapping and indenting an input area does. */
export function compact(text: string): string {
  return text.replace(/\s+/g, '');
}

/**
 * What identifies a message on screen: its header up to the closing bracket, compacted
 * (`[bridgeSENDfromlead@alphamsg<uuid>]`): the full msg id, after the sender, which no body can
 * forge (`frameBody` defuses `[bridge` in bodies). The same in both framings: the one line a
 * line reader gets starts with it. A text whose header does not carry its marker (a nudge,
 * `[bridge NUDGE] 2 messages waiting…`) is identified by its whole first line.
 */
export function messageKey(message: PaneMessage): string {
  const firstLine = message.text.split('\n', 1)[0] ?? '';
  const header = firstLine.startsWith('[bridge ') ? firstLine.slice(0, firstLine.indexOf(']') + 1) : '';
  return compact(header.includes(message.marker) ? header : firstLine);
}

/** Whether `text` (a transcript, a pane's history) shows this message. */
export function shows(text: string, message: PaneMessage): boolean {
  const key = messageKey(message);
  return key !== '' && compact(text).includes(key);
}

/**
 * Whether the agent lists this message as queued: a line of its queue is the message's
 * beginning, up to its marker at least (or its whole first line, for a text whose header does
 * not carry its marker), as the line's cut at the pane's width leaves it.
 */
export function queuedShows(reading: ScreenReading, message: PaneMessage): boolean {
  const key = messageKey(message);
  const proof = key.includes(message.marker) ? compact(message.marker) : key;
  const own = compact(shownTo(reading, message.text));
  return proof !== '' && reading.queued.some((line) => own.startsWith(line) && line.includes(proof));
}

/**
 * Whether the input area holds this message and nothing else (R-DL6): the decision behind
 * every Enter, made only from what proves the text is ours, never from a prefix or from "some
 * paste is there". An agent's input holds it when it reads exactly as the message (compacted,
 * since the input wraps and indents), or when it is exactly the collapsed paste that showed
 * when this message was pasted into the empty input (`shownAs`, remembered by the procedure
 * that pasted it). A line reader's holds it while the cursor's line is not empty and the screen
 * up to the cursor ends with the whole one line it was typed as (an Enter moves the cursor to
 * a new line, empty or a prompt).
 */
export function inputHolds(reading: ScreenReading, message: PaneMessage, shownAs?: string): boolean {
  if (reading.input === null) return false;
  const own = compact(shownTo(reading, message.text));
  if (own === '') return false;
  if (isLineReader(reading.agent)) return reading.input !== '' && reading.typed.endsWith(own);
  if (reading.input === own) return true;
  return shownAs !== undefined && reading.pasted && reading.input === shownAs;
}

/**
 * Whether the input area holds one collapsed paste, and nothing else, that counts what `text`
 * would: how a paste of `text` into the empty input shows when the agent collapses it.
 */
export function placeholderFits(reading: ScreenReading, text: string): boolean {
  const shown = reading.placeholder;
  if (!shown) return false;
  const newlines = text.split('\n').length - 1;
  switch (shown.counts) {
    case 'newlines':
      return shown.count === newlines;
    case 'lines':
      return shown.count === newlines + 1;
    case 'chars':
      return shown.count === [...text].length;
  }
}

/**
 * The dialog that holds the pane as it is read with `message` typed into it (or none typed):
 * one drawn below the input area, or one in the input area unless that is the message's own
 * text (a body that quotes "Do you want to proceed?" is not a dialog).
 */
export function dialogFor(reading: ScreenReading, message?: PaneMessage, shownAs?: string): string | null {
  if (reading.blocked !== null) return reading.blocked;
  if (message && inputHolds(reading, message, shownAs)) return null;
  return reading.inputDialog;
}

/**
 * The text as typed into the pane `reading` shows: folded into one line for a line reader
 * (one message, one Enter, one command line at most), as it is for an agent's input area.
 */
export function shownTo(reading: ScreenReading, text: string): string {
  return isLineReader(reading.agent) ? oneLine(text) : text;
}

/**
 * Whether the input area is empty: nothing anybody typed is waiting there. A line reader
 * cannot tell its prompt from typed text; its cursor's line counts as empty when it is blank or
 * ends as prompts do (`$`, `#`, `>`, `%`, `:`, `?`, `❯`, `›`, `»`), so a person's half-typed
 * command holds it.
 */
export function inputEmpty(reading: ScreenReading): boolean {
  if (isLineReader(reading.agent)) return reading.input === null || /(?:^|[$#>%:?❯›»])$/u.test(reading.input);
  return reading.input === '' && !reading.pasted;
}
