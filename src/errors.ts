/**
 * One error type for the whole gateway. Every error has a stable `code` that scripts and MCP
 * clients can match on, a `retryable` flag, the `cause` it wraps, and a message that says what
 * happened and what to do about it. Expected outcomes (duplicate, too late) are values, not
 * errors. There are no subclasses by severity (STYLE.md suggests message < channel <
 * connection): no caller handles one severity differently from another, and what a caller
 * does decide on, whether to try again, is `retryable`.
 */
export const ErrorCode = {
  badConfig: 'BAD_CONFIG',
  badRequest: 'BAD_REQUEST',
  unauthorized: 'UNAUTHORIZED',
  unknownRecipient: 'UNKNOWN_RECIPIENT',
  ambiguousRecipient: 'AMBIGUOUS_RECIPIENT',
  textTooLarge: 'TEXT_TOO_LARGE',
  nameTaken: 'NAME_TAKEN',
  notAvailable: 'NOT_AVAILABLE',
  brokerUnavailable: 'BROKER_UNAVAILABLE',
  consumerRefused: 'CONSUMER_REFUSED',
  brokerNotSetUp: 'BROKER_NOT_SET_UP',
  inboxFull: 'INBOX_FULL',
  /** One sender holds its whole share of the recipient's inbox (limits.senderInboxShare). */
  inboxShareFull: 'INBOX_SHARE_FULL',
  /** Too many tool calls parked open (limits.maxParkedPerEntity, limits.maxParked). */
  tooManyParked: 'TOO_MANY_PARKED',
  injectFailed: 'INJECT_FAILED',
  paneUnavailable: 'PANE_UNAVAILABLE',
  gatewayUnavailable: 'GATEWAY_UNAVAILABLE',
  shuttingDown: 'SHUTTING_DOWN',
  storeFailed: 'STORE_FAILED',
  /** The event log is damaged (the file, or a row the gateway cannot start without). */
  badStore: 'BAD_STORE',
  keyMissing: 'KEY_MISSING',
  keyExists: 'KEY_EXISTS',
  keyInsecure: 'KEY_INSECURE',
  badKey: 'BAD_KEY',
  badTrustStore: 'BAD_TRUST_STORE',
  /** The home has an entry open to others that the gateway cannot make private (security/privateHome.ts). */
  homeInsecure: 'HOME_INSECURE',
  askExpired: 'ASK_EXPIRED',
  askAbandoned: 'ASK_ABANDONED',
  unknownAsk: 'UNKNOWN_ASK',
  unknownMessage: 'UNKNOWN_MESSAGE',
  idempotencyConflict: 'IDEMPOTENCY_CONFLICT',
  unknownProfile: 'UNKNOWN_PROFILE',
  spawnRefused: 'SPAWN_REFUSED',
  launchFailed: 'LAUNCH_FAILED',
  notSpawned: 'NOT_SPAWNED',
  forbidden: 'FORBIDDEN',
  hostNotAllowed: 'HOST_NOT_ALLOWED',
  internal: 'INTERNAL',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

export interface BridgeErrorOptions {
  cause?: unknown;
  retryable?: boolean;
  details?: Record<string, unknown>;
}

export class BridgeError extends Error {
  readonly code: ErrorCode;
  readonly retryable: boolean;
  readonly details: Record<string, unknown> | undefined;

  constructor(code: ErrorCode, message: string, options: BridgeErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.retryable = options.retryable ?? false;
    this.details = options.details;
  }

  toJSON(): { code: ErrorCode; message: string; retryable: boolean; details?: Record<string, unknown> } {
    return {
      code: this.code,
      message: this.message,
      retryable: this.retryable,
      ...(this.details ? { details: this.details } : {}),
    };
  }
}

/** A refused control request (spawn, stop, owner's answer), as the target host reported it. */
export function controlError(code: string | undefined, message: string | undefined): BridgeError {
  const known = (Object.values(ErrorCode) as string[]).includes(code ?? '');
  return new BridgeError(
    known ? (code as ErrorCode) : ErrorCode.spawnRefused,
    message ?? 'refused by the target host',
  );
}

export function isBridgeError(value: unknown): value is BridgeError {
  return value instanceof BridgeError;
}

/**
 * A failure as a result reports it: a BridgeError keeps its code; anything else thrown becomes
 * one with `code` and its message, kept as `cause`.
 */
export function asBridgeError(value: unknown, code: ErrorCode): BridgeError {
  if (isBridgeError(value)) return value;
  return new BridgeError(code, value instanceof Error ? value.message : String(value), { cause: value });
}

/** Wraps anything thrown into a BridgeError, keeping the original as `cause`. */
export function toBridgeError(value: unknown): BridgeError {
  if (isBridgeError(value)) return value;
  const message = value instanceof Error ? value.message : String(value);
  return new BridgeError(ErrorCode.internal, `internal error: ${message}`, { cause: value });
}
