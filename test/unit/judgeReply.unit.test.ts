import { describe, expect, it } from 'vitest';
import { gatewayAddress } from '../../src/wire/gatewayAddress.js';
import { judgeReply } from '../../src/wire/judgeReply.js';

describe('a reply to a message one never received (judgeReply)', () => {
  const bob = { gid: 'gid-bob', name: 'bob', host: 'beta' };
  const mallory = { gid: 'gid-mallory', name: 'mallory', host: 'evil' };
  const toBob = { kind: 'SEND', recipient: bob.gid, recipientHost: 'beta' };
  const noRoster = () => undefined;

  it('lets the recipient of the message reply to it', () => {
    expect(judgeReply({ kind: 'REPLY', from: bob, inReplyTo: 'm-1' }, toBob, noRoster)).toBeUndefined();
  });

  it('refuses a reply naming a message that went to someone else, saying to whom', () => {
    const why = judgeReply({ kind: 'REPLY', from: mallory, inReplyTo: 'm-1' }, toBob, noRoster);
    expect(why).toMatch(/names message m-1, which was sent to gid-bob, not to mallory@evil/);
    expect(why).toMatch(/reply only to a message delivered/);
    // Any kind that names a message it answers: a SEND with in_reply_to resolves open sends too.
    expect(judgeReply({ kind: 'SEND', from: mallory, inReplyTo: 'm-1' }, toBob, noRoster)).toBeDefined();
  });

  it('passes what this host cannot check: no in_reply_to, or a message it did not send', () => {
    expect(judgeReply({ kind: 'REPLY', from: mallory }, toBob, noRoster)).toBeUndefined();
    expect(
      judgeReply({ kind: 'REPLY', from: mallory, inReplyTo: 'm-9' }, undefined, noRoster),
    ).toBeUndefined();
  });

  it('lets anyone in the audience answer a broadcast', () => {
    const broadcast = { kind: 'BROADCAST', recipient: 'broadcast.all' };
    expect(
      judgeReply({ kind: 'REPLY', from: mallory, inReplyTo: 'm-1' }, broadcast, noRoster),
    ).toBeUndefined();
  });

  it("takes a gateway's own notice only from the host the message went to", () => {
    const notice = (host: string) => ({ kind: 'TOO_LATE', from: gatewayAddress(host), inReplyTo: 'm-1' });
    expect(judgeReply(notice('beta'), toBob, noRoster)).toBeUndefined();
    expect(judgeReply(notice('evil'), toBob, noRoster)).toMatch(/went to beta, not to evil/);
    // A SPAWN went to a host: its SPAWN_RESULT comes from that host's gateway.
    const spawn = { kind: 'SPAWN', recipient: 'beta' };
    expect(judgeReply({ ...notice('beta'), kind: 'SPAWN_RESULT' }, spawn, noRoster)).toBeUndefined();
    // A send by bare gid did not know the host: the roster places the recipient.
    const byGid = { kind: 'ANSWER', recipient: bob.gid };
    expect(judgeReply(notice('beta'), byGid, () => 'beta')).toBeUndefined();
    expect(judgeReply(notice('evil'), byGid, () => 'beta')).toBeDefined();
  });
});
