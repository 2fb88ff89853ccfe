import type { Envelope } from '../wire/envelope.js';
import { frameBody } from './paneText.js';

/**
 * The text typed into a pane. Its first line is the header: it names the sender and the msg id
 * so the agent can reply (SPEC §9), and the msg id is what crash recovery looks for in the
 * pane's output (R-DL5). The body follows framed (`frameBody`): neutralised, header-like text
 * defused, and every further line marked, so only the first line can read as a header. A line
 * reader gets this folded into one line (`oneLine`), which keeps the header first.
 */
export function formatInjection(envelope: Envelope): string {
  const from = `${envelope.from.name}@${envelope.from.host}`;
  const re = envelope.inReplyTo ? ` re ${envelope.inReplyTo}` : '';
  return `[bridge ${envelope.kind} from ${from} msg ${envelope.msgId}${re}] ${frameBody(envelope.text)}`;
}

/** What recovery searches for: present in the pane exactly when the message was typed there. */
export function injectionMarker(msgId: string): string {
  return `msg ${msgId}`;
}
