/**
 * The agent TUIs the injector recognises by their screen, as data (R-DL6). Each entry says how
 * to tell the agent's screen, where its input area is, what an empty input looks like, and
 * which screens mean busy or blocked (a dialog: typing into it could answer it, so the
 * injector holds). Observed on the versions named in `../shared/AGENT-TUIS.md`, in a tmux
 * pane, through `capture-pane -p`; the fixtures under `test/fixtures/screens/` are those
 * screens, and `readScreen.unit.test.ts` checks every entry against them.
 *
 * To add an agent: capture its screen in each state (prompt empty, text typed, submitted,
 * busy, a dialog), add an entry here, add the captures as fixtures. Programs no entry
 * recognises are read as line readers (the cursor's line is the input).
 */

/** How the input area is found on the screen. */
export type InputArea =
  /**
   * Between the last two horizontal rules on screen; the first line starts with `prompt`,
   * continuation lines are indented.
   */
  | { readonly kind: 'ruled'; readonly prompt: RegExp }
  /** Inside the last box drawn with `│ … │` (or `╭╮╰╯`) whose first line starts with `prompt`. */
  | { readonly kind: 'boxed'; readonly prompt: RegExp }
  /** The last line that starts with `prompt`, and the lines after it up to a blank line. */
  | { readonly kind: 'prompt-line'; readonly prompt: RegExp }
  /** A line reader (a shell, `cat`, a script): the text on the cursor's line. */
  | { readonly kind: 'cursor-line' };

export interface AgentScreen {
  readonly id: string;
  readonly name: string;
  /** The screen is this agent's when one of these matches it. */
  readonly recognise: readonly RegExp[];
  readonly input: InputArea;
  /** What an empty input area shows (placeholders, hints); removed before deciding it is empty. */
  readonly emptyInput: readonly RegExp[];
  /** What a long paste is shown as in the input area: the input holds a paste. */
  readonly pastePlaceholders: readonly RegExp[];
  /** On screen: a dialog is open (permission, trust, approval). Never type, never press Enter. */
  readonly blocked: readonly RegExp[];
  /** On screen: the agent is working on a turn. */
  readonly busy: readonly RegExp[];
  /** The shortest pause between the paste and Enter that submits (shorter turns Enter into a newline). */
  readonly enterDelayMs: number;
}

/** Dialog texts common to agent TUIs: held as blocked whatever the program. */
export const commonDialogs: readonly RegExp[] = [
  /Do you want to proceed\?/,
  /Do you trust the files in this folder\?/,
  /Trust this folder\?/i,
  /Do you trust this folder\?/i,
  /Would you like to run the following command\?/,
  /Would you like to make the following edits\?/,
  /Allow execution of/,
  /Waiting for user confirmation/,
  /Press enter to confirm or esc to cancel/i,
];

export const agentScreens: readonly AgentScreen[] = [
  {
    id: 'claude-code',
    name: 'Claude Code',
    // Its input box: a full-width rule, then the `❯` prompt line (always on screen at its prompt).
    recognise: [/^─{20,}\s*\n❯/m],
    input: { kind: 'ruled', prompt: /^❯\s?/ },
    emptyInput: [/^Press up to edit queued messages$/, /^Try ".*"$/],
    pastePlaceholders: [/\[Pasted text #\d+[^\]]*\]/],
    blocked: [
      /Do you want to proceed\?/,
      /Do you want to make this edit/,
      /Do you want to create /,
      /Do you trust the files in this folder\?/,
      /❯ 1\. Yes/,
      /Esc to cancel · Tab to amend/,
    ],
    busy: [/esc to interrupt/],
    enterDelayMs: 60,
  },
  {
    id: 'codex',
    name: 'Codex CLI',
    recognise: [/OpenAI Codex/, /Ask Codex to do anything/, /tab to queue message/, /^› /m],
    input: { kind: 'prompt-line', prompt: /^›\s?/ },
    emptyInput: [
      /^Ask Codex to do anything$/,
      /^Find and fix a bug in @filename$/,
      /^Improve documentation in @filename$/,
    ],
    pastePlaceholders: [/\[Pasted Content \d+ chars\]/],
    blocked: [
      /Would you like to run the following command\?/,
      /Would you like to make the following edits\?/,
      /Yes, proceed \(y\)/,
      /Press enter to confirm or esc to cancel/,
      /Do you trust the contents of this directory\?/,
    ],
    busy: [/Working \(\d+s/, /esc to interrupt/],
    enterDelayMs: 60,
  },
  {
    id: 'gemini',
    name: 'Gemini CLI',
    recognise: [/Type your message or @path\/to\/file/, /gemini-[\d.]+-(pro|flash)/],
    input: { kind: 'boxed', prompt: /^>\s*/ },
    emptyInput: [/^Type your message or @path\/to\/file$/],
    pastePlaceholders: [/\[Pasted Text: \d+ lines?\]/],
    blocked: [
      /Allow execution of/,
      /● 1\. Allow once/,
      /Waiting for user confirmation/,
      /Do you trust this folder\?/,
    ],
    busy: [/esc to cancel, \d+s/, /Thinking\.\.\./],
    enterDelayMs: 80,
  },
];

/** The fallback for programs no entry recognises: a line reader, typed at its cursor. */
export const lineReader: AgentScreen = {
  id: 'line-reader',
  name: 'line reader',
  recognise: [],
  input: { kind: 'cursor-line' },
  emptyInput: [],
  pastePlaceholders: [],
  blocked: [],
  busy: [],
  enterDelayMs: 0,
};
