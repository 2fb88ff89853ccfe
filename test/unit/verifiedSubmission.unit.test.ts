import { describe, expect, it } from 'vitest';
import type { Screen } from '../../src/panes/readScreen.js';
import { createVerifiedSubmission, type PanePort } from '../../src/panes/verifiedSubmission.js';
import { SimulatedPane } from '../support/SimulatedPane.js';

/**
 * A pane drawn like Claude Code's screen (input box between two rules), driven by the
 * procedure through the same port as a tmux pane; what it is sent is recorded.
 */
class FakeAgentPane implements PanePort {
  input = '';
  transcript: string[] = ['Claude Code v2.1.197'];
  dialog: string | undefined;
  busy = false;
  /** Enters to ignore (a TUI that is not ready yet takes the first Enter as nothing). */
  swallowEnters = 0;
  /** Pastes to drop without showing them (a dialog, or an agent not at its prompt). */
  dropPastes = 0;
  readonly sent: string[] = [];
  /** Called after each capture: lets a test change the screen between two looks. */
  onCapture: ((pane: FakeAgentPane, count: number) => void) | undefined;
  private captures = 0;

  async capture(): Promise<Screen> {
    this.onCapture?.(this, ++this.captures);
    const rule = '─'.repeat(60);
    const body = this.dialog
      ? [this.dialog, '❯ 1. Yes', '  2. No']
      : [
          rule,
          `❯ ${this.input.split('\n').join('\n  ')}`,
          rule,
          this.busy ? '  esc to interrupt' : '  ? for shortcuts',
        ];
    return { text: [...this.transcript, ...body].join('\n') };
  }
  async history(): Promise<string> {
    return (await this.capture()).text;
  }
  /** Nothing has scrolled off this screen. */
  async scrollback(): Promise<string> {
    return '';
  }
  async paste(text: string, enter: boolean): Promise<undefined> {
    this.sent.push(`paste ${text}`);
    if (this.dialog || this.dropPastes > 0) {
      this.dropPastes = Math.max(0, this.dropPastes - 1);
      return;
    }
    this.input += text;
    if (enter) await this.pressEnter();
  }
  async pressEnter(): Promise<undefined> {
    this.sent.push('Enter');
    if (this.dialog) {
      this.sent.push(`CONFIRMED ${this.dialog}`);
      this.dialog = undefined;
      return;
    }
    if (this.swallowEnters > 0) {
      this.swallowEnters--;
      return;
    }
    if (this.input !== '') this.transcript.push(`❯ ${this.input}`, '  ⎿  Not logged in · Please run /login');
    this.input = '';
  }
}

const timing = {
  showTimeoutMs: 60,
  submitTimeoutMs: 40,
  proofTimeoutMs: 60,
  pollMs: 5,
  enterAttempts: 3,
  historyLines: 100,
  enterPauseMs: 0,
  programSettleMs: 0,
};
const message = { text: '[bridge SEND from lead@alpha msg 0000-1] rebase onto main', marker: 'msg 0000-1' };

describe('verified submission against an agent-like screen', () => {
  it('types, presses Enter as its own step, and confirms the text left the input', async () => {
    const pane = new FakeAgentPane();
    const submission = createVerifiedSubmission(pane, timing);
    expect(await submission.type(message)).toEqual({ kind: 'typed' });
    expect(pane.input).toBe(message.text);
    expect(await submission.submit(message)).toMatchObject({ kind: 'submitted' });
    expect(pane.sent).toEqual([`paste ${message.text}`, 'Enter']);
    expect(await submission.locate(message)).toBe('submitted');
  });

  it('never types into a dialog and never presses a key there', async () => {
    const pane = new FakeAgentPane();
    pane.dialog = 'Do you want to proceed?';
    const submission = createVerifiedSubmission(pane, timing);
    expect(await submission.type(message)).toMatchObject({ kind: 'deferred', reason: 'blocked' });
    expect(await submission.inspect()).toMatchObject({ reason: 'blocked' });
    expect(pane.sent).toEqual([]);
  });

  it('a dialog that opens between the paste and Enter gets no Enter', async () => {
    const pane = new FakeAgentPane();
    const submission = createVerifiedSubmission(pane, timing);
    expect(await submission.type(message)).toEqual({ kind: 'typed' });
    pane.dialog = 'Do you want to proceed?';
    expect(await submission.submit(message)).toMatchObject({ kind: 'deferred', reason: 'blocked' });
    expect(pane.sent).toEqual([`paste ${message.text}`]);
  });

  it('holds when the input already holds text someone typed, or the agent is busy', async () => {
    const pane = new FakeAgentPane();
    pane.input = 'half a thought';
    const submission = createVerifiedSubmission(pane, timing);
    expect(await submission.type(message)).toMatchObject({ kind: 'deferred', reason: 'dirty-input' });
    pane.input = '';
    pane.busy = true;
    expect(await submission.type(message)).toMatchObject({ kind: 'deferred', reason: 'busy' });
    expect(pane.sent).toEqual([]);
  });

  it('presses Enter again while the text stays in the input, and says not-submitted after the last', async () => {
    const pane = new FakeAgentPane();
    const submission = createVerifiedSubmission(pane, timing);
    await submission.type(message);
    pane.swallowEnters = 2;
    expect(await submission.submit(message)).toMatchObject({
      kind: 'submitted',
      how: expect.stringContaining('3 Enter'),
    });
    const second = { marker: 'msg 0000-2', text: '[bridge SEND from lead@alpha msg 0000-2] again' };
    await submission.type(second);
    pane.swallowEnters = 10;
    expect(await submission.submit(second)).toMatchObject({ kind: 'not-submitted' });
    expect(pane.sent.filter((s) => s === 'Enter')).toHaveLength(6);
    expect(pane.sent.filter((s) => s.startsWith('paste'))).toHaveLength(2);
  });

  it('a paste that never shows is deferred as not-shown, and Enter is not pressed', async () => {
    const pane = new FakeAgentPane();
    pane.dropPastes = 1;
    const submission = createVerifiedSubmission(pane, timing);
    expect(await submission.type(message)).toMatchObject({ kind: 'deferred', reason: 'not-shown' });
    expect(pane.sent).toEqual([`paste ${message.text}`]);
  });

  it('a message already in the input (a crash after the paste) is not typed again', async () => {
    const pane = new FakeAgentPane();
    pane.input = message.text;
    const submission = createVerifiedSubmission(pane, timing);
    expect(await submission.locate(message)).toBe('typed');
    expect(await submission.type(message)).toEqual({ kind: 'typed' });
    expect(await submission.submit(message)).toMatchObject({ kind: 'submitted' });
    expect(pane.sent).toEqual(['Enter']);
  });

  it('a message already in the transcript is not typed again', async () => {
    const pane = new FakeAgentPane();
    pane.transcript.push(`❯ ${message.text}`);
    const submission = createVerifiedSubmission(pane, timing);
    expect(await submission.type(message)).toMatchObject({ kind: 'submitted' });
    expect(await submission.locate(message)).toBe('submitted');
    expect(pane.sent).toEqual([]);
    expect(await submission.locate({ text: 'other', marker: 'msg 9999' })).toBe('absent');
  });
});

