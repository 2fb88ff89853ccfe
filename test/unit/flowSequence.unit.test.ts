import { describe, expect, it } from 'vitest';
import { FlowSequence } from '../../src/replay/FlowSequence.js';
import type { ReplayEvent } from '../../src/replay/replayEvent.js';

const msgA = '01a2aaaa-0000-7000-8000-000000000001';
const msgB = '01a2bbbb-0000-7000-8000-000000000002';
let seq = 0;
const event = (
  host: string,
  actorKind: string,
  msgId: string,
  data: Record<string, unknown>,
): ReplayEvent => ({
  seq: ++seq,
  hlc: `${String(1_000_000 + seq).padStart(15, '0')}.000000`,
  host,
  actorKind,
  actorId: `${actorKind}-${msgId}`,
  traceId: 'trace',
  msgId,
  event: 'xstate.init',
  fromState: null,
  toState: actorKind === 'send' ? 'composed' : 'pending',
  data,
});

/** A flow's sequence diagram (console, `replay --mermaid`), from one host's export or both. */
describe('FlowSequence', () => {
  it("draws a message from the other host's column when only this host's export is loaded", () => {
    const flow = new FlowSequence();
    // alpha's export alone: its SEND to beta, and beta's REPLY delivered on alpha.
    flow.add(event('alpha', 'send', msgA, { kind: 'SEND' }));
    flow.add(event('alpha', 'delivery', msgB, { kind: 'REPLY', senderHost: 'beta' }));
    const { hosts, steps } = flow.result();
    expect(hosts).toEqual(['beta', 'alpha']);
    expect(steps.filter((s) => s.kind === 'message')).toEqual([
      { kind: 'message', from: 'beta', to: 'alpha', label: expect.stringMatching(/^REPLY /) },
    ]);
  });

  it("with both exports, the sender's send gives the column; a delivery recorded before senderHost stays on its own", () => {
    const both = new FlowSequence();
    both.add(event('beta', 'send', msgB, { kind: 'REPLY' }));
    both.add(event('alpha', 'delivery', msgB, { kind: 'REPLY', senderHost: 'beta' }));
    expect(both.result().steps[1]).toMatchObject({ kind: 'message', from: 'beta', to: 'alpha' });
    expect(both.result().hosts).toEqual(['beta', 'alpha']);

    const older = new FlowSequence();
    older.add(event('alpha', 'delivery', msgB, { kind: 'REPLY' }));
    expect(older.result().steps[0]).toMatchObject({ kind: 'message', from: 'alpha', to: 'alpha' });
  });
});
