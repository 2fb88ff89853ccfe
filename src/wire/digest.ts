import { createHash } from 'node:crypto';

/** The digest the event log keeps instead of a body (R-H2). */
export function digestText(text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 32);
}

export function byteLength(text: string): number {
  return Buffer.byteLength(text, 'utf8');
}
