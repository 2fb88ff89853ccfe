import { WireKind } from './envelope.js';
import { gatewayAddress } from './gatewayAddress.js';

/** What the receiving gateway knows of a message it sent, when a reply names it. */
export interface RepliedMessage {
  readonly kind: string;
  /** The gid it went to (a routing key for a broadcast, a host for a SPAWN or STOP). */
  readonly recipient: string;
  /** The recipient's host, when the send knew it. */
  readonly recipientHost?: string | undefined;
}

/**
 * Why an arriving message may not name `inReplyTo` as the message it answers, or undefined
 * when it may. A reply may name only a message delivered to its sender. Only the host that
 * sent the named message can tell (`replied`); without it the message passes: its sender's
 * gateway checked that the message was delivered to the sender before it sent the reply.
 * Anyone in a broadcast's audience may answer it; a gateway's own notices (TOO_LATE,
 * SPAWN_RESULT) must come from the host the named message went to.
 */
export function judgeReply(
  reply: {
    readonly kind: string;
    readonly from: { readonly gid: string; readonly name: string; readonly host: string };
    readonly inReplyTo?: string | undefined;
  },
  replied: RepliedMessage | undefined,
  rosterHostOf: (gid: string) => string | undefined,
): string | undefined {
  const { inReplyTo, from } = reply;
  if (inReplyTo === undefined || replied === undefined) return undefined;
  if (replied.kind === WireKind.broadcast) return undefined;
  const sender = `${from.name}@${from.host}`;
  if (from.gid === gatewayAddress(from.host).gid) {
    const wentTo = replied.recipientHost ?? rosterHostOf(replied.recipient) ?? replied.recipient;
    if (wentTo === from.host) return undefined;
    return `a ${reply.kind} from the gateway of ${from.host} names message ${inReplyTo}, which went to ${wentTo}, not to ${from.host}`;
  }
  if (from.gid === replied.recipient) return undefined;
  return (
    `a ${reply.kind} from ${sender} (${from.gid}) names message ${inReplyTo}, which was sent to ` +
    `${replied.recipient}, not to ${sender}: one can reply only to a message delivered to one`
  );
}
