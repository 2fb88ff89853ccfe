import { Writable } from 'node:stream';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log/logger.js';
import {
  escapeUnsafe,
  exactJson,
  hasUnsafeChar,
  lineBreakMark,
  neutralise,
  neutralisedJson,
  neutraliseLine,
} from '../../src/text/neutralise.js';

// The one rule for someone else's text on a screen (a pane, a terminal, the console's page),
// and its three forms: neutralised for reading, escaped in JSON, and in the daemon's log lines.

/** What a hostile sender puts in a line: window title, clipboard write, overwrite, C1 CSI, bidi. */
const hostile = '\u001b]0;title\u0007\u001b]52;c;eA==\u0007\r\u001b[2K\u009b31m\u202eevil\u202c\u2028';

describe('bidi, zero-width and separator characters are neutralised like control characters', () => {
  it.each([
    ['right-to-left override', '\u202E'],
    ['left-to-right override', '\u202D'],
    ['right-to-left isolate', '\u2067'],
    ['pop directional isolate', '\u2069'],
    ['right-to-left mark', '\u200F'],
    ['arabic letter mark', '\u061C'],
    ['zero-width space', '\u200B'],
    ['zero-width joiner', '\u200D'],
    ['word joiner', '\u2060'],
    ['byte order mark', '\uFEFF'],
    ['soft hyphen', '\u00AD'],
    ['tag letter', '\u{E0041}'],
    ['line separator', '\u2028'],
    ['paragraph separator', '\u2029'],
    ['escape', '\u001B'],
    ['interrupt', '\u0003'],
    ['delete', '\u007F'],
    ['C1 CSI', '\u009B'],
    ['next line (C1)', '\u0085'],
  ])('%s becomes U+FFFD', (_name, ch) => {
    expect(neutralise(`a${ch}b`)).toBe('a\uFFFDb');
    expect(hasUnsafeChar(ch)).toBe(true);
  });

  it('keeps line breaks, tabs and printable unicode; CRLF becomes LF; trailing breaks go', () => {
    expect(neutralise('a\r\nb\rc\td ünï 日本 🚀\n\n')).toBe('a\nb\nc\td ünï 日本 🚀');
  });

  it('is idempotent', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 100 }), (text) => {
        expect(neutralise(neutralise(text))).toBe(neutralise(text));
      }),
    );
  });
});

describe("one line of someone else's text (a field, a table cell)", () => {
  it('shows every acting character as U+FFFD, a line break as the mark, a tab as a space', () => {
    expect(neutraliseLine(`a\tb\nc${hostile}`)).toBe(
      `a b${lineBreakMark}c\uFFFD]0;title\uFFFD\uFFFD]52;c;eA==\uFFFD${lineBreakMark}\uFFFD[2K\uFFFD31m\uFFFDevil\uFFFD\uFFFD`,
    );
  });

  it('is one line with nothing acting in it, for any text', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 100 }), (text) => {
        expect(hasUnsafeChar(neutraliseLine(text))).toBe(false);
      }),
    );
  });
});

describe('JSON that stays exact and prints inert (--json, log lines)', () => {
  it('escapes what JSON.stringify leaves raw: DEL, C1, bidi, zero-width, separators, tag characters', () => {
    const text = `a\u007f\u009b\u202e\u200b\u2028\u{E0041}b`;
    expect(exactJson({ text })).toBe('{"text":"a\\u007f\\u009b\\u202e\\u200b\\u2028\\udb40\\udc41b"}');
  });

  it('parses back to the same value and holds no acting character, for any value', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 3 }), fc.string({ unit: 'binary' }), (value, text) => {
        const subject = { value, text, [text]: text };
        const json = exactJson(subject);
        expect(JSON.parse(json)).toEqual(JSON.parse(JSON.stringify(subject)));
        expect(hasUnsafeChar(json)).toBe(false);
      }),
    );
  });

  it("leaves a raw C0 (a line's end) as it is: it is never inside a JSON string", () => {
    expect(escapeUnsafe('{"a":"\u202e"}\n')).toBe('{"a":"\\u202e"}\n');
  });

  it("makes the daemon's log lines inert, each still parsing to what was logged", () => {
    const lines: string[] = [];
    const destination = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString());
        done();
      },
    });
    const logger = createLogger({ destination });
    logger.warn({ routingKey: `roster.${hostile}`, [hostile]: 1 }, `ignored ${hostile}`);
    expect(lines).toHaveLength(1);
    const line = lines[0] ?? '';
    expect(line.endsWith('\n')).toBe(true);
    expect(hasUnsafeChar(line.slice(0, -1))).toBe(false);
    expect(JSON.parse(line)).toMatchObject({
      routingKey: `roster.${hostile}`,
      [hostile]: 1,
      msg: `ignored ${hostile}`,
    });
  });
});

describe('JSON for a page that shows its strings (the console)', () => {
  it('neutralises every string, keys included, and keeps the rest', () => {
    const json = neutralisedJson({ reason: `x${hostile}`, [hostile]: [hostile, 3, null, true] });
    expect(JSON.parse(json)).toEqual({
      reason: 'x\uFFFD]0;title\uFFFD\uFFFD]52;c;eA==\uFFFD\n\uFFFD[2K\uFFFD31m\uFFFDevil\uFFFD\uFFFD',
      [neutralise(hostile)]: [neutralise(hostile), 3, null, true],
    });
  });

  it('sends no string with an acting character (line breaks and tabs aside), for any value', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 3 }), fc.string({ unit: 'binary' }), (value, text) => {
        const shown = JSON.parse(neutralisedJson({ value, [text]: text })) as unknown;
        const strings: string[] = [];
        JSON.stringify(shown, (key, item: unknown) => {
          strings.push(key);
          if (typeof item === 'string') strings.push(item);
          return item;
        });
        for (const s of strings) expect(hasUnsafeChar(s.replace(/[\n\t]/g, ''))).toBe(false);
      }),
    );
  });
});
