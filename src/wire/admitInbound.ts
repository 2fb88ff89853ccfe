import { decodeEnvelope } from './codec.js';
import type { DeadLetterReason } from './deadLetterReason.js';
import { byteLength } from './digest.js';
import { broadcastPrefix, type Envelope, type SpawnHeader, WireKind } from './envelope.js';
import { decodeHlc } from './hlc.js';
import type { Opened, Sealed } from './sealed.js';
import { openedText, sealedKinds } from './sealedEnvelope.js';
import type { SignatureCheck } from './signatureHeaders.js';
import { oversized } from './wireSize.js';

/** Where an arrival is headed: an entity's inbox, or a gateway's control queue. */
export type AdmissionTarget =
  | { kind: 'inbox'; gid: string; name: string; groups: readonly string[] }
  | { kind: 'control'; host: string };

/** The limits admission applies, from the gateway's config. */
export interface AdmissionLimits {
  /** Whether messages must be signed by the host their sender lives on (invariant 6). */
  signingRequired: boolean;
  /** Whether a kind that carries text must come sealed (security.encryption, issue 34). */
  sealingRequired: boolean;
  /** What is parsed at all: the text limit plus room for the envelope around it. */
  maxWireBytes: number;
  maxTextBytes: number;
  maxClockSkewMs: number;
  /** delivery.ttlMs: a message stamped before now - ttl - skew cannot be live any more. */
  ttlMs: number;
}

export interface InboundArrival {
  content: Buffer;
  /**
   * Checks the signature over `content`, the raw bytes, with its headers (the gateway's
   * signer); called only once the size is known to be within limits, before anything is decoded.
   */
  verify(): SignatureCheck;
  /** Opens a sealed part with this gateway's keys; called last, once everything else admits it. */
  open(sealed: Sealed, aad: Buffer): Opened;
  target: AdmissionTarget;
  now: number;
  /** Why a reply may not name the message it answers, or undefined (inboxes only). */
  refusesReply?: ((envelope: Envelope) => string | undefined) | undefined;
}

/** What admission decided; the federation executes it (ack, dead-letter, answer a spawn). */
export type Admission =
  | { verdict: 'admitted'; envelope: Envelope; signer: string }
  /** A copy of the recipient's own broadcast: acked and dropped. */
  | { verdict: 'own-copy' }
  | {
      verdict: 'refused';
      reason: DeadLetterReason;
      detail: string;
      /** A SPAWN for this host refused for its content, from an authentic requester: answer it (U4). */
      answerSpawn?: { request: SpawnHeader; why: string };
    };

/** What an inbox takes; control and presence kinds travel on their own exchanges. */
const inboxKinds: ReadonlySet<string> = new Set<WireKind>([
  WireKind.send,
  WireKind.reply,
  WireKind.broadcast,
  WireKind.ask,
  WireKind.answer,
  WireKind.tooLate,
  WireKind.spawnResult,
]);

/** What a control queue takes: requests to this host, and receipts for its sends (R-RC1). */
const controlKinds: ReadonlySet<string> = new Set<WireKind>([
  WireKind.spawn,
  WireKind.stop,
  WireKind.ownerAnswer,
  WireKind.receipt,
]);

/**
 * The checks an arrival passes before anything is done with it, in order: size, signature
 * (over the raw bytes), schema, own copy, destination, sender on the signing host, clock stamp,
 * expiry (R-H8: nothing unsigned or oversized is ever decoded). The roster check (the sender
 * lives on the signer) comes after, in `judgeSender`. Pure: no I/O, time is `now`.
 */
