import { z } from 'zod';

/**
 * The gateway's configuration. Every key has a default, so no file at all gives the embedded
 * single-host mode. Objects are strict: a misspelt key is an error, not a silent default.
 */
export const hostIdSchema = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/, 'a host id is 1-63 letters, digits, ".", "_" or "-"');

export const logLevels = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;

export const configSchema = z.strictObject({
  /** This gateway's host id; defaults to the machine's hostname. */
  hostId: hostIdSchema.optional(),
  /** Data directory: event log, admin socket. */
  home: z.string().min(1).default('./.bridge'),
  broker: z
    .strictObject({
      /** amqp(s):// URI of the federation broker; unset means single-host mode. */
      uri: z
        .string()
        .regex(/^amqps?:\/\//, 'the broker uri starts with amqp:// or amqps://')
        .optional(),
      /** classic queues (one broker) or quorum queues (a cluster, R-TOP2). */
      queueMode: z.enum(['classic', 'quorum']).default('classic'),
      /** Inbox cap (x-max-length): overflow is refused to the sender and dead-lettered (R-H1). */
      inboxMaxLength: z.number().int().min(1).default(10_000),
      /** Unacked messages per inbox consumer. */
      prefetch: z.number().int().min(1).max(65_535).default(200),
      /** Presence heartbeat (U5). */
      heartbeatMs: z.number().int().min(100).default(5_000),
      /** A host's roster entries expire after this many missed heartbeats. */
      presenceTtlBeats: z.number().int().min(1).default(3),
      /** Reconnect backoff: first delay and cap. */
      retryBaseMs: z.number().int().min(1).default(500),
      retryMaxMs: z.number().int().min(1).default(15_000),
    })
    .prefault({}),
  mcp: z
    .strictObject({
      host: z.string().min(1).default('127.0.0.1'),
      port: z.number().int().min(0).max(65535).default(7433),
    })
    .prefault({}),
  limits: z
    .strictObject({
      /** Largest message text accepted, in UTF-8 bytes. */
      maxTextBytes: z
        .number()
        .int()
        .min(1)
        .max(16 * 1024 * 1024)
        .default(64 * 1024),
      /** Longest an open bridge_send may wait for its reply. */
      maxWaitMs: z.number().int().min(0).default(600_000),
      /** Most messages one bridge_drain returns. */
      maxDrain: z.number().int().min(1).default(100),
    })
    .prefault({}),
  delivery: z
    .strictObject({
      /** How long an undelivered message lives before it is dead-lettered as expired. */
      ttlMs: z
        .number()
        .int()
        .min(1)
        .default(24 * 60 * 60 * 1000),
      /** Injection attempts before a message is dead-lettered as delivery-limit. */
      maxAttempts: z.number().int().min(1).default(5),
      /** First retry delay after a failed injection; doubles per attempt. */
      retryBaseMs: z.number().int().min(1).default(500),
      /** Lines of pane output searched when recovering an interrupted injection (R-DL5). */
      captureLines: z.number().int().min(10).default(500),
    })
    .prefault({}),
  store: z
    .strictObject({
      /** SQLite `synchronous` pragma; FULL syncs the WAL on every commit (power-loss safe). */
      synchronous: z.enum(['FULL', 'NORMAL']).default('FULL'),
    })
    .prefault({}),
  herdr: z
    .strictObject({
      /** herdr's socket; defaults to HERDR_SOCKET_PATH or $XDG_CONFIG_HOME/herdr/herdr.sock. */
      socketPath: z.string().optional(),
    })
    .prefault({}),
  log: z
    .strictObject({
      level: z.enum(logLevels).default('info'),
    })
    .prefault({}),
});

export type ConfigInput = z.input<typeof configSchema>;
export type Config = z.output<typeof configSchema> & { hostId: string };
