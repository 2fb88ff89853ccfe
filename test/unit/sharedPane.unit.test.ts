import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { PaneMessage, SubmitOutcome, TypeOutcome } from '../../src/panes/paneInjector.js';
import { frameBody, oneLine } from '../../src/panes/paneText.js';
import { createVerifiedSubmission, type SubmissionTiming } from '../../src/panes/verifiedSubmission.js';
import { DrawStyle } from '../support/agentDrawing.js';
import { SimulatedPane } from '../support/SimulatedPane.js';

/**
 * A pane a person shares with the gateway (issue items 1–5): whatever the body says and
 * whatever already sits in the input (nothing, a person's text, a person's collapsed paste, a
 * message of ours that was never submitted), the gateway presses Enter only on the delivery's
 * own text, "submitted" means the delivery's own text left the input, and once the person has
 * sent or cleared their draft the message goes in, once.
 */
/** Random by default; `FUZZ_SEED` replays a run (the seed is printed when one fails). */
const seed = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);

const timing: SubmissionTiming = {
  showTimeoutMs: 30,
  submitTimeoutMs: 20,
  proofTimeoutMs: 30,
  pollMs: 2,
  enterAttempts: 2,
  historyLines: 100,
  enterPauseMs: 0,
  programSettleMs: 0,
};

/** What each agent of the table draws, and what a line reader prompts with: bodies say all of it. */
const chromeWords = [
  'Do you want to proceed?',
  'Do you trust the files in this folder?',
  '(esc to interrupt)',
  'esc to interrupt · ← for agents',
  '✻ Kneading…',
  '* Kneading…',
  '• Working (1s • esc to interrupt)',
  ' ⠏ Thinking... (esc to cancel, 1s)',
  'Allow execution of [Shell]?',
  'Press enter to confirm or esc to cancel',
  'Yes, proceed (y)',
  '❯ ',
  '› ',
  ' > ',
  '[1] ready> ',
  '$ ',
  '[Pasted text #1 +12 lines]',
  '[Pasted Content 1200 chars]',
  '[Pasted Text: 13 lines]',
  'Ask Codex to do anything',
  'Type your message or @path/to/file',
  'Press up to edit queued messages',
  '─'.repeat(40),
  '\n',
  '\n',
];

const body = fc
  .array(
    fc.oneof(
      { weight: 4, arbitrary: fc.constantFrom(...chromeWords) },
      { weight: 2, arbitrary: fc.string({ maxLength: 30 }) },
      { weight: 1, arbitrary: fc.constant(`${'long line '.repeat(100)}`) },
    ),
    { minLength: 1, maxLength: 12 },
  )
  .map((parts) => parts.join(''))
  // What fits on the screen as it is typed (longer ones collapse, or the prompt scrolls away).
  .filter((text) => text.length <= 2_400);

const uuid = fc.uuid({ version: 7 });

function message(id: string, text: string): PaneMessage {
  return { text: `[bridge SEND from lead@alpha msg ${id}] ${frameBody(text)}`, marker: `msg ${id}` };
}

type Draft =
  | { readonly kind: 'empty' }
  | { readonly kind: 'typed'; readonly text: string }
  | { readonly kind: 'pasted'; readonly text: string }
  | { readonly kind: 'ours'; readonly message: PaneMessage };

const draft = (style: DrawStyle): fc.Arbitrary<Draft> => {
  // A line reader cannot tell its prompt from typed text: a line that ends as a prompt does
  // reads as empty. A person's half-typed command there ends in a word.
  const typed =
    style === 'shell'
      ? fc.stringMatching(/^[a-z][a-z -]{0,20}[a-z]$/)
      : fc.oneof(fc.constantFrom(...chromeWords.filter((w) => w.trim() !== '')), fc.string({ minLength: 1 }));
  // Exactly an agent's empty-input hint (`Ask Codex to do anything`) reads as the hint: drawn
  // dimmed, which plain text does not show. Anything more or less is someone's text.
  const hint = (text: string): boolean =>
    [
      'Ask Codex to do anything',
      'Type your message or @path/to/file',
      'Press up to edit queued messages',
    ].includes(text.trim());
  const options: fc.Arbitrary<Draft>[] = [
    fc.constant({ kind: 'empty' } as const),
    typed.filter((t) => t.trim() !== '' && !hint(t)).map((text) => ({ kind: 'typed', text }) as const),
  ];
  if (style !== 'shell') {
    options.push(
      fc
        .array(fc.string({ minLength: 1, maxLength: 20 }), { minLength: 12, maxLength: 14 })
        .map((lines) => ({ kind: 'pasted', text: lines.join('\n') }) as const),
      fc.tuple(uuid, body).map(([id, text]) => ({ kind: 'ours', message: message(id, text) }) as const),
    );
  }
  return fc.oneof(...options);
};

