import type { Screen } from '../../src/panes/readScreen.js';
import type { PanePort } from '../../src/panes/verifiedSubmission.js';
import { collapse, type DrawStyle, draw, inputText, type Segment } from './agentDrawing.js';

/**
 * A pane shared by the gateway and a person, in process: an agent TUI drawn as the real ones
 * draw (`agentDrawing.ts`), driven by the submission procedure through the same port as a tmux
 * pane, and by the test as a person would (typing, pasting, clearing, sending). It records
 * what every Enter of the gateway's submitted, so a test can check each was on the gateway's
 * own text, and what the person sent.
 */
export class SimulatedPane implements PanePort {
  transcript: string[] = [];
  input: Segment[] = [];
  busy = false;
  dialog: string | undefined;
  prompt = '$ ';
  /** Enters of the gateway's to ignore (a TUI not ready for them). */
  swallowEnters = 0;
  /**
   * Enters of the gateway's whose text the agent drops: its input clears and nothing is
   * submitted or queued (Gemini CLI, entered in the moment its own turn starts).
   */
  dropEnters = 0;
  /** Messages entered while busy, listed under the queue's heading until `finishTurn` (Gemini CLI). */
  queued: string[] = [];
  /** A dialog the agent opens as it takes the gateway's next message (its model asks for a tool at once). */
  dialogOnEnter: string | undefined;
  /** The program's identity, as tmux reports one; `blank` draws nothing (a program starting). */
  program = 'p1';
  blank = false;
  /** What the input held at each Enter of the gateway's, pastes expanded ('' = nothing submitted). */
  readonly gatewayEnters: string[] = [];
  /** Everything submitted, by whom. */
  readonly submitted: Array<{ by: 'gateway' | 'person'; text: string }> = [];
  private pastes = 0;

  constructor(
    readonly style: DrawStyle,
    readonly width = 100,
    readonly height = 40,
  ) {}

  async capture(): Promise<Screen> {
    if (this.blank) return { text: '', cursor: { x: 0, y: 0 }, program: this.program };
    const { text, cursor } = this.drawn(this.height);
    return { text, cursor, program: this.program };
  }

  async history(): Promise<string> {
    return this.drawn(Number.MAX_SAFE_INTEGER).text;
  }

  /** The rows that scrolled off the top of the screen. */
  async scrollback(): Promise<string> {
    const rows = this.drawn(Number.MAX_SAFE_INTEGER).text.split('\n');
    return rows.slice(0, Math.max(0, rows.length - this.height)).join('\n');
  }

  private drawn(height: number): ReturnType<typeof draw> {
    return draw({
      style: this.style,
      transcript: this.transcript,
      input: this.input,
      busy: this.busy,
      queued: this.queued,
      dialog: this.dialog,
      prompt: this.prompt,
      width: this.width,
      height,
    });
  }

  async paste(text: string, enter: boolean): Promise<undefined> {
    this.insert(text);
    if (enter) await this.pressEnter();
  }

  async pressEnter(): Promise<undefined> {
    if (this.dialog) {
      this.gatewayEnters.push(`CONFIRMED ${this.dialog}`);
      this.dialog = undefined;
      return;
    }
    this.gatewayEnters.push(inputText(this.input));
    if (this.swallowEnters > 0) {
      this.swallowEnters--;
      return;
    }
    if (this.dropEnters > 0) {
      this.dropEnters--;
      this.input = [];
      return;
    }
    this.enter('gateway');
    this.dialog = this.dialogOnEnter;
    this.dialogOnEnter = undefined;
  }

  // ── What a person does in the pane.

  personTypes(text: string): void {
    this.input.push({ text });
  }

  personPastes(text: string): void {
    this.insert(text);
  }

  personClears(): void {
    this.input = [];
  }

  personSends(): void {
    this.enter('person');
  }

  /** The agent's turn ends: what it queued meanwhile is submitted, as one message per entry. */
  finishTurn(): void {
    this.busy = false;
    for (const text of this.queued.splice(0)) this.transcript.push(text);
  }

  private insert(text: string): void {
    if (this.dialog || this.blank) return;
    this.pastes++;
    this.input.push({ text, collapsed: collapse(this.style, text, this.pastes) });
  }

  private enter(by: 'gateway' | 'person'): void {
    const text = inputText(this.input);
    if (this.style === 'shell') {
      this.transcript.push(`${this.prompt}${text}`);
      this.submitted.push({ by, text });
    } else if (text !== '') {
      if (this.busy && this.style === 'gemini') this.queued.push(text);
      else this.transcript.push(text);
      this.submitted.push({ by, text });
    }
    this.input = [];
  }
}
