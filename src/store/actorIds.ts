/**
 * Actor ids that carry more than one key. Built and parsed here only, so that the format is
 * written once: the gateway reads the message id back out of a delivery's id at start, and tests
 * select their own deliveries by it.
 */

/** A delivery's id: one message to one recipient (a broadcast has one per recipient). */
export function deliveryActorId(msgId: string, recipient: string): string {
  return `${msgId}/${recipient}`;
}

/** The message id and recipient of a delivery's id, or undefined for an id of another shape. */
export function parseDeliveryActorId(id: string): { msgId: string; recipient: string } | undefined {
  const at = id.indexOf('/');
  if (at <= 0 || at === id.length - 1) return undefined;
  return { msgId: id.slice(0, at), recipient: id.slice(at + 1) };
}

/** An entity's reminder actor: one per entity. */
export function remindActorId(gid: string): string {
  return `remind/${gid}`;
}

/** A broker connection's actor: one per gateway run, named after the host and the run's start. */
export function brokerActorId(hostId: string, startStamp: string): string {
  return `${hostId}/${startStamp}`;
}
