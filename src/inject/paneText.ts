/**
 * What a message may look like in a pane, for every injector (tmux and herdr alike): the one
 * neutralisation of characters that would act or deceive, and the two framings of a body, so
 * that no line of a message can pass for a `[bridge …]` header and a line-at-a-time program
 * gets one message as one input. Pure: no pane, no I/O.
 *
 * - Agent TUIs keep the body's lines; every line after the header's starts with
 *   {@link continuationMark}, which a genuine header never does.
 * - Line readers (shells, `cat`, programs no agent entry knows) get the message folded into one
 *   line, each line break shown as {@link lineBreakMark}: one message is one Enter, so a shell
 *   reads at most one command line.
 */

/** Starts every body line after the first in an agent's pane (never a prompt glyph, never `[`). */
export const continuationMark = '┆ ';

/** Stands for a line break in a message folded for a line reader. */
export const lineBreakMark = ' ⏎ ';

/** What a neutralised character becomes: visible, and inert in every terminal. */
export const replacementChar = '\uFFFD';

/**
 * Characters that act when typed or change what a reader sees, other than line breaks and tabs:
 * - C0 controls, DEL and C1 controls: ^C interrupts, ^D ends input, ESC `[201~` closes a
 *   bracketed paste early, U+009B is CSI to some terminals;
 * - format characters (`\p{Cf}`): bidi overrides, embeddings and isolates (U+202A–U+202E,
 *   U+2066–U+2069, U+200E/U+200F, U+061C) reorder what is shown; zero-width characters
 *   (U+200B–U+200D, U+2060, U+FEFF), soft hyphens and tag characters (U+E0000–U+E007F) hide
 *   text, or split `[bridge` so it no longer reads as what it looks like;
 * - line and paragraph separators (U+2028, U+2029), which some programs take as line breaks.
 */
const unsafeChar = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;
const unsafeChars = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu;

/** True when `text` holds a control (line breaks and tabs included), format or separator character. */
export function hasUnsafeChar(text: string): boolean {
  return unsafeChar.test(text);
}

/**
 * Text that is safe to type into a terminal: CR and CRLF become LF, trailing line breaks are
 * dropped (the Enter that follows is the submission; an extra one would submit early or submit
 * an empty line), and every other character {@link hasUnsafeChar} names becomes U+FFFD. Line
 * breaks and tabs stay. Idempotent.
 */
export function neutralise(text: string): string {
  const lines = text.replace(/\r\n?/g, '\n').replace(/\n+$/, '');
  return lines.replace(unsafeChars, (ch) => (ch === '\n' || ch === '\t' ? ch : replacementChar));
}

/**
 * `[bridge` in a body, however spaced or cased: the opening of a header. Its bracket becomes a
 * parenthesis, so the text still reads as what it says but never as a header, wherever a wrap
 * at the pane's width puts it.
 */
const headerLike = /\[(\s*bridge)/giu;

/**
 * The body of a message as it follows its header in a pane: neutralised, header-like text
 * defused, and every line after the first marked with {@link continuationMark}.
 */
export function frameBody(body: string): string {
  return neutralise(body).replace(headerLike, '($1').split('\n').join(`\n${continuationMark}`);
}

/**
 * A message folded into one line for a line reader: each line break (with the continuation
 * mark after it) becomes {@link lineBreakMark}. Idempotent.
 */
export function oneLine(text: string): string {
  return text.split('\n').reduce((line, next) => {
    const rest = next.startsWith(continuationMark) ? next.slice(continuationMark.length) : next;
    return `${line}${lineBreakMark}${rest}`;
  });
}
