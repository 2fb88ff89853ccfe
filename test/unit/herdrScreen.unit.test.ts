import { describe, expect, it } from 'vitest';
import { herdrFeatures } from '../../src/panes/herdrFeatures.js';
import { locateOnScreen, pendingInput } from '../../src/panes/herdrScreen.js';

const message = { text: '[bridge SEND from a@h msg M1] please\nreview this', marker: 'msg M1' };
/** A program the agent table does not know gets a message folded into one line (`shownOnScreen`). */
const folded = '[bridge SEND from a@h msg M1] please ⏎ review this';

describe('locateOnScreen', () => {
  it('finds a message still in the input area', () => {
    const screen = `agent: hello\n> ${folded}\n`;
    expect(locateOnScreen(screen, message)).toBe('typed');
  });

  it('keeps a message with box chrome below it in the input area', () => {
    const screen = `╭────╮\n│ > ${folded}\n╰────╯\n  ? for shortcuts`;
    expect(locateOnScreen(screen, message)).toBe('typed');
  });

  it('reads a message with a fresh prompt below it as submitted', () => {
    const screen = `> ${folded}\n• Working…\n> \n`;
    expect(locateOnScreen(screen, message)).toBe('submitted');
  });

  it('is not fooled by a quoted line inside the message: folded, it cannot start a line', () => {
    const quoted = { text: '[bridge msg Q1] see\n> quoted line', marker: 'msg Q1' };
    expect(locateOnScreen('> [bridge msg Q1] see ⏎ > quoted line\n  ? help', quoted)).toBe('typed');
    expect(locateOnScreen('> [bridge msg Q1] see ⏎ > quoted line\nok\n> ', quoted)).toBe('submitted');
  });

  it('without any prompt glyph, reads output below the message as submitted', () => {
    const line = { text: 'msg L1 hi', marker: 'msg L1' };
    expect(locateOnScreen('$ cat\nmsg L1 hi', line)).toBe('typed');
    expect(locateOnScreen('$ cat\nmsg L1 hi\nread it\n', line)).toBe('submitted');
  });

  it('uses the last place the marker shows, and says absent when it does not', () => {
    const screen = `> ${folded}\n> ${folded}`;
    expect(locateOnScreen(screen, message)).toBe('typed');
    expect(locateOnScreen('> \n', message)).toBe('absent');
  });
});

describe('pendingInput', () => {
  it('reads the last prompt line, or says it cannot tell', () => {
    expect(pendingInput('out\n> \n')).toBe('');
    expect(pendingInput('> old\nout\n❯ half typed')).toBe('half typed');
    expect(pendingInput('just output')).toBeUndefined();
  });
});

describe('herdrFeatures', () => {
  it('uses agent.prompt only from 0.8.2, where it refuses a blocked agent', () => {
    expect(herdrFeatures({ version: '0.8.2', protocol: 20 })).toMatchObject({
      agentPrompt: true,
      sessionSnapshot: true,
    });
    expect(herdrFeatures({ version: '0.8.0', protocol: 19 })).toMatchObject({
      agentPrompt: false,
      sessionSnapshot: true,
    });
    expect(herdrFeatures({ version: '0.10.0-preview.1', protocol: 25 }).agentPrompt).toBe(true);
    expect(herdrFeatures({ version: '1.0.0', protocol: 30 }).agentPrompt).toBe(true);
  });

  it('has session.snapshot from 0.7.2, and falls back to the protocol number', () => {
    expect(herdrFeatures({ version: '0.7.1', protocol: 14 }).sessionSnapshot).toBe(false);
    expect(herdrFeatures({ version: '0.7.2', protocol: 16 }).sessionSnapshot).toBe(true);
    expect(herdrFeatures({ version: 'dev', protocol: 20 })).toMatchObject({
      agentPrompt: true,
      sessionSnapshot: true,
    });
    expect(herdrFeatures({ version: 'dev', protocol: 13 })).toMatchObject({
      agentPrompt: false,
      sessionSnapshot: false,
    });
  });
});