export function admitInbound(arrival: InboundArrival, limits: AdmissionLimits): Admission {
  const { target, now } = arrival;
  const tooLarge = oversized(
    arrival.content,
    limits.maxWireBytes,
    'limits.maxTextBytes and the envelope around it',
  );
  if (tooLarge !== undefined) return refuse('rejected', `oversized: ${tooLarge}`);
  const signature = arrival.verify();
  if (!signature.ok) return refuse('bad-signature', signature.detail);
  const decoded = decodeEnvelope(arrival.content, limits.maxWireBytes);
  if (!decoded.ok) {
    const reason = decoded.reason === 'newer-major' ? 'newer-major' : 'rejected';
    const refused = refuse(reason, `${decoded.reason}: ${decoded.detail}`);
    const spawn = decoded.refusedSpawn;
    // Answered only for the host that signed it: nobody can have refusals sent in another's name.
    const authentic = spawn && (!limits.signingRequired || spawn.from.host === signature.signer);
    if (target.kind === 'control' && authentic && spawn.to === target.host) {
      return { ...refused, answerSpawn: { request: spawn, why: decoded.detail } };
    }
    return refused;
  }
  const { envelope, sealed } = decoded;
  // The sender does not get a copy of its own broadcast.
  if (target.kind === 'inbox' && envelope.kind === WireKind.broadcast && envelope.from.gid === target.gid) {
    return { verdict: 'own-copy' };
  }
  const misdirected =
    target.kind === 'inbox'
      ? misdirectedInbox(target, envelope, arrival.refusesReply)
      : misdirectedControl(target, envelope);
  if (misdirected) return refuse('rejected', misdirected);
  if (limits.signingRequired && envelope.from.host !== signature.signer) {
    const claim = `${envelope.from.name}@${envelope.from.host}`;
    return refuse('unknown-sender', `claims sender ${claim} but was signed by ${signature.signer}`);
  }
  const stamped = decodeHlc(envelope.hlc).wall;
  const skew = limits.maxClockSkewMs;
  if (stamped > now + skew) {
    const ahead = Math.round((stamped - now) / 1000);
    return refuse('rejected', `stamped ${ahead} s in the future: clock skew beyond security.maxClockSkewMs`);
  }
  if (stamped < now - limits.ttlMs - skew) {
    return refuse('expired', `stamped ${new Date(stamped).toISOString()}: older than any live message`);
  }
  if (envelope.expiresAt !== undefined && envelope.expiresAt <= now) {
    // Per-message TTL only fires at the queue head; check on arrival too (SPEC §12).
    return refuse('expired', `expired at ${new Date(envelope.expiresAt).toISOString()}`);
  }
  if (sealed === undefined) {
    if (limits.sealingRequired && sealedKinds.has(envelope.kind)) {
      const why = unsealedDetail(envelope);
      return refuseTelling(target, envelope, 'unsealed', why);
    }
    const size = overLimit(envelope.text, limits);
    return size ? refuse('rejected', size) : { verdict: 'admitted', envelope, signer: signature.signer };
  }
  // Sealed: the size it declares is bound to it; nothing larger than the limit is opened.
  const declared = overLimit(sealed.size, limits);
  if (declared) return refuse('rejected', declared);
  const content = openedText(arrival.open(sealed.sealed, sealed.aad), sealed.size);
  if (!content.ok)
    return refuseTelling(target, envelope, content.reason, `${content.detail}; nothing of it was delivered`);
  return { verdict: 'admitted', envelope: { ...envelope, text: content.text }, signer: signature.signer };
}

/**
 * Refused for its sealing (unsealed, or it does not open): a SPAWN for this host is answered
 * too, its requester being authentic by now (signed, and from the signing host), so it is told
 * rather than left waiting.
 */
function refuseTelling(
  target: AdmissionTarget,
  envelope: Envelope,
  reason: DeadLetterReason,
  why: string,
): Admission & { verdict: 'refused' } {
  const { spawn } = envelope;
  if (target.kind !== 'control' || envelope.kind !== WireKind.spawn || !spawn) return refuse(reason, why);
  const { v, msgId, traceId, hlc, from, to } = envelope;
  const request: SpawnHeader = { v, msgId, traceId, hlc, from, to, kind: WireKind.spawn, spawn };
  return { ...refuse(reason, why), answerSpawn: { request, why } };
}

function refuse(reason: DeadLetterReason, detail: string): Admission & { verdict: 'refused' } {
  return { verdict: 'refused', reason, detail };
}

/**
 * Why a message is not for this inbox, or undefined: the kinds an inbox takes, addressed to
 * this entity (a signed message re-published to another inbox is refused, not re-routed),
 * answering only a message its sender got, within this gateway's own size limit.
 */
function misdirectedInbox(
  inbox: AdmissionTarget & { kind: 'inbox' },
  envelope: Envelope,
  refusesReply: InboundArrival['refusesReply'],
): string | undefined {
  if (!inboxKinds.has(envelope.kind)) return `a ${envelope.kind} does not belong in an inbox`;
  if (envelope.kind === WireKind.broadcast) {
    const group = envelope.to.startsWith(broadcastPrefix)
      ? envelope.to.slice(broadcastPrefix.length)
      : undefined;
    if (group === undefined) return `a broadcast addressed to ${envelope.to}`;
    if (group !== 'all' && !inbox.groups.includes(group))
      return `a broadcast for group ${group}, which ${inbox.name} is not in`;
  } else if (envelope.to !== inbox.gid) {
    return `addressed to ${envelope.to}, not to ${inbox.name} (${inbox.gid})`;
  }
  return refusesReply?.(envelope);
}

function misdirectedControl(
  control: AdmissionTarget & { kind: 'control' },
  envelope: Envelope,
): string | undefined {
  if (!controlKinds.has(envelope.kind)) return `a ${envelope.kind} does not belong in a control queue`;
  if (envelope.to !== control.host) return `addressed to host ${envelope.to}, not to ${control.host}`;
  return undefined;
}

/** Why a text (or the size a sealed one declares) is over this gateway's limit, or undefined. */
function overLimit(text: string | number, limits: AdmissionLimits): string | undefined {
  const size = typeof text === 'number' ? text : byteLength(text);
  if (size > limits.maxTextBytes)
    return `text is ${size} bytes; this gateway takes at most ${limits.maxTextBytes} (limits.maxTextBytes)`;
  return undefined;
}

function unsealedDetail(envelope: Envelope): string {
  return (
    `a ${envelope.kind} from ${envelope.from.host} came with its text unsealed, and this gateway requires ` +
    'sealing (security.encryption: required): that gateway publishes in clear (an older release, or its ' +
    'security.encryption is off); upgrade it or turn its encryption on, and send again (a requeue sends the same clear bytes)'
  );
}
