import { decodeHlc } from '../clock/hlc.js';
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

/**
 * A Mermaid sequence diagram of a flow: one participant per host, an arrow for each message
 * that went from a send on one host to a delivery (here or elsewhere), a dashed arrow back for
 * each receipt that came from another host (R-RC1), and a note for every other transition.
 */
export class MermaidSequence {
  private readonly hosts: string[] = [];
  private readonly lines: string[] = [];
  /** msgId → the host that sent it and its kind. */
  private readonly sent = new Map<string, { host: string; kind: string }>();
  /** msgId → the host that delivered it (where its receipts come from). */
  private readonly delivered = new Map<string, string>();

  add(event: ReplayEvent): void {
    if (!this.hosts.includes(event.host)) this.hosts.push(event.host);
    const host = alias(event.host);
    if (event.actorKind === 'send' && event.event === 'xstate.init' && event.msgId !== null) {
      const kind = typeof event.data?.kind === 'string' ? event.data.kind : 'MESSAGE';
      this.sent.set(event.msgId, { host: event.host, kind });
    }
    if (event.actorKind === 'delivery' && event.event === 'xstate.init' && event.msgId !== null) {
      const from = this.sent.get(event.msgId);
      const kind = typeof event.data?.kind === 'string' ? event.data.kind : (from?.kind ?? 'MESSAGE');
      this.delivered.set(event.msgId, event.host);
      this.lines.push(`  ${from ? alias(from.host) : host}->>${host}: ${kind} ${shortId(event.msgId)}`);
      return;
    }
    const by = event.msgId === null ? undefined : this.delivered.get(event.msgId);
    if (
      event.actorKind === 'send' &&
      event.event === 'send.receipt' &&
      by !== undefined &&
      by !== event.host
    ) {
      const label = eventLabel(event).replace('send.receipt', 'receipt');
      this.lines.push(`  ${alias(by)}-->>${host}: ${label} ${shortId(event.msgId)}`);
      return;
    }
    const label = `${event.actorKind} ${shortId(event.actorId)}: ${event.fromState ?? '∅'} → ${event.toState}`;
    this.lines.push(`  Note over ${host}: ${label.replaceAll(';', ',').replaceAll('#', '')}`);
  }

  render(): string {
    const participants = this.hosts.map((h) => `  participant ${alias(h)} as ${h}`);
    return ['sequenceDiagram', ...participants, ...this.lines].join('\n');
  }
}

/** A Mermaid-safe participant id for a host. */
function alias(host: string): string {
  return `h_${host.replace(/[^A-Za-z0-9_]/g, '_')}`;
}
