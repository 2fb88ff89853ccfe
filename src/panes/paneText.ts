/**
 * What a message may look like in a pane, for every injector (tmux and herdr alike): the two
 * framings of a body, neutralised by the one rule for someone else's text on any screen
 * (`src/text/neutralise.ts`), so that no line of a message can pass for a `[bridge …]` header
 * and a line-at-a-time program gets one message as one input. Pure: no pane, no I/O.
 *
 * - Agent TUIs keep the body's lines; every line after the header's starts with
 *   {@link continuationMark}, which a genuine header never does.
 * - Line readers (shells, `cat`, programs no agent entry knows) get the message folded into one
 *   line, each line break shown as {@link lineBreakMark}: one message is one Enter, so a shell
 *   reads at most one command line.
 */

import { lineBreakMark, neutralise } from '../text/neutralise.js';

/** Starts every body line after the first in an agent's pane (never a prompt glyph, never `[`). */
export const continuationMark = '┆ ';

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
