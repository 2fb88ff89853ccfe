import type { Envelope } from './envelope.js';

export interface SenderCheck {
  envelope: Envelope;
  /** The host that signed it. */
  signer: string;
  signingRequired: boolean;
  /** Whether the roster places entity `gid` on `host` now (invariant 6). */
  livesOn(gid: string, host: string): boolean;
  now: number;
  /** The end of this arrival's grace, once one was granted. */
  graceUntil: number | undefined;
  /** security.unknownSenderGraceMs */
  graceMs: number;
}

export type SenderJudgement =
  | { verdict: 'deliver' }
  /** The roster may not have the sender yet (it just registered): ask again until `until`. */
  | { verdict: 'wait'; until: number }
  | { verdict: 'refused'; reason: 'unknown-sender'; detail: string };

/** The roster check after admission: the sender lives on the host that signed it. Pure. */
export function judgeSender(check: SenderCheck): SenderJudgement {
  const { envelope, signer } = check;
  if (!check.signingRequired || check.livesOn(envelope.from.gid, signer)) return { verdict: 'deliver' };
  const deadline = check.graceUntil ?? check.now + check.graceMs;
  if (check.now < deadline) return { verdict: 'wait', until: deadline };
  const who = `${envelope.from.name} (${envelope.from.gid})`;
  return { verdict: 'refused', reason: 'unknown-sender', detail: `${who} is not in ${signer}'s roster` };
}
