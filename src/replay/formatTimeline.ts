import { decodeHlc } from '../wire/hlc.js';
import type { Divergence } from './Rerun.js';
import type { ReplayEvent } from './replayEvent.js';
import type { ReplaySummary } from './replayTrace.js';

/** Ids shortened for reading: the last 8 characters (UUIDv7's random end). */
export function shortId(id: string | null): string {
  if (id === null) return '-';
  return id.length <= 12 ? id : id.slice(-8);
}

function wallTime(hlc: string): string {
  const { wall, counter } = decodeHlc(hlc);
  return `${new Date(wall).toISOString()}+${counter}`;
}

/**
 * An event as a timeline names it: its type, and for a receipt the stage it reported (and a
 * dead letter's reason): `send.receipt submitted`, `send.receipt dead-lettered (expired)`.
 */
export function eventLabel(event: ReplayEvent): string {
  if (event.event !== 'send.receipt' || typeof event.data?.stage !== 'string') return event.event;
  const reason = typeof event.data.reason === 'string' ? ` (${event.data.reason})` : '';
  return `${event.event} ${event.data.stage}${reason}`;
}

/** One timeline line: when (HLC), host, actor, event, from → to, msg. */
export function formatEventLine(event: ReplayEvent): string {
  const actor = `${event.actorKind} ${shortId(event.actorId)}`;
  const move = `${event.fromState ?? '∅'} → ${event.toState}`;
  const msg = event.msgId === null ? '' : `  msg ${shortId(event.msgId)}`;
  return `${wallTime(event.hlc)}  ${event.host}  ${actor.padEnd(24)}  ${eventLabel(event).padEnd(36)}  ${move}${msg}`;
}

export function formatDivergence(d: Divergence): string {
  return (
    `DIVERGENCE ${d.kind}: ${d.actorKind} ${d.actorId} on ${d.host}, at event #${d.seq} ${d.event} (${d.hlc}): ` +
    d.detail
  );
}

export function formatSummary(summary: ReplaySummary, checked: boolean): string {
  const head = `${summary.events} events from ${summary.hosts.length} host(s) (${summary.hosts.join(', ')}), ${summary.actors} actors`;
  if (!checked) return `${head}; not checked against the machines (--no-check)`;
  if (summary.divergences.length === 0)
    return `${head}; every actor agrees with the current machine definitions`;
  return `${head}; ${summary.divergences.length} divergence(s):\n${summary.divergences.map(formatDivergence).join('\n')}`;
}
