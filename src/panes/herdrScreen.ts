/**
 * Where a message is on a pane's screen, from the text `pane.read` returns: pure functions, so
 * the rules are tested without a pane.
 *
 * The rule is deliberately small. An agent TUI draws its input area at the bottom, starting
 * with a prompt line (`>`, `❯` or `›`, perhaps inside a box border); a submitted message moves
 * up into the transcript and a fresh prompt line is drawn below it. So, for the last place
 * the message's marker shows:
 * - the message reaches the last non-empty line, or the last prompt line is one of its own
 *   lines: it is in the input area (`typed`);
 * - a prompt line follows its last line, or nothing prompt-like is on screen at all and output
 *   follows it: it left the input area (`submitted`);
 * - no marker: `absent`.
 * Read with soft wraps joined (`recent_unwrapped`) so one logical line is one line here.
 * A TUI this does not fit gets its own `promptLine` (an injector option).
 */
import { lineReader } from './agentScreens.js';
import type { PaneMessage, Whereabouts } from './paneInjector.js';
import { oneLine } from './paneText.js';
import { compact, inputHolds, readScreen, type ScreenReading, shownTo } from './readScreen.js';

/**
 * The screen as the agent table reads it (Claude Code, Codex, Gemini: `agentScreens.ts`), or
 * undefined for a program the table does not know, which the prompt-line rule below reads.
 */
export function knownAgentScreen(screen: string): ScreenReading | undefined {
  const reading = readScreen({ text: screen });
  return reading.agent === lineReader ? undefined : reading;
}

/**
 * The text as it is typed into the pane whose screen this is: as it is for an agent the table
 * knows, folded into one line for any other program (a line reader, or an agent whose input
 * the table cannot read), so one message is one input there.
 */
export function shownOnScreen(screen: string, text: string): string {
  return shownTo(readScreen({ text: screen }), text);
}

/** A line that starts an agent's input area: a prompt glyph after optional box border and spaces. */
export const DEFAULT_PROMPT_LINE = /^[\s│┃|]*[>❯›](?:\s|$)/u;

function screenLines(screen: string): string[] {
  const lines = screen.split('\n').map((line) => line.replace(/\s+$/u, ''));
  while (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  return lines;
}

function lastIndex(lines: readonly string[], test: (line: string) => boolean): number {
  for (let i = lines.length - 1; i >= 0; i--) if (test(lines[i] ?? '')) return i;
  return -1;
}

/** Where `message` is on `screen`: in the input area, above it (submitted), or nowhere. */
export function locateOnScreen(
  screen: string,
  message: PaneMessage,
  promptLine: RegExp = DEFAULT_PROMPT_LINE,
): Whereabouts {
  const known = knownAgentScreen(screen);
  if (known) {
    if (inputHolds(known, message)) return 'typed';
    return compact(screen).includes(compact(message.marker)) ? 'submitted' : 'absent';
  }
  const lines = screenLines(screen);
  const markerAt = lastIndex(lines, (line) => line.includes(message.marker));
  if (markerAt < 0) return 'absent';
  // Typed as one line: `shownOnScreen` folds it for every program the table does not know.
  const textLines = oneLine(message.text).split('\n');
  const markerInText = Math.max(
    0,
    textLines.findIndex((line) => line.includes(message.marker)),
  );
  const start = markerAt - markerInText;
  const end = markerAt + (textLines.length - 1 - markerInText);
  if (end >= lines.length - 1) return 'typed';
  const promptAt = lastIndex(lines, (line) => promptLine.test(line));
  if (promptAt > end) return 'submitted';
  if (promptAt >= start) return 'typed';
  return 'submitted';
}

/**
 * What the input area holds: the text after the glyph of the last prompt line ('' when it is
 * empty), or undefined when no prompt line is on screen and so it cannot be told.
 */
export function pendingInput(screen: string, promptLine: RegExp = DEFAULT_PROMPT_LINE): string | undefined {
  const known = knownAgentScreen(screen);
  if (known) return known.pasted ? '[a collapsed paste]' : (known.input ?? undefined);
  const lines = screenLines(screen);
  const promptAt = lastIndex(lines, (line) => promptLine.test(line));
  if (promptAt < 0) return undefined;
  const line = lines[promptAt] ?? '';
  const glyph = promptLine.exec(line);
  return line.slice(glyph === null ? 0 : glyph[0].length).trim();
}
