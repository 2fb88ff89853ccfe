import { AsyncLocalStorage } from 'node:async_hooks';
import pino from 'pino';
import { escapeUnsafe } from '../text/neutralise.js';
import { uuidv7 } from '../wire/ids.js';

export type Logger = pino.Logger;

const traceStorage = new AsyncLocalStorage<string>();

/** Mints a trace id (R-H4): the first send of a flow does this, every later hop carries it. */
export function newTraceId(): string {
  return uuidv7();
}

/** Runs `fn` with `traceId` as the trace of every log line written inside it. */
export function withTrace<T>(traceId: string, fn: () => T): T {
  return traceStorage.run(traceId, fn);
}

export interface LoggerOptions {
  level?: string;
  host?: string;
  /** Where lines go; stdout by default. */
  destination?: pino.DestinationStream;
}

/**
 * pino JSON logs. Every line carries a traceId: the one passed explicitly, else the one of the
 * flow being handled (AsyncLocalStorage), else the gateway's own boot trace. A line quotes
 * peers' text (names, routing keys, reasons); the characters JSON leaves raw that would act on
 * the terminal it is printed to (C1 controls, bidi overrides) are written as `\u` escapes, so a
 * line parses to the same values and prints inert.
 */
export function createLogger(options: LoggerOptions = {}): Logger {
  const bootTrace = newTraceId();
  return pino(
    {
      level: options.level ?? 'info',
      base: { host: options.host },
      mixin: (_context, _level, logger) => ({
        traceId: traceStorage.getStore() ?? bootTraceOf(logger, bootTrace),
      }),
      mixinMergeStrategy: (mergeObject, mixinObject) => ({ ...mixinObject, ...mergeObject }),
      timestamp: pino.stdTimeFunctions.isoTime,
      hooks: { streamWrite: escapeUnsafe },
    },
    options.destination ?? pino.destination({ dest: 1, sync: false }),
  );
}

function bootTraceOf(_logger: unknown, bootTrace: string): string {
  return bootTrace;
}

/** A logger that writes nothing, for tests and tools. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
