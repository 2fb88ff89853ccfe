import { DeadLetterReason } from './deadLetterReason.js';
import { SignatureHeader } from './signatureHeaders.js';

/** Headers the gateway writes on what it publishes. */
export const BridgeHeader = {
  /** The publishing gateway. */
  host: 'x-bridge-host',
  trace: 'x-bridge-trace',
} as const;

/** Headers a dead letter carries into `bridge.dlq`. */
export const DeadLetterHeader = {
  reason: 'x-bridge-reason',
  detail: 'x-bridge-detail',
  queue: 'x-bridge-queue',
  routingKey: 'x-bridge-routing-key',
  /** The gateway that dead-lettered it, under the same header as on any publish. */
  host: BridgeHeader.host,
  at: 'x-bridge-at',
} as const;

/** A dead letter as `agentbridge dlq` shows it. */
export interface DeadLetterView {
  msgId: string | undefined;
  reason: string;
  detail: string;
  queue: string;
  routingKey: string;
  host: string;
  at: string;
  body: string;
  /**
   * A letter whose text is sealed (issue 34): to whom, and whether this gateway opened it (then
   * `body` is the message with its text) or why not (then `body` holds no text).
   */
  sealed?: { to: string[]; opened: boolean; why?: string } | undefined;
}

/** A sealed letter as this gateway reads it: its body with the text if it opened, and how it went. */
export interface OpenedLetter {
  body: string;
  sealed: NonNullable<DeadLetterView['sealed']>;
}

/** What `agentbridge dlq requeue` did: how many went back, and how many it left, by reason. */
export interface RequeueResult {
  requeued: number;
  skipped: Record<string, number>;
}

/**
 * Reasons a letter was refused on arrival for what it is (its signature, its sealing, its content
 * or its address), not for the moment it came: sent back unchanged, it is refused and dead-lettered
 * again. Others (maxlen, expired, recipient-gone, …) may well get through on a second try.
 */
export const refusedOnArrival: ReadonlySet<string> = new Set<string>([
  DeadLetterReason.badSignature,
  DeadLetterReason.rejected,
  DeadLetterReason.unsealed,
  DeadLetterReason.notSealedToThisHost,
  DeadLetterReason.tampered,
]);

/** Whether a requeue sends back a letter dead for `reason` (`force` sends back any). */
export function mayRequeue(reason: string, force: boolean): boolean {
  return force || !refusedOnArrival.has(reason);
}

/** The signature headers of an original, which travel along so a requeued copy still verifies. */
export function signatureHeadersOf(headers: Record<string, unknown> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const key of [SignatureHeader.signature, SignatureHeader.signer]) {
    const value = headers?.[key];
    if (typeof value === 'string') out[key] = value;
  }
  return out;
}

function firstDeath(headers: Record<string, unknown>): Record<string, unknown> | undefined {
  const deaths = headers['x-death'];
  return Array.isArray(deaths) ? (deaths[0] as Record<string, unknown> | undefined) : undefined;
}

function deathKey(headers: Record<string, unknown>): string | undefined {
  const keys = firstDeath(headers)?.['routing-keys'];
  return Array.isArray(keys) && typeof keys[0] === 'string' ? keys[0] : undefined;
}

/**
 * The broker's x-death reasons in the gateway's words (`DeadLetterReason`): a quorum queue's
 * delivery limit is `delivery_limit` there. rejected, expired and maxlen are the same in both.
 */
const brokerReasons: Readonly<Record<string, string>> = { delivery_limit: 'delivery-limit' };

/** Why a letter is dead: the gateway's own header, else the broker's (x-death). */
export function reasonOf(headers: Record<string, unknown>): string {
  const own = headers[DeadLetterHeader.reason];
  if (own !== undefined) return String(own);
  const broker = String(firstDeath(headers)?.reason ?? 'unknown');
  return brokerReasons[broker] ?? broker;
}

/** Whom a letter was for: its inbox's routing key, the recipient's gid ('' if unknown). */
export function routingKeyOf(headers: Record<string, unknown>): string {
  return String(headers[DeadLetterHeader.routingKey] ?? deathKey(headers) ?? '');
}

export function viewOf(
  content: Buffer,
  msgId: string | undefined,
  headers: Record<string, unknown>,
  opened?: OpenedLetter,
): DeadLetterView {
  return {
    msgId,
    reason: reasonOf(headers),
    detail: String(headers[DeadLetterHeader.detail] ?? ''),
    queue: String(headers[DeadLetterHeader.queue] ?? firstDeath(headers)?.queue ?? ''),
    routingKey: routingKeyOf(headers),
    host: String(headers[DeadLetterHeader.host] ?? ''),
    at: String(headers[DeadLetterHeader.at] ?? ''),
    body: (opened?.body ?? content.toString('utf8')).slice(0, 4096),
    ...(opened ? { sealed: opened.sealed } : {}),
  };
}
