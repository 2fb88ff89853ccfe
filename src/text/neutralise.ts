/**
 * The one rule for someone else's text on a screen: a pane typed into, a terminal the CLI or
 * the daemon's log prints to, the console's page. Characters that act on a terminal or change
 * what a reader sees are neutralised (shown as U+FFFD) where the text is for reading, and
 * escaped where it travels as JSON, so that JSON stays exact and still prints inert. Pure.
 */

/** What a neutralised character becomes: visible, and inert in every terminal. */
export const replacementChar = '\uFFFD';

/** Stands for a line break in text folded onto one line (a line reader's input, a table cell). */
export const lineBreakMark = ' ⏎ ';

/**
 * Characters that act when typed or printed, or change what a reader sees, other than line
 * breaks and tabs:
 * - C0 controls, DEL and C1 controls: ^C interrupts, ^D ends input, ESC starts every terminal
 *   sequence (OSC 0 sets the window title, OSC 52 writes the clipboard, CSI 2J clears the
 *   screen), ESC `[201~` closes a bracketed paste early, CR goes back over a line, U+009B is CSI
 *   to some terminals;
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
 * Text that is safe to type into or print on a terminal: CR and CRLF become LF, trailing line
 * breaks are dropped (in a pane, the Enter that follows is the submission; an extra one would
 * submit early or submit an empty line), and every other character {@link hasUnsafeChar} names
 * becomes U+FFFD. Line breaks and tabs stay. Idempotent.
 */
export function neutralise(text: string): string {
  const lines = text.replace(/\r\n?/g, '\n').replace(/\n+$/, '');
  return lines.replace(unsafeChars, (ch) => (ch === '\n' || ch === '\t' ? ch : replacementChar));
}

/** {@link neutralise}d text on one line: a tab becomes a space, a line break {@link lineBreakMark}. */
export function neutraliseLine(text: string): string {
  return neutralise(text).replace(/\t/g, ' ').replace(/\n/g, lineBreakMark);
}

/**
 * JSON text with every character {@link hasUnsafeChar} names that `JSON.stringify` leaves raw
 * (DEL, C1, format and separator characters) written as a `\u` escape: it parses back to the
 * same value and prints inert. Such characters can only stand inside a JSON string, where an
 * escape means the same; C0 controls are left as they are, since JSON escapes them inside
 * strings already and a raw one (a line's end) is not part of a string.
 */
export function escapeUnsafe(json: string): string {
  return json.replace(unsafeChars, (ch) => (ch < ' ' ? ch : unicodeEscapes(ch)));
}

/** `value` as JSON that parses back to it exactly and prints inert ({@link escapeUnsafe}). */
export function exactJson(value: unknown): string {
  return escapeUnsafe(JSON.stringify(value) ?? 'null');
}

/**
 * `value` as JSON whose every string, keys included, is {@link neutralise}d: for a page that
 * shows the strings it is sent, so that none can act or reorder what is shown.
 */
export function neutralisedJson(value: unknown): string {
  return JSON.stringify(value, (_key, item: unknown) => {
    if (typeof item === 'string') return neutralise(item);
    if (item === null || typeof item !== 'object' || Array.isArray(item)) return item;
    return Object.fromEntries(Object.entries(item).map(([key, member]) => [neutralise(key), member]));
  });
}

function unicodeEscapes(ch: string): string {
  let out = '';
  for (let i = 0; i < ch.length; i++) out += `\\u${ch.charCodeAt(i).toString(16).padStart(4, '0')}`;
  return out;
}
