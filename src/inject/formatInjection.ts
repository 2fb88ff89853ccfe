import type { Envelope } from '../wire/envelope.js';

/**
 * The line typed into a pane. It names the sender and the msg id so the agent can reply
 * (SPEC §9), and the msg id is what crash recovery looks for in the pane's output (R-DL5).
 */
export function formatInjection(envelope: Envelope): string {
  const from = `${envelope.from.name}@${envelope.from.host}`;
  const re = envelope.inReplyTo ? ` re ${envelope.inReplyTo}` : '';
  return `[bridge ${envelope.kind} from ${from} msg ${envelope.msgId}${re}] ${envelope.text}`;
}

/** What recovery searches for: present in the pane exactly when the message was typed there. */
export function injectionMarker(msgId: string): string {
  return `msg ${msgId}`;
}
