import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { agentScreens, isLineReader } from '../../src/panes/agentScreens.js';
import { inputEmpty, inputHolds, readScreen, type ScreenReading } from '../../src/panes/readScreen.js';
import { holdReason } from '../../src/panes/verifiedSubmission.js';

/**
 * The agent table against real screens: `test/fixtures/screens/` holds `capture-pane -p` of
 * Claude Code, Codex CLI and Gemini CLI (and a shell and `cat`) in each state, captured from
 * the real TUIs in tmux (see its README). Every entry of the table must read its screens right.
 */
const dir = join(import.meta.dirname, '..', 'fixtures', 'screens');
const index = JSON.parse(readFileSync(join(dir, 'index.json'), 'utf8')) as Array<{
  file: string;
  cursor: { x: number; y: number };
}>;

function screen(name: string): ScreenReading {
  const entry = index.find((e) => e.file === `${name}.txt`);
  if (!entry) throw new Error(`no fixture ${name}`);
  return readScreen({ text: readFileSync(join(dir, entry.file), 'utf8'), cursor: entry.cursor });
}

const typed = { text: 'hello from bridge', marker: 'hello from bridge' };
const multiline = { text: 'first line of the message\nsecond line\nthird line', marker: 'first line' };

/** Codex's dialog: its question, its default choice, or its footer. */
const codexDialog = /Yes, proceed \(y\)|Would you like to run|Press enter to confirm/;

type Expect = {
  agent: string;
  input?: string;
  busy?: boolean;
  blocked?: RegExp;
  holds?: { text: string; marker: string };
  pasted?: boolean;
  /** What the agent lists as queued (compacted); none unless said. */
  queued?: string[];
  /** What holdReason says: undefined = the pane can take a message. */
  hold: 'blocked' | 'busy' | 'dirty-input' | undefined;
};

const expected: Record<string, Expect> = {
  'claude-prompt-empty': { agent: 'claude-code', input: '', busy: false, hold: undefined },
  'claude-typed-short': { agent: 'claude-code', holds: typed, hold: 'dirty-input' },
  'claude-typed-multiline': { agent: 'claude-code', holds: multiline, hold: 'dirty-input' },
  'claude-paste-4k': { agent: 'claude-code', pasted: true, hold: 'dirty-input' },
  'claude-submitted': { agent: 'claude-code', input: '', busy: false, hold: undefined },
  'claude-busy': { agent: 'claude-code', input: '', busy: true, hold: 'busy' },
  'claude-busy-typed': { agent: 'claude-code', busy: true, input: 'secondmessage', hold: 'dirty-input' },
  'claude-queued': { agent: 'claude-code', input: '', busy: true, hold: 'busy' },
  'claude-dialog': { agent: 'claude-code', blocked: /Do you want to proceed/, hold: 'blocked' },
  'claude-dialog-pasted': { agent: 'claude-code', blocked: /Do you want to proceed/, hold: 'blocked' },
  'claude-approved': { agent: 'claude-code', input: '', busy: false, hold: undefined },
  'codex-prompt-empty': { agent: 'codex', input: '', busy: false, hold: undefined },
  'codex-typed-short': { agent: 'codex', holds: typed, hold: 'dirty-input' },
  'codex-typed-multiline': {
    agent: 'codex',
    holds: multiline,
    input: 'firstlineofthemessagesecondlinethirdline',
    hold: 'dirty-input',
  },
  'codex-paste-4k': { agent: 'codex', pasted: true, hold: 'dirty-input' },
  'codex-submitted': { agent: 'codex', input: '', busy: false, hold: undefined },
  'codex-busy': { agent: 'codex', input: '', busy: true, hold: 'busy' },
  'codex-busy-typed': { agent: 'codex', input: 'secondmessage', busy: true, hold: 'dirty-input' },
  'codex-steered': { agent: 'codex', input: '', busy: true, hold: 'busy' },
  'codex-queued': { agent: 'codex', input: '', busy: true, hold: 'busy' },
  'codex-dialog': { agent: 'codex', blocked: codexDialog, hold: 'blocked' },
  'codex-dialog-pasted': { agent: 'codex', blocked: codexDialog, hold: 'blocked' },
  'codex-approved': { agent: 'codex', input: '', busy: false, hold: undefined },
  'gemini-prompt-empty': { agent: 'gemini', input: '', busy: false, hold: undefined },
  'gemini-prompt-empty-256color': { agent: 'gemini', input: '', busy: false, hold: undefined },
  'gemini-typed-short': { agent: 'gemini', holds: typed, hold: 'dirty-input' },
  'gemini-typed-multiline': { agent: 'gemini', holds: multiline, hold: 'dirty-input' },
  'gemini-paste-4k': { agent: 'gemini', pasted: true, hold: 'dirty-input' },
  'gemini-submitted': { agent: 'gemini', input: '', busy: false, hold: undefined },
  'gemini-busy': { agent: 'gemini', input: '', busy: true, hold: 'busy' },
  'gemini-busy-typed': { agent: 'gemini', busy: true, hold: 'dirty-input' },
  'gemini-queued': { agent: 'gemini', input: '', busy: true, queued: ['secondmessage'], hold: 'busy' },
  'gemini-dialog': { agent: 'gemini', blocked: /Allow execution of/, hold: 'blocked' },
  'gemini-dialog-pasted': { agent: 'gemini', blocked: /Allow execution of/, hold: 'blocked' },
  'gemini-approved': { agent: 'gemini', input: '', busy: false, hold: undefined },
  // Text on a line reader's line that is not a prompt: someone's half-typed line, held.
  'cat-typed': { agent: 'line-reader', holds: typed, hold: 'dirty-input' },
  'cat-submitted': { agent: 'line-reader', input: '', hold: undefined },
  'bash-prompt': { agent: 'line-reader', hold: undefined },
};

