import { eventLabel, shortId } from './formatTimeline.js';
import type { ReplayEvent } from './replayEvent.js';

/** One row of a flow's sequence diagram. */
export type SequenceStep =
  /** A message that went from a send on one host to its delivery (on the same host or another). */
  | { readonly kind: 'message'; readonly from: string; readonly to: string; readonly label: string }
  /** A receipt that came back from the delivering host to the sender's (R-RC1). */
  | { readonly kind: 'receipt'; readonly from: string; readonly to: string; readonly label: string }
  /** Any other transition, on the host that made it. */
  | { readonly kind: 'note'; readonly host: string; readonly label: string };

/** A flow as a sequence diagram: one participant per host, in order of appearance, and its steps. */
export interface SequenceDiagram {
  readonly hosts: string[];
  readonly steps: SequenceStep[];
}

/**
 * Builds a flow's sequence diagram from its merged events, one call per event in HLC order; what
 * `agentbridge replay --mermaid` writes and the operator console draws.
 */
export class FlowSequence {
  private readonly diagram: SequenceDiagram = { hosts: [], steps: [] };
  /** msgId → the host that sent it and its kind. */
  private readonly sent = new Map<string, { host: string; kind: string }>();
  /** msgId → the host that delivered it (where its receipts come from). */
  private readonly delivered = new Map<string, string>();

  add(event: ReplayEvent): void {
    const { hosts, steps } = this.diagram;
    if (!hosts.includes(event.host)) hosts.push(event.host);
    if (event.actorKind === 'send' && event.event === 'xstate.init' && event.msgId !== null) {
      const kind = typeof event.data?.kind === 'string' ? event.data.kind : 'MESSAGE';
      this.sent.set(event.msgId, { host: event.host, kind });
    }
    if (event.actorKind === 'delivery' && event.event === 'xstate.init' && event.msgId !== null) {
      const sent = this.sent.get(event.msgId);
      const kind = typeof event.data?.kind === 'string' ? event.data.kind : (sent?.kind ?? 'MESSAGE');
      // Without the sender's export, its host as the delivery recorded it (earlier releases did not).
      const from =
        sent?.host ?? (typeof event.data?.senderHost === 'string' ? event.data.senderHost : event.host);
      if (!hosts.includes(from)) hosts.splice(hosts.indexOf(event.host), 0, from);
      this.delivered.set(event.msgId, event.host);
      steps.push({
        kind: 'message',
        from,
        to: event.host,
        label: `${kind} ${shortId(event.msgId)}`,
      });
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
      steps.push({ kind: 'receipt', from: by, to: event.host, label: `${label} ${shortId(event.msgId)}` });
      return;
    }
    steps.push({
      kind: 'note',
      host: event.host,
      label: `${event.actorKind} ${shortId(event.actorId)}: ${event.fromState ?? '∅'} → ${event.toState}`,
    });
  }

  result(): SequenceDiagram {
    return this.diagram;
  }
}

/** The diagram as Mermaid `sequenceDiagram` text. */
export function renderMermaidSequence({ hosts, steps }: SequenceDiagram): string {
  const lines = steps.map((step) => {
    if (step.kind === 'message') return `  ${alias(step.from)}->>${alias(step.to)}: ${step.label}`;
    if (step.kind === 'receipt') return `  ${alias(step.from)}-->>${alias(step.to)}: ${step.label}`;
    return `  Note over ${alias(step.host)}: ${step.label.replaceAll(';', ',').replaceAll('#', '')}`;
  });
  const participants = hosts.map((h) => `  participant ${alias(h)} as ${h}`);
  return ['sequenceDiagram', ...participants, ...lines].join('\n');
}

/** A Mermaid-safe participant id for a host. */
function alias(host: string): string {
  return `h_${host.replace(/[^A-Za-z0-9_]/g, '_')}`;
}
