import { closeSync, openSync, writeSync } from 'node:fs';
import { openSource } from './readSource.js';
import { type ExportHeader, exportVersion } from './replayEvent.js';

/**
 * Writes one host's slice of a flow (or its whole log, without `traceId`) as a portable file:
 * newline-delimited JSON, a header line then one event per line, in the host's log order.
 * Returns how many events it wrote.
 */
export function exportTrace(options: { db: string; traceId: string | undefined; out: string; now?: Date }): {
  host: string;
  events: number;
} {
  const source = openSource(options.db, options.traceId);
  const fd = openSync(options.out, 'w', 0o600);
  try {
    const header: ExportHeader = {
      bridgeExport: exportVersion,
      host: source.host,
      traceId: options.traceId ?? null,
      exportedAt: (options.now ?? new Date()).toISOString(),
      events: source.total,
    };
    writeSync(fd, `${JSON.stringify(header)}\n`);
    let events = 0;
    let buffered: string[] = [];
    for (const event of source.events()) {
      buffered.push(JSON.stringify(event));
      events++;
      if (buffered.length >= 4096) {
        writeSync(fd, `${buffered.join('\n')}\n`);
        buffered = [];
      }
    }
    if (buffered.length > 0) writeSync(fd, `${buffered.join('\n')}\n`);
    return { host: source.host, events };
  } finally {
    closeSync(fd);
    source.close();
  }
}
