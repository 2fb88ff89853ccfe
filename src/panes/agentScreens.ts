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
   * Between the last `top` line and the `bottom` line after it; the first line starts with
   * `prompt`, continuation lines are indented.
   */
  | { readonly kind: 'ruled'; readonly top: RegExp; readonly bottom: RegExp; readonly prompt: RegExp }
  /**
   * The last line that starts with `prompt`, and the indented lines after it up to a blank
   * line or one that matches `end` (a status line under the input, drawn less indented than
   * the input's own wrapped lines, so no line of the input can end it).
   */
  | { readonly kind: 'prompt-line'; readonly prompt: RegExp; readonly end: readonly RegExp[] }
  /** A line reader (a shell, `cat`, a script): the text on the cursor's line. */
  | { readonly kind: 'cursor-line' };

export interface AgentScreen {
  readonly id: string;
  readonly name: string;
  /**
   * The screen is this agent's when one of these matches it: lines of its own drawing
   * (anchored, with their leading glyphs and spaces), which no line of a transcript or an input
   * can be, so a message quoting another agent's words does not change whose screen it is.
   */
  readonly recognise: readonly RegExp[];
  /** Where its input area is: the first of these that the screen has. */
  readonly input: readonly InputArea[];
  /** What an empty input area shows (placeholders, hints); removed before deciding it is empty. */
  readonly emptyInput: readonly RegExp[];
  /** What a long paste is shown as in the input area: the input holds a paste. */
  readonly pastePlaceholders: readonly PastePlaceholder[];
  /**
   * On screen, below the input area (or anywhere when there is none): a dialog is open
   * (permission, trust, approval). Never type, never press Enter.
   */
  readonly blocked: readonly RegExp[];
  /**
   * The agent is working on a turn: lines it draws above its input area (`above`, the ten
   * lines next to it) or below it (`below`, the footer). Each pattern matches a whole line of
   * the agent's own chrome (anchored, with the glyph it starts with), never a line of a
   * transcript, so no message body can pass for it.
   */
  readonly busy: { readonly above: readonly RegExp[]; readonly below: readonly RegExp[] };
  /** The shortest pause between the paste and Enter that submits (shorter turns Enter into a newline). */
  readonly enterDelayMs: number;
  /** What proves the agent took a message once Enter has cleared its input. */
  readonly taken: TakenProof;
}

/**
 * What proves an agent took a message after Enter. `input-cleared`: the input no longer holds
 * it. `shown`: that is not enough; the message must stand in the transcript above the input,
 * or in the agent's queue of messages typed while it was busy: the lines under `queueHeading`,
 * one per message, each cut at the pane's width with `…`.
 */
export type TakenProof =
  | { readonly kind: 'input-cleared' }
  | { readonly kind: 'shown'; readonly queueHeading: RegExp };

/**
 * How an agent shows a collapsed paste, and what it counts: `count` in the first group, of
 * `newlines` (Claude's `+83 lines` for 84 lines), `lines` (Gemini's `84 lines`) or `chars`
 * (Codex's `4096 chars`, in code points); a placeholder without a count (Claude's for a paste
 * of one long line) counts none.
 */