/**
 * Gemini CLI drops a message entered in the moment its own turn starts: the input clears and
 * nothing is sent. A cleared input is no proof there; the message in its transcript or its
 * queue is, and a message shown in neither is typed again, never twice.
 */
describe('verified submission into an agent whose cleared input is no proof (Gemini CLI)', () => {
  const uuid = '01a250c5-15ef-71e0-9d5b-9d1bf88ca153';
  const sent = { marker: uuid, text: `[bridge SEND from lead@host-597wnp msg ${uuid}] rebase onto main` };
  const gatewaySent = (pane: SimulatedPane) => pane.submitted.filter(({ by }) => by === 'gateway');

  it('a message the agent dropped is not submitted, and is typed again once', async () => {
    const pane = new SimulatedPane('gemini');
    pane.dropEnters = 1;
    const submission = createVerifiedSubmission(pane, timing);
    expect(await submission.type(sent)).toEqual({ kind: 'typed' });
    expect(await submission.submit(sent)).toMatchObject({
      kind: 'deferred',
      reason: 'not-shown',
      detail: expect.stringContaining('dropped'),
    });
    expect(await submission.locate(sent)).toBe('absent');
    expect(await submission.type(sent)).toEqual({ kind: 'typed' });
    expect(await submission.submit(sent)).toMatchObject({
      kind: 'submitted',
      how: expect.stringContaining('its transcript shows it'),
    });
    expect(gatewaySent(pane)).toEqual([{ by: 'gateway', text: sent.text }]);
  });

  it('a message whose turn opens a dialog at once: no Enter on the dialog, held, found once it is answered', async () => {
    const pane = new SimulatedPane('gemini');
    pane.dialogOnEnter = 'Allow execution of [Shell]?';
    const submission = createVerifiedSubmission(pane, timing);
    expect(await submission.type(sent)).toEqual({ kind: 'typed' });
    // With the dialog in its input's place, the last band on screen is the message's own.
    expect(await submission.submit(sent)).toMatchObject({ kind: 'deferred', reason: 'blocked' });
    expect(pane.gatewayEnters).toEqual([sent.text]);
    pane.dialog = undefined; // the owner answers it
    expect(await submission.type(sent)).toMatchObject({ kind: 'submitted', how: 'found in the transcript' });
    expect(gatewaySent(pane)).toHaveLength(1);
  });

  it('a message entered as a turn starts is proven by the queue it waits in', async () => {
    const pane = new SimulatedPane('gemini');
    const submission = createVerifiedSubmission(pane, timing);
    expect(await submission.type(sent)).toEqual({ kind: 'typed' });
    pane.busy = true; // the person's turn starts between the paste and the Enter
    expect(await submission.submit(sent)).toMatchObject({
      kind: 'submitted',
      how: expect.stringContaining('queued'),
    });
    expect(pane.queued).toEqual([sent.text]);
    // After a crash, found where it waits: not typed again.
    expect(await createVerifiedSubmission(pane, timing).type(sent)).toMatchObject({ kind: 'submitted' });
    expect(gatewaySent(pane)).toHaveLength(1);
  });

  it('a queue line cut before the marker proves nothing: held while the turn runs, found once it is sent', async () => {
    const pane = new SimulatedPane('gemini', 48);
    const submission = createVerifiedSubmission(pane, timing);
    expect(await submission.type(sent)).toEqual({ kind: 'typed' });
    pane.busy = true;
    expect(await submission.submit(sent)).toMatchObject({ kind: 'deferred', reason: 'not-shown' });
    expect(await submission.type(sent)).toMatchObject({ kind: 'deferred', reason: 'busy' });
    pane.finishTurn();
    expect(await submission.type(sent)).toMatchObject({ kind: 'submitted', how: 'found in the transcript' });
    expect(gatewaySent(pane)).toHaveLength(1);
    expect(pane.transcript).toEqual([sent.text]);
  });
});