describe('readScreen: the agent table against real screens', () => {
  it('every fixture has an expectation, and every agent entry has fixtures', () => {
    expect(index.map((e) => e.file.replace(/\.txt$/, '')).sort()).toEqual(Object.keys(expected).sort());
    for (const agent of agentScreens) {
      expect(
        Object.values(expected).some((e) => e.agent === agent.id),
        agent.id,
      ).toBe(true);
    }
  });

  for (const [name, want] of Object.entries(expected)) {
    it(`${name}: ${want.agent}${want.hold ? `, held (${want.hold})` : ', can take a message'}`, () => {
      const reading = screen(name);
      expect(reading.agent.id).toBe(want.agent);
      if (want.input !== undefined) expect(reading.input).toBe(want.input);
      if (want.busy !== undefined) expect(reading.busy).toBe(want.busy);
      if (want.blocked) expect(reading.blocked).toMatch(want.blocked);
      else expect(reading.blocked).toBeNull();
      if (want.holds) expect(inputHolds(reading, want.holds)).toBe(true);
      if (want.pasted) expect(reading.pasted).toBe(true);
      expect(reading.queued).toEqual(want.queued ?? []);
      // Whatever the screen, it never holds a message that was not typed there (a collapsed
      // paste stands for whatever was pasted: the input was checked empty before).
      if (!reading.pasted)
        expect(
          inputHolds(reading, { text: '[bridge SEND from x@y msg 1234] other', marker: 'msg 1234' }),
        ).toBe(false);
      expect(holdReason(reading)?.reason).toBe(want.hold);
      if (want.hold === undefined && !isLineReader(reading.agent)) expect(inputEmpty(reading)).toBe(true);
    });
  }
});

describe('readScreen: an agent whose banner has scrolled away', () => {
  /** The same screen with its top rows (the banner) gone, as after a long transcript. */
  const scrolled = (name: string, rows: number): ScreenReading => {
    const entry = index.find((e) => e.file === `${name}.txt`);
    if (!entry) throw new Error(`no fixture ${name}`);
    const lines = readFileSync(join(dir, entry.file), 'utf8').split('\n').slice(rows);
    return readScreen({
      text: ['  ┆ line 78: xxxxxxxx', '  ┆ the end', '', '• Done.', ...lines].join('\n'),
      cursor: { x: entry.cursor.x, y: entry.cursor.y - rows + 4 },
    });
  };

  it('Codex with text in its input and no banner or placeholder on screen is still Codex (not a line reader)', () => {
    for (const name of ['codex-typed-short', 'codex-busy-typed']) {
      const reading = scrolled(name, 4);
      expect(reading.agent.id, name).toBe('codex');
      expect(holdReason(reading)?.reason, name).toBe('dirty-input');
    }
  });
});