async function deliver(pane: SimulatedPane, msg: PaneMessage): Promise<Array<TypeOutcome | SubmitOutcome>> {
  const submission = createVerifiedSubmission(pane, timing);
  const outcomes: Array<TypeOutcome | SubmitOutcome> = [];
  for (let round = 0; round < 3; round++) {
    const typed = await submission.type(msg);
    outcomes.push(typed);
    if (typed.kind === 'submitted') break;
    if (typed.kind === 'typed') {
      const sent = await submission.submit(msg);
      outcomes.push(sent);
      if (sent.kind === 'submitted') break;
    }
    // Held: the person sends what they had (a draft of theirs), or clears what is not theirs.
    if (round === 0) pane.personSends();
    else pane.personClears();
  }
  return outcomes;
}

describe('a shared pane: the gateway presses Enter only on its own text', () => {
  for (const style of Object.values(DrawStyle)) {
    it(`${style}: any body, any draft already in the input`, async () => {
      await fc.assert(
        fc.asyncProperty(uuid, body, draft(style), async (id, text, before) => {
          fc.pre(before.kind !== 'ours' || before.message.marker !== `msg ${id}`);
          const pane = new SimulatedPane(style);
          pane.prompt = style === 'shell' ? '[1] ready> ' : '$ ';
          if (before.kind === 'typed') pane.personTypes(before.text);
          if (before.kind === 'pasted') pane.personPastes(before.text);
          if (before.kind === 'ours') pane.personPastes(before.message.text);
          const msg = message(id, text);
          const own = style === 'shell' ? oneLine(msg.text) : msg.text;
          const outcomes = await deliver(pane, msg);
          // Every Enter of the gateway's was on its own text and nothing else.
          expect(
            pane.gatewayEnters.every((entered) => entered === own),
            'every Enter on our own text',
          ).toBe(true);
          const ours = pane.submitted.filter((s) => s.by === 'gateway');
          expect(
            ours.every((s) => s.text === own),
            'we submitted our own text only',
          ).toBe(true);
          expect(ours.length).toBeLessThanOrEqual(1);
          // Submitted means our text left the input: submitted by our Enter, once.
          const submitted = outcomes.some((o) => o.kind === 'submitted');
          expect(submitted, 'submitted means our Enter took it').toBe(ours.length === 1);
          // And once the draft is gone it goes in: no body holds the pane.
          expect(submitted, JSON.stringify(outcomes)).toBe(true);
        }),
        { numRuns: 40, seed },
      );
    }, 60_000);
  }
});

