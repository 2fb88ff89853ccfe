import { join } from 'node:path';
import { loadConfig } from '../config/loadConfig.js';
import { BridgeError, ErrorCode } from '../errors.js';
import { exportTrace } from '../replay/exportTrace.js';
import { FlowSequence, renderMermaidSequence } from '../replay/FlowSequence.js';
import { formatEventLine, formatSummary, shortId } from '../replay/formatTimeline.js';
import type { ReplayEvent } from '../replay/replayEvent.js';
import { replayTrace } from '../replay/replayTrace.js';
import type { CliValues } from './cliOptions.js';
import { printResult, writeHuman, writeJson } from './output.js';
import { createProgressBar } from './progressBar.js';

/** `agentbridge export --trace ID [--db FILE] [--out FILE]`: one host's slice of a flow, portable. */
export function runExport(values: CliValues, rest: string[]): number {
  if (rest.length > 0)
    throw new BridgeError(ErrorCode.badRequest, `export takes no arguments, got "${rest.join(' ')}"`);
  const traceId = values.trace;
  if (!traceId && !values.all) {
    throw new BridgeError(
      ErrorCode.badRequest,
      'export needs --trace ID (the traceId a tool result or log line shows), or --all for the whole log',
    );
  }
  if ((values.db?.length ?? 0) > 1) {
    throw new BridgeError(ErrorCode.badRequest, 'export reads one event log: give --db once');
  }
  const db = values.db?.[0] ?? join(loadConfig({ file: values.config }).config.home, 'events.db');
  const out = values.out ?? `${traceId === undefined ? 'all' : shortId(traceId)}.bridge-export.ndjson`;
  const result = exportTrace({ db, traceId, out });
  const summary = { ...result, out, traceId: traceId ?? null };
  return printResult(values, summary, () => `exported ${result.events} events of ${result.host} to ${out}`);
}

/**
 * `agentbridge replay --trace ID SOURCE...`: the flow across hosts in causal order, each actor
 * re-run through the current machines. Exits 1 when an actor diverges.
 */
export function runReplay(values: CliValues, logs: string[]): number {
  const sources = [...logs, ...(values.db ?? [])];
  if (sources.length === 0) {
    throw new BridgeError(
      ErrorCode.badRequest,
      "replay needs one or more event logs: gateways' events.db files or `agentbridge export` files, e.g. " +
        'agentbridge replay --trace ID alpha.ndjson beta/events.db',
    );
  }
  if (!values.trace && !values.all) {
    throw new BridgeError(ErrorCode.badRequest, 'replay needs --trace ID (or --all to replay whole logs)');
  }
  const check = values['no-check'] !== true;
  const mermaid = values.mermaid ? new FlowSequence() : undefined;
  const json = values.json === true;
  const timeline = !mermaid && !json && values.quiet !== true;
  const events: ReplayEvent[] = [];
  const out: string[] = [];
  const flush = (): void => {
    if (out.length > 0) writeHuman(process.stdout, out.join('\n'));
    out.length = 0;
  };
  const progress = createProgressBar('replay', process.stderr, values.progress === true);
  const summary = replayTrace({
    sources,
    traceId: values.trace,
    check,
    onEvent: (event) => {
      if (mermaid) mermaid.add(event);
      else if (json) events.push(event);
      else if (timeline) {
        out.push(formatEventLine(event));
        if (out.length >= 1000) flush();
      }
    },
    onProgress: (done, total) => progress.update(done, total),
  });
  progress.done();
  flush();
  if (json) writeJson(process.stdout, { ...summary, timeline: events });
  else if (mermaid) writeHuman(process.stdout, renderMermaidSequence(mermaid.result()));
  else writeHuman(process.stdout, formatSummary(summary, check));
  if (summary.events === 0) {
    writeHuman(
      process.stderr,
      `agentbridge: no events${values.trace ? ` of trace ${values.trace}` : ''} in ${sources.join(', ')}: check the trace id`,
    );
    return 1;
  }
  return summary.divergences.length > 0 ? 1 : 0;
}