export interface PastePlaceholder {
  readonly pattern: RegExp;
  readonly counts: 'newlines' | 'lines' | 'chars';
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

const fullRule = /^─{20,}\s*$/;

export const agentScreens: readonly AgentScreen[] = [
  {
    id: 'claude-code',
    name: 'Claude Code',
    // Its input box (a full-width rule, then the `❯` line), or a dialog's footer, which
    // replaces the box while the dialog is open.
    recognise: [/^─{20,}\s*\n❯/m, /^ Esc to cancel · Tab to amend/m, /^╭─+ Claude Code v\d/m],
    input: [{ kind: 'ruled', top: fullRule, bottom: fullRule, prompt: /^❯\s?/ }],
    emptyInput: [/^Press up to edit queued messages$/],
    pastePlaceholders: [{ pattern: /\[Pasted text #\d+(?: \+(\d+) lines?)?\]/, counts: 'newlines' }],
    blocked: [
      /Do you want to proceed\?/,
      /Do you want to make this edit/,
      /Do you want to create /,
      /Do you trust the files in this folder\?/,
      /Esc to cancel · Tab to amend/,
    ],
    // The spinner line above the box (`✻ Leavening…`; transcript lines are indented or start
    // with `❯`/`⏺`), or the footer under it while a turn runs.
    busy: { above: [/^[✻✽✢✶✳✺·*] [A-Z][a-z]+…/], below: [/^\s*esc to interrupt/] },
    enterDelayMs: 60,
    taken: { kind: 'input-cleared' },
  },
  {
    id: 'codex',
    name: 'Codex CLI',
    recognise: [
      /^[\s│]{0,4}>_ OpenAI Codex \(v/m,
      /^› Ask Codex to do anything$/m,
      /^ {2}Press enter to confirm or esc to cancel$/m,
      // Once a long message has scrolled the banner away and the input holds text, the
      // placeholder is gone too: its `›` prompt line above the model · working-directory line.
      /^›[^\n]*\n(?:[^\n]*\n)*?[ \t]+\S[^\n]*\s·\s\//m,
    ],
    input: [
      {
        kind: 'prompt-line',
        prompt: /^›\s?/,
        // A blank row parts the input from the model and working directory under it
        // (`GPT-… default · /path`) and the footer; a wrapped row of the input can read as
        // anything, so nothing but that row ends it.
        end: [],
      },
    ],
    emptyInput: [/^Ask Codex to do anything$/],
    pastePlaceholders: [{ pattern: /\[Pasted Content (\d+) chars\]/, counts: 'chars' }],
    blocked: [
      /Would you like to run the following command\?/,
      /Would you like to make the following edits\?/,
      /Yes, proceed \(y\)/,
      /Press enter to confirm or esc to cancel/,
      /Do you trust the contents of this directory\?/,
    ],
    // `• Working (1s • esc to interrupt)` above the input; transcript lines start with `›` or are indented.
    busy: { above: [/^• Working \(\d+s/], below: [] },
    enterDelayMs: 60,
    taken: { kind: 'input-cleared' },
  },
  {
    id: 'gemini',
    name: 'Gemini CLI',
    recognise: [
      /^ > {3}Type your message or @path\/to\/file$/m,
      /^ Shift\+Tab to accept edits/m,
      /^│ Allow execution of \[/m,
    ],
    // Its input sits between a line of lower half blocks and one of upper half blocks; on a
    // terminal without true colour the blocks are not drawn, and the `>` line stands alone.
    input: [
      { kind: 'ruled', top: /^\s*▄{20,}\s*$/, bottom: /^\s*▀{20,}\s*$/, prompt: /^>\s*/ },
      { kind: 'prompt-line', prompt: /^>\s+/, end: [/^ workspace \(\/directory\)/] },
    ],
    emptyInput: [/^Type your message or @path\/to\/file$/],
    pastePlaceholders: [{ pattern: /\[Pasted Text: (\d+) lines?\]/, counts: 'lines' }],
    blocked: [
      /Allow execution of/,
      /● 1\. Allow once/,
      /Waiting for user confirmation/,
      /Do you trust this folder\?/,
    ],
    // ` ⠹ Thinking... (esc to cancel, 1s)`: a braille spinner, on the row above the input's band.
    busy: { above: [/^\s?[\u2800-\u28FF] .*\(esc to cancel, \d+s\)/], below: [] },
    // Enter within ~40 ms of a paste becomes a newline in its input.
    enterDelayMs: 80,
    // A message entered in the moment a turn starts is dropped: the input clears and nothing
    // is sent or queued (0.61: the submit handler read the turn as idle, and the query it
    // starts returns at once because a turn is already starting). Messages typed while it is
    // busy are listed under `Queued (press ↑ to edit):` until the turn ends.
    taken: { kind: 'shown', queueHeading: /^ {2}Queued \(press ↑ to edit\):$/ },
  },
];

/** Whether `agent` is the fallback: a program read as a line reader. */
export function isLineReader(agent: AgentScreen): boolean {
  return agent.input.some((area) => area.kind === 'cursor-line');
}

/** The fallback for programs no entry recognises: a line reader, typed at its cursor. */
export const lineReader: AgentScreen = {
  id: 'line-reader',
  name: 'line reader',
  recognise: [],
  input: [{ kind: 'cursor-line' }],
  emptyInput: [],
  pastePlaceholders: [],
  blocked: [],
  busy: { above: [], below: [] },
  enterDelayMs: 0,
  taken: { kind: 'input-cleared' },
};
