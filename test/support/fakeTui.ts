/**
 * A stand-in agent TUI for a real tmux pane: it draws the screen of `--style` (claude, codex,
 * gemini or shell) with `agentDrawing.ts`, the same drawing the in-process property tests use,
 * and takes keys as the real TUIs do: bracketed pastes (collapsed to the agent's placeholder
 * when long, whoever pasted them), typed letters, Backspace, Ctrl-U (clear the input), Enter
 * (submit the input). Used where a real TUI cannot be made to misbehave on cue.
 *
 *   node --import tsx test/support/fakeTui.ts --style claude --log FILE [--deaf]
 *
 * Every submitted input, pastes expanded, is appended to FILE as one JSON string per line: what
 * reached "the model". `--deaf` ignores Enter (an agent not ready for it) until the process gets
 * SIGUSR1; each Enter it ignored is counted as a line of FILE.enters.
 */
import { appendFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { collapse, type DrawStyle, draw, inputText, type Segment } from './agentDrawing.js';

const { values } = parseArgs({
  options: {
    style: { type: 'string', default: 'claude' },
    log: { type: 'string' },
    deaf: { type: 'boolean', default: false },
  },
});
const style = values.style as DrawStyle;
const log = values.log;

const transcript: string[] = [];
let input: Segment[] = [];
let pastes = 0;
let deaf = values.deaf;
let ignoredEnters = 0;

const pasteStart = '\x1b[200~';
const pasteEnd = '\x1b[201~';
/** What follows ESC in a key's escape sequence: a CSI, an SS3, or one character (Alt+key). */
const escapeSequence = /^(\[[0-9;?]*[ -/]*[@-~]|O.|.)?/;

function render(): void {
  const width = process.stdout.columns || 80;
  const height = process.stdout.rows || 24;
  const { text, cursor } = draw({ style, transcript, input, busy: false, width, height });
  const rows = text.split('\n').map((row) => `${row}\x1b[K`);
  process.stdout.write(`\x1b[H\x1b[2J${rows.join('\r\n')}\x1b[${cursor.y + 1};${cursor.x + 1}H`);
}

function submit(): void {
  if (deaf) {
    ignoredEnters++;
    if (log) appendFileSync(`${log}.enters`, `${ignoredEnters}\n`);
    return;
  }
  const text = inputText(input);
  input = [];
  if (text === '' && style !== 'shell') return;
  transcript.push(text);
  if (log) appendFileSync(log, `${JSON.stringify(text)}\n`);
}

function typed(text: string): void {
  const last = input[input.length - 1];
  if (last && last.collapsed === undefined) input[input.length - 1] = { text: last.text + text };
  else input.push({ text });
}

function backspace(): void {
  const last = input[input.length - 1];
  if (!last) return;
  if (last.collapsed !== undefined || last.text.length <= 1) input.pop();
  else input[input.length - 1] = { text: [...last.text].slice(0, -1).join('') };
}

/** Keys not yet complete (an escape sequence or a paste split across reads). */
let pending = '';

function take(chunk: string): void {
  let data = pending + chunk;
  pending = '';
  while (data.length > 0) {
    if (data.startsWith(pasteStart)) {
      const end = data.indexOf(pasteEnd);
      if (end < 0) {
        pending = data;
        return;
      }
      const text = data.slice(pasteStart.length, end).replace(/\r\n?/g, '\n');
      pastes++;
      input.push({ text, collapsed: collapse(style, text, pastes) });
      data = data.slice(end + pasteEnd.length);
      continue;
    }
    const key = data[0] as string;
    if (key === '\x1b') {
      if (data.length < pasteStart.length && pasteStart.startsWith(data)) {
        pending = data;
        return;
      }
      // Any other escape sequence (arrows, focus): skipped whole.
      const sequence = escapeSequence.exec(data.slice(1))?.[0] ?? '';
      data = data.slice(1 + sequence.length);
      continue;
    }
    data = data.slice(1);
    if (key === '\r' || key === '\n') submit();
    else if (key === '\x7f' || key === '\b') backspace();
    else if (key === '\x15') input = [];
    else if (key === '\x03') process.exit(0);
    else if (key >= ' ') typed(key);
  }
}

process.on('SIGUSR1', () => {
  deaf = false;
});
process.stdout.on('resize', render);
process.stdin.setRawMode(true);
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk: string) => {
  take(chunk);
  render();
});
// Bracketed paste on, as the real TUIs ask for it: tmux's `paste-buffer -p` then marks a paste.
process.stdout.write('\x1b[?2004h');
render();
