/**
 * Screens drawn the way the agent TUIs of the agent table draw theirs (test/fixtures/screens/
 * README.md tells each landmark): Claude Code's ruled box, Codex's `›` line over its status
 * line, Gemini's banded input, and a shell-like line reader with a prompt. Pure: the state in,
 * the screen text and cursor out, so the same drawing serves the in-process simulated pane of
 * the property tests and the fake TUI program that a real gateway types into through tmux.
 *
 * A paste is kept as a segment of the input; long ones collapse to the agent's placeholder, as
 * the real TUIs do, whoever pasted them (a person's paste and ours look alike).
 */
export const DrawStyle = {
  claude: 'claude',
  codex: 'codex',
  gemini: 'gemini',
  shell: 'shell',
} as const;
export type DrawStyle = (typeof DrawStyle)[keyof typeof DrawStyle];

export interface Segment {
  readonly text: string;
  /** The placeholder shown instead of `text` (a collapsed paste). */
  readonly collapsed?: string | undefined;
}

export interface DrawState {
  readonly style: DrawStyle;
  /** Lines already submitted or printed, oldest first (logical lines, wrapped when drawn). */
  readonly transcript: readonly string[];
  readonly input: readonly Segment[];
  readonly busy: boolean;
  /** Messages the agent queued while busy (Gemini CLI lists them above its input). */
  readonly queued?: readonly string[] | undefined;
  /** A dialog's question: drawn instead of the input area. */
  readonly dialog?: string | undefined;
  /** A line reader's prompt. */
  readonly prompt?: string | undefined;
  readonly width: number;
  readonly height: number;
}

/** What the input holds, pastes expanded: what Enter submits. */
export function inputText(input: readonly Segment[]): string {
  return input.map((segment) => segment.text).join('');
}

/** The placeholder `style` shows for a paste of `text` (its `n`th paste), or undefined if shown as is. */
export function collapse(style: DrawStyle, text: string, n: number): string | undefined {
  const newlines = text.split('\n').length - 1;
  switch (style) {
    case 'claude':
      return newlines >= 3 || text.length > 800 ? `[Pasted text #${n} +${newlines} lines]` : undefined;
    case 'codex':
      return text.length > 1000 ? `[Pasted Content ${[...text].length} chars]` : undefined;
    case 'gemini':
      return newlines >= 4 ? `[Pasted Text: ${newlines + 1} lines]` : undefined;
    case 'shell':
      return undefined;
  }
}

/** One logical line cut at `width`, the rows after the first indented by `indent`. */
function wrap(line: string, first: string, indent: string, width: number): string[] {
  const rows: string[] = [];
  let rest = [...line];
  let lead = first;
  do {
    const room = Math.max(1, width - [...lead].length);
    rows.push(lead + rest.slice(0, room).join(''));
    rest = rest.slice(room);
    lead = indent;
  } while (rest.length > 0);
  return rows;
}

/** A text's lines, each wrapped, the first row after `first`, every other after `indent`. */
function block(text: string, first: string, indent: string, width: number): string[] {
  return text.split('\n').flatMap((line, i) => wrap(line, i === 0 ? first : indent, indent, width));
}

const shownInput = (input: readonly Segment[]): string =>
  input.map((segment) => segment.collapsed ?? segment.text).join('');

/** The visible screen (its last `height` rows) and the cursor. */
export function draw(state: DrawState): { text: string; cursor: { x: number; y: number } } {
  const { width } = state;
  const rule = '─'.repeat(width);
  const shown = shownInput(state.input);
  const rows: string[] = [];
  let cursorRow = -1;
  let cursorX = 0;
  const dialog = (): void => {
    rows.push(` ${state.dialog}`, ' ❯ 1. Yes', '   2. No', ' Esc to cancel · Tab to amend');
  };
  switch (state.style) {
    case 'claude': {
      rows.push('╭─── Claude Code v2.1.197 ───╮', '╰────────────────────────────╯');
      for (const entry of state.transcript) rows.push(...block(entry, '❯ ', '  ', width), '  ⎿  Done.');
      if (state.busy) rows.push('✻ Kneading…');
      if (state.dialog) dialog();
      else {
        rows.push(rule, ...block(shown, '❯\u00a0', '  ', width));
        cursorRow = rows.length - 1;
        rows.push(rule, state.busy ? '  esc to interrupt · ← for agents' : '  ? for shortcuts');
      }
      break;
    }
    case 'codex': {
      rows.push(
        '╭──────────────────────────╮',
        '│ >_ OpenAI Codex (v0.171.0) │',
        '╰──────────────────────────╯',
      );
      for (const entry of state.transcript) rows.push(...block(entry, '› ', '  ', width), '', '• Done.', '');
      if (state.busy) rows.push('• Working (1s • esc to interrupt)');
      if (state.dialog) dialog();
      else {
        rows.push(...block(shown === '' ? 'Ask Codex to do anything' : shown, '› ', '  ', width));
        cursorRow = rows.length - 1;
        rows.push('', '  GPT-6.2-Sol default · /tmp/work', '  ← for agents · ? for shortcuts');
      }
      break;
    }
    case 'gemini': {
      rows.push(' Gemini CLI v0.61.0', 'Tips for getting started:');
      for (const entry of state.transcript) rows.push(...block(entry, ' > ', '   ', width), '✦ Done.');
      if (state.queued?.length) {
        // One row per message, its whitespace folded, cut at the pane's width with `…`.
        rows.push('', '  Queued (press ↑ to edit):');
        for (const entry of state.queued) {
          const row = `    ${entry.replace(/\s+/g, ' ')}`;
          rows.push([...row].length > width ? `${[...row].slice(0, width - 1).join('')}…` : row);
        }
        rows.push('');
      }
      rows.push(state.busy ? ' ⠏ Thinking... (esc to cancel, 1s)' : '', rule, ' Shift+Tab to accept edits');
      // Its dialog is a box of its own in place of the input band.
      if (state.dialog) rows.push('╭───', `│ ${state.dialog}`, '│ ● 1. Allow once', '│   2. No', '╰───');
      else {
        rows.push('▄'.repeat(width));
        rows.push(
          ...block(shown === '' ? '  Type your message or @path/to/file' : shown, ' > ', '   ', width),
        );
        cursorRow = rows.length - 1;
        rows.push('▀'.repeat(width), ' workspace (/directory)     sandbox     /model');
      }
      break;
    }
    case 'shell': {
      const prompt = state.prompt ?? '$ ';
      for (const entry of state.transcript) rows.push(...block(entry, '', '', width));
      const line = block(`${prompt}${shown}`, '', '', width);
      rows.push(...line);
      cursorRow = rows.length - 1;
      cursorX = [...(line[line.length - 1] ?? '')].length;
      break;
    }
  }
  if (cursorRow >= 0 && state.style !== 'shell') cursorX = [...(rows[cursorRow] ?? '')].length;
  const top = Math.max(0, rows.length - state.height);
  return { text: rows.slice(top).join('\n'), cursor: { x: cursorX, y: Math.max(0, cursorRow - top) } };
}
