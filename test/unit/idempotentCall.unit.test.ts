import { describe, expect, it } from 'vitest';
import { idempotentCall, judgeRepeat } from '../../src/wire/idempotentCall.js';

describe('an idempotency key reused for another call (judgeRepeat)', () => {
  const lead = 'gid-lead';
  const catty = 'gid-catty';
  const first = idempotentCall('SEND', lead, { text: 'first' });
  const record = { msgId: 'm-1', call: first };

  it('a key no call used is new', () => {
    expect(judgeRepeat(undefined, first)).toEqual({ kind: 'new' });
  });

  it('the same call again is a repeat with the first msgId', () => {
    expect(judgeRepeat(record, idempotentCall('SEND', lead, { text: 'first' }))).toEqual({
      kind: 'repeat',
      msgId: 'm-1',
    });
  });

  it('another recipient, text or tool is a conflict that names the first call', () => {
    expect(judgeRepeat(record, idempotentCall('SEND', catty, { text: 'first' }))).toEqual({
      kind: 'conflict',
      msgId: 'm-1',
      first,
      differs: 'recipient',
    });
    expect(judgeRepeat(record, idempotentCall('SEND', lead, { text: 'second' }))).toMatchObject({
      kind: 'conflict',
      differs: 'content',
    });
    expect(judgeRepeat(record, idempotentCall('ASK', lead, { text: 'first' }))).toMatchObject({
      kind: 'conflict',
      differs: 'kind',
    });
    const reply = idempotentCall('REPLY', lead, { text: 'ok', inReplyTo: 'm-a' });
    expect(
      judgeRepeat(
        { msgId: 'm-2', call: reply },
        idempotentCall('REPLY', lead, { text: 'ok', inReplyTo: 'm-b' }),
      ),
    ).toMatchObject({ kind: 'conflict', differs: 'content' });
  });

  it('a row written before calls were recorded counts as a repeat, as it did', () => {
    expect(judgeRepeat({ msgId: 'm-old' }, idempotentCall('SEND', catty, { text: 'anything' }))).toEqual({
      kind: 'repeat',
      msgId: 'm-old',
    });
  });

  it('the digest depends on the content, not on the order of its fields or absent ones', () => {
    const a = idempotentCall('SPAWN', 'beta', { profile: 'p', brief: 'review PR 7', name: undefined });
    const b = idempotentCall('SPAWN', 'beta', { brief: 'review PR 7', profile: 'p' });
    expect(a).toEqual(b);
    expect(a.digest).toMatch(/^[0-9a-f]{32}$/);
    expect(idempotentCall('SPAWN', 'beta', { brief: 'review PR 7', profile: 'q' }).digest).not.toBe(a.digest);
  });
});
