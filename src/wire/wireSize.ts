/**
 * The one size rule every arrival from the broker passes before anything reads it (R-H8):
 * bytes beyond `maxBytes` are neither verified, parsed nor logged. Returns why they are
 * refused, or undefined. `limitKey` names the config key that sets the limit.
 */
export function oversized(bytes: Buffer, maxBytes: number, limitKey: string): string | undefined {
  if (bytes.length <= maxBytes) return undefined;
  return `${bytes.length} bytes; this gateway reads at most ${maxBytes} (${limitKey})`;
}

/** Most characters of someone else's words (a parse error, a list of schema issues) put in one log line. */
export const maxDetailChars = 500;

/** `detail` cut to `maxDetailChars`, saying how much was left out: a refusal's log line stays short. */
export function boundedDetail(detail: string): string {
  if (detail.length <= maxDetailChars) return detail;
  return `${detail.slice(0, maxDetailChars)}… (${detail.length - maxDetailChars} more characters)`;
}
