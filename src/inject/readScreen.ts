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
} from './agentScreens.js';
import type { PaneMessage } from './paneInjector.js';
import { oneLine } from './paneText.js';

/** A pane's visible screen as captured, and where the cursor is (row 0 = the screen's top line). */
export interface Screen {
  readonly text: string;
  readonly cursor?: { readonly x: number; readonly y: number } | undefined;
}

export interface ScreenReading {
  readonly agent: AgentScreen;
  /** The dialog text that holds the pane, or null. */
  readonly blocked: string | null;
  readonly busy: boolean;
  /**
   * The input area's text with its prompt, placeholders and line breaks removed ('' = empty);
   * null when the screen shows no input area (a dialog replaced it, or the agent is not up).
   */
  readonly input: string | null;
  /** Whether the input area shows a collapsed paste (`[Pasted text #1 +80 lines]`). */
  readonly pasted: boolean;
  /** The screen above the input area (all of it when there is none). */
  readonly above: string;
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
  const below = area ? lines.slice(area.end).join('\n') : '';
  const raw = area ? area.lines.join('\n') : null;
  const above = (area ? lines.slice(0, area.start) : lines).join('\n');
  // A dialog counts where it is live: below the transcript. With an input area on screen, only
  // what is in or below it (an agent that quotes "Do you want to proceed?" in its answer is not
  // asking); without one, anywhere on the visible screen.
  const dialogScope = area ? `${raw}\n${below}` : screen.text;
  const dialogs = [...agent.blocked, ...commonDialogs];
  const dialog = dialogs.map((pattern) => pattern.exec(dialogScope)).find((match) => match !== null);
  // Busy lines sit just above or below the input area (a spinner, a footer), not far up in
  // the transcript.
  const busyScope = area
    ? `${below}\n${lines.slice(Math.max(0, area.start - 10), area.start).join('\n')}`
    : screen.text;
  let input: string | null = null;
  let pasted = false;
  if (raw !== null) {
    let text = raw;
    for (const placeholder of agent.pastePlaceholders) {
      if (placeholder.test(text)) pasted = true;
    }
    const kept = text
      .split('\n')
      .map((line) => line.trim())
      .filter((line) => !agent.emptyInput.some((pattern) => pattern.test(line)));
    text = kept.join('');
    input = compact(text);
  }
  return {
    agent,
    blocked: dialog ? dialog[0] : null,
    busy: agent.busy.some((pattern) => pattern.test(busyScope)),
    input,
    pasted,
    above,
  };
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
        if (!input.prompt.test((lines[i] as string).trimStart())) continue;
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
 * The part of a message that identifies it on screen: its first line (the `[bridge …]` header),
 * compacted. The same in both framings: the one line a line reader gets starts with it.
 */
export function messageHead(message: PaneMessage): string {
  const firstLine = message.text.split('\n', 1)[0] ?? '';
  return compact(firstLine).slice(0, 80);
}

/** Whether the input area holds this message (or a collapsed paste, which can only be ours). */
export function inputHolds(reading: ScreenReading, message: PaneMessage): boolean {
  if (reading.input === null) return false;
  if (isLineReader(reading.agent)) return cursorHolds(reading.input, message);
  if (reading.pasted) return true;
  const head = messageHead(message);
  return head !== '' && (reading.input.includes(head) || reading.input.includes(head.slice(0, 40)));
}

/**
 * A line reader holds the message while the cursor's line ends with the end of the one line it
 * was typed as (`shownTo`; it wraps at the pane's width, and a prompt may stand before a short one).
 */
function cursorHolds(cursorLine: string, message: PaneMessage): boolean {
  const line = compact(oneLine(message.text));
  if (cursorLine === '' || line === '') return false;
  return line.endsWith(cursorLine) || cursorLine.endsWith(line);
}

/**
 * The text as typed into the pane `reading` shows: folded into one line for a line reader
 * (one message, one Enter, one command line at most), as it is for an agent's input area.
 */
export function shownTo(reading: ScreenReading, text: string): string {
  return isLineReader(reading.agent) ? oneLine(text) : text;
}

/** Whether the input area is empty: nothing anybody typed is waiting there. */
export function inputEmpty(reading: ScreenReading): boolean {
  return reading.input === '' && !reading.pasted;
}
