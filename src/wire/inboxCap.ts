import { WireKind } from './envelope.js';

/**
 * One entity's inbox on its own gateway: the messages accepted for it and not yet finished
 * (pending, typed, waiting for its pane, held, handed over), and their text bytes. The local
 * store keeps their bodies, so this is what a main that never drains costs its gateway.
 */
export interface InboxLoad {
  readonly count: number;
  readonly bytes: number;
}

/** The caps of every inbox (R-H1): `broker.inboxMaxLength` messages, `limits.inboxMaxBytes` bytes. */
export interface InboxCap {
  readonly maxLength: number;
  readonly maxBytes: number;
}

/**
 * Why one more message of `size` bytes does not fit an inbox with `load`, or undefined if it
 * does. A same-host sender gets this as INBOX_FULL, as a cross-host sender gets the broker's
 * refusal of a full queue.
 */
export function inboxRefusal(load: InboxLoad, cap: InboxCap, size: number): string | undefined {
  if (load.count + 1 > cap.maxLength) {
    return `it holds ${load.count} undelivered messages (broker.inboxMaxLength is ${cap.maxLength})`;
  }
  if (load.bytes + size > cap.maxBytes) {
    return `its undelivered messages hold ${load.bytes} bytes and this one ${size} (limits.inboxMaxBytes is ${cap.maxBytes})`;
  }
  return undefined;
}

/**
 * How many messages the broker may have on their way to the gateway for one inbox: the
 * prefetch, but never more than one sender's share of the inbox (`share` of its count). The
 * inbox then pauses (brokerMayDeliver) only once it holds more than a share could fill, so one
 * sender past its share is dead-lettered here as its copies arrive, and cannot leave the
 * broker's queue full of them for everyone else.
 */
export function inboxPrefetch(prefetch: number, cap: InboxCap, share: number): number {
  return Math.max(1, Math.min(prefetch, Math.floor(cap.maxLength * Math.min(1, share))));
}

/**
 * Whether the broker should deliver from an entity's queue now. The gateway acks what it has
 * stored, so the broker's prefetch no longer bounds what piles up here: it stops delivering
 * while the inbox could not take every message that may already be on its way (`inFlight`),
 * and starts again only once it is down to half, so a full inbox does not switch on and off
 * per message. What is not delivered waits on the broker, under the queue's own cap.
 */
export function brokerMayDeliver(
  load: InboxLoad,
  cap: InboxCap,
  inFlight: number,
  deliveringNow: boolean,
): boolean {
  const limit = Math.max(1, cap.maxLength - inFlight);
  if (deliveringNow) return load.count < limit && load.bytes < cap.maxBytes;
  return load.count < Math.min(limit, Math.ceil(cap.maxLength / 2)) && load.bytes < cap.maxBytes / 2;
}

/**
 * Whether a broker inbox that nacked a publish is full: it holds at least its cap (`depth` is
 * what the broker reads it to hold, undefined when it does not answer). A quorum inbox nacks at
 * its cap (reject-publish), but a cluster that lost nodes nacks quorum-queue publishes too,
 * whatever the queue holds, and reads a queue whose leader it cannot reach as 0. A consumer
 * that took a message between the nack and the read makes a full inbox read as not full: the
 * sender is then told to retry, and nothing is dead-lettered for a message the broker may take.
 */
export function brokerInboxFull(depth: number | undefined, maxLength: number): boolean {
  return depth !== undefined && depth >= maxLength;
}

/** Kinds that take room in an inbox: what an entity's senders write. */
const roomKinds: ReadonlySet<string> = new Set([
  WireKind.send,
  WireKind.reply,
  WireKind.ask,
  WireKind.broadcast,
]);

/**
 * Whether a message of `kind` counts against the caps. What the gateway writes (SPAWN_RESULT,
 * TOO_LATE) and answers (handed to the parked turn, never held) take no room an entity's
 * senders could fill.
 */
export function takesRoom(kind: string): boolean {
  return roomKinds.has(kind);
}

/**
 * Why one more message of `size` bytes from a sender whose undelivered messages in an inbox
 * are `mine` is past that sender's share of the inbox (`share` of each cap), or undefined.
 * No one sender can then fill an inbox, nor every inbox with broadcasts (R-H8); a share of 1
 * leaves the inbox caps alone.
 */
export function senderShareRefusal(
  mine: InboxLoad,
  cap: InboxCap,
  share: number,
  size: number,
): string | undefined {
  if (share >= 1) return undefined;
  const most = Math.max(1, Math.floor(cap.maxLength * share));
  if (mine.count + 1 > most) {
    return (
      `it holds ${mine.count} of your undelivered messages, your whole share of it ` +
      `(limits.senderInboxShare ${share} of broker.inboxMaxLength ${cap.maxLength})`
    );
  }
  const mostBytes = Math.floor(cap.maxBytes * share);
  if (mine.bytes + size > mostBytes) {
    return (
      `your undelivered messages in it hold ${mine.bytes} bytes and this one ${size}, past your share ` +
      `(limits.senderInboxShare ${share} of limits.inboxMaxBytes ${cap.maxBytes})`
    );
  }
  return undefined;
}
