import { describe, expect, it } from 'vitest';
import {
  type AnswerArrival,
  judgeAnswer,
  judgeAnswerSend,
  type TurnView,
} from '../../src/machines/judgeAnswer.js';

const arrival: AnswerArrival = { turnId: 't1', recipient: 'asker', answerer: 'worker' };
const waiting: TurnView = {
  known: 'live',
  state: 'waiting',
  asker: 'asker',
  recipient: 'worker',
  callerAttached: true,
};

describe('judgeAnswer: resumes the turn or is too late (U2)', () => {
  it('resumes a waiting turn whose caller is attached, asked of this answerer', () => {
    expect(judgeAnswer(arrival, waiting)).toEqual({ verdict: 'resume' });
  });

  it.each<[string, AnswerArrival, TurnView, string]>([
    ['names no turn', { ...arrival, turnId: undefined }, waiting, 'the answer names no turn'],
    ['names a turn this gateway never had', arrival, { known: 'none' }, 'no ask of this gateway has turn t1'],
    [
      'comes after the turn ended',
      arrival,
      { known: 'ended', state: 'expired' },
      'the ask was already expired',
    ],
    [
      'comes from another entity',
      { ...arrival, answerer: 'intruder' },
      waiting,
      'the answer does not come from the entity that was asked',
    ],
    [
      'is for another asker',
      { ...arrival, recipient: 'someone' },
      waiting,
      'the answer does not come from the entity that was asked',
    ],
    ['comes as the turn ends', arrival, { ...waiting, state: 'abandoned' }, 'the ask was already abandoned'],
  ])('an answer that %s is too late', (_, answer, turn, why) => {
    expect(judgeAnswer(answer, turn)).toEqual({ verdict: 'too-late', why });
  });

  it('an answer whose caller is gone ends the waiting turn as well', () => {
    expect(judgeAnswer(arrival, { ...waiting, callerAttached: false })).toEqual({
      verdict: 'too-late',
      why: 'the asking call was gone when the answer came',
      abandon: 'the caller was gone (its gateway restarted) when the answer came',
    });
  });
});

describe('judgeAnswerSend: an answer to an expired ask is not sent', () => {
  it('sends up to the deadline, and is too late after it', () => {
    expect(judgeAnswerSend({ deadline: 5_000 }, 4_999)).toEqual({ verdict: 'send' });
    expect(judgeAnswerSend({ deadline: 5_000 }, 5_000)).toEqual({ verdict: 'send' });
    expect(judgeAnswerSend({ deadline: 5_000 }, 5_001)).toEqual({ verdict: 'too-late', expiredAt: 5_000 });
  });
});