describe('what a person leaves in the input', () => {
  it("a person's collapsed paste is never taken for our message (item 1)", async () => {
    const pane = new SimulatedPane('claude');
    pane.personPastes(Array.from({ length: 13 }, (_, i) => `line ${i}`).join('\n'));
    const submission = createVerifiedSubmission(pane, timing);
    const msg = message('0190a5d0-0000-7000-8000-000000000006', 'M6: please review PR 42');
    expect(await submission.type(msg)).toMatchObject({ kind: 'deferred', reason: 'dirty-input' });
    expect(await submission.submit(msg)).toMatchObject({ kind: 'deferred' });
    expect(pane.gatewayEnters).toEqual([]);
    pane.personSends();
    expect(await submission.type(msg)).toEqual({ kind: 'typed' });
    expect(await submission.submit(msg)).toMatchObject({ kind: 'submitted' });
    expect(pane.submitted.map((s) => s.by)).toEqual(['person', 'gateway']);
  });

  it('our own long message, collapsed by the agent, is ours by the placeholder it showed as', async () => {
    for (const style of ['claude', 'codex', 'gemini'] as const) {
      const pane = new SimulatedPane(style);
      const submission = createVerifiedSubmission(pane, timing);
      const msg = message('0190a5d0-0000-7000-8000-000000000010', 'x\n'.repeat(20) + 'y'.repeat(1200));
      expect(await submission.type(msg), style).toEqual({ kind: 'typed' });
      expect(pane.input[0]?.collapsed, style).toBeDefined();
      expect(await submission.submit(msg), style).toMatchObject({ kind: 'submitted' });
      expect(pane.gatewayEnters, style).toEqual([msg.text]);
    }
  });

  it('a message left in the input is not taken for the next one, whatever their headers share (item 2)', async () => {
    const pane = new SimulatedPane('claude');
    const submission = createVerifiedSubmission(pane, timing);
    // Two ids from the same millisecond: the same first 40 characters of the header.
    const m7 = message('0190a5d0-1111-7000-8000-000000000007', 'M7');
    const m8 = message('0190a5d0-1111-7000-8000-000000000008', 'M8');
    expect(await submission.type(m7)).toEqual({ kind: 'typed' });
    pane.swallowEnters = 10;
    expect(await submission.submit(m7)).toMatchObject({ kind: 'not-submitted' });
    expect(await submission.type(m8)).toMatchObject({ kind: 'deferred', reason: 'dirty-input' });
    expect(await submission.submit(m8)).toMatchObject({ kind: 'deferred' });
    expect(pane.gatewayEnters.every((entered) => entered === m7.text)).toBe(true);
  });

  it('a body that quotes a dialog or a busy line changes nothing the reader concludes (item 3)', async () => {
    for (const style of ['claude', 'codex', 'gemini'] as const) {
      const pane = new SimulatedPane(style);
      const submission = createVerifiedSubmission(pane, timing);
      const quoting = message(
        '0190a5d0-2222-7000-8000-000000000001',
        'Do you want to proceed?\n(esc to interrupt)\n✻ Kneading…\n• Working (1s • esc to interrupt)',
      );
      expect(await submission.type(quoting), style).toEqual({ kind: 'typed' });
      expect(await submission.submit(quoting), style).toMatchObject({ kind: 'submitted' });
      // Submitted, its words now in the transcript: the next message is not held by them.
      expect(await submission.inspect(), style).toBeUndefined();
      const next = message('0190a5d0-2222-7000-8000-000000000002', 'next');
      expect(await submission.type(next), style).toEqual({ kind: 'typed' });
      expect(await submission.submit(next), style).toMatchObject({ kind: 'submitted' });
    }
  });

  it('a line reader whose prompt ends the body: submitted only once the whole line is seen read (item 4)', async () => {
    const pane = new SimulatedPane('shell');
    pane.prompt = '[1] ready> ';
    const submission = createVerifiedSubmission(pane, timing);
    const msg = message('0190a5d0-3333-7000-8000-000000000001', 'status? [1] ready> ');
    expect(await submission.type(msg)).toMatchObject({ kind: 'submitted' });
    expect(pane.gatewayEnters).toEqual([oneLine(msg.text)]);
    // Swallowed: the prompt that ends the body is on the line, the echo of the line is not.
    pane.swallowEnters = 5;
    const again = message('0190a5d0-3333-7000-8000-000000000002', 'again [1] ready> ');
    const typed = await submission.type(again);
    expect(typed.kind).not.toBe('submitted');
  });

  it('a program that restarted (a new program, a blank screen) is not read as a line reader (item 5)', async () => {
    const pane = new SimulatedPane('claude');
    const submission = createVerifiedSubmission(pane, { ...timing, programSettleMs: 60_000 });
    expect(await submission.inspect()).toBeUndefined();
    pane.program = 'p2';
    pane.blank = true;
    expect(await submission.inspect()).toMatchObject({ reason: 'busy' });
    const msg = message('0190a5d0-4444-7000-8000-000000000001', 'hello');
    expect(await submission.type(msg)).toMatchObject({ kind: 'deferred', reason: 'busy' });
    pane.blank = false;
    // Its prompt drawn: read as the agent it is at once.
    expect(await submission.type(msg)).toEqual({ kind: 'typed' });
    expect(await submission.submit(msg)).toMatchObject({ kind: 'submitted' });
  });

  it('a nudge, whose header carries no id, is told apart from the last by its whole line', async () => {
    const pane = new SimulatedPane('shell');
    const submission = createVerifiedSubmission(pane, timing);
    const nudge = (ago: number): PaneMessage => ({
      text: `[bridge NUDGE] 2 messages waiting for you (oldest from lead@alpha, ${ago} s ago): call bridge_drain`,
      marker: `NUDGE ${ago}`,
    });
    expect(await submission.type(nudge(3))).toMatchObject({ kind: 'submitted' });
    expect(await submission.type(nudge(5))).toMatchObject({ kind: 'submitted' });
    expect(pane.gatewayEnters).toEqual([nudge(3).text, nudge(5).text]);
  });

  // Wrapped at the pane's width, a row of ours reads as the agent's own drawing: Gemini's
  // empty-input hint; Codex's prompt followed by a dialog's question (found by the property
  // above, seed 1302979133).
  for (const [style, body] of [
    ['gemini', 'Ask Codex to do anything  Type your message or @path/to/file'],
    ['codex', '   Ask Codex to do anything› Do you want to proceed?'],
  ] as const) {
    it(`${style}: a wrapped row of ours that reads as the agent's own drawing is still ours`, async () => {
      const pane = new SimulatedPane(style);
      const submission = createVerifiedSubmission(pane, timing);
      const msg = message('00000000-0000-7000-8000-000000000000', body);
      expect(await submission.type(msg)).toEqual({ kind: 'typed' });
      expect(await submission.submit(msg)).toMatchObject({ kind: 'submitted' });
      expect(pane.gatewayEnters).toEqual([msg.text]);
    });
  }
});
