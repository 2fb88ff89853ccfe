/** Splits a byte stream (already decoded to text) into lines. */
export interface LineSplitter {
  /** Adds a chunk; returns the complete lines it finished, without their newline. */
  push(chunk: string): string[];
  /** True when a line longer than the limit was dropped since the last call; resets it. */
  takeOverflow(): boolean;
}

/**
 * A newline splitter with a cap on line length, so a peer that never sends a newline cannot
 * grow our buffer without bound. An over-long line is dropped, up to its newline.
 */
export function createLineSplitter(maxLineChars = 16 * 1024 * 1024): LineSplitter {
  let buffer = '';
  let discarding = false;
  let overflowed = false;
  return {
    push(chunk) {
      const lines: string[] = [];
      let rest = chunk;
      for (;;) {
        const newline = rest.indexOf('\n');
        if (newline === -1) break;
        const piece = rest.slice(0, newline);
        rest = rest.slice(newline + 1);
        if (discarding) {
          discarding = false;
          buffer = '';
          continue;
        }
        const line = (buffer + piece).replace(/\r$/, '');
        buffer = '';
        if (line.length > maxLineChars) {
          overflowed = true;
          continue;
        }
        if (line.trim() !== '') lines.push(line);
      }
      if (!discarding) {
        buffer += rest;
        if (buffer.length > maxLineChars) {
          buffer = '';
          discarding = true;
          overflowed = true;
        }
      }
      return lines;
    },
    takeOverflow() {
      const was = overflowed;
      overflowed = false;
      return was;
    },
  };
}
