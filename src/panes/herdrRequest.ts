/**
 * One request to herdr on its own connection, as herdr serves them: it reads one line, answers,
 * and closes. Shared by the pane injector and the herdr launcher; each words its own errors
 * (`toError`), as what a failure means depends on who asked.
 */
import { createConnection, type Socket } from 'node:net';
import { BridgeError, ErrorCode } from '../errors.js';
import { createLineSplitter } from '../text/lineSplitter.js';
import {
  decodeLine,
  decodeResult,
  encodeRequest,
  type HerdrErrorBody,
  type HerdrMethod,
  type HerdrParams,
  type HerdrResults,
} from './herdrProtocol.js';

/** Why a request failed, for the caller to turn into its own error. */
export type HerdrRequestFailure =
  /** herdr answered with an error. */
  | { readonly kind: 'refused'; readonly body: HerdrErrorBody }
  /** herdr answered, but not with the shape this method returns. */
  | { readonly kind: 'unexpected'; readonly reason: string }
  /** The request was sent and no answer came: a timeout, or the connection dropped. */
  | { readonly kind: 'lost'; readonly what: string; readonly cause?: unknown };

/** The slice of a pino logger a request uses. */
export interface HerdrRequestLogger {
  warn(obj: Record<string, unknown>, msg: string): void;
}

export interface HerdrRequestOptions {
  readonly socketPath: string;
  readonly connectTimeoutMs: number;
  /** How long herdr may take to answer once the request is written. */
  readonly requestTimeoutMs: number;
  /** Request id; default a fresh `bridge:<method>:<n>`. */
  readonly id?: string | undefined;
  readonly toError: (failure: HerdrRequestFailure) => Error;
  /**
   * Called with the connection before the request is written (to track it, say). If it
   * throws, the connection is closed and the request rejects with what it threw.
   */
  readonly onConnected?: ((socket: Socket) => void) | undefined;
  readonly logger?: HerdrRequestLogger | undefined;
  /** Merged into what is logged about skipped lines. */
  readonly logContext?: Readonly<Record<string, unknown>> | undefined;
}

let sequence = 0;

/**
 * Sends one request and resolves with its decoded result. A connection that cannot be opened
 * rejects with the BridgeError `openSocket` gives (PANE_UNAVAILABLE, saying what to do); any
 * later failure with `toError`'s error.
 */
export async function herdrRequest<M extends HerdrMethod>(
  method: M,
  params: HerdrParams[M],
  options: HerdrRequestOptions,
): Promise<HerdrResults[M]> {
  const { requestTimeoutMs, toError, logger } = options;
  const socket = await openSocket(options.socketPath, options.connectTimeoutMs);
  try {
    options.onConnected?.(socket);
  } catch (err) {
    socket.destroy();
    throw err;
  }
  const id = options.id ?? `bridge:${method}:${++sequence}`;
  return new Promise<HerdrResults[M]>((resolve, reject) => {
    const splitter = createLineSplitter();
    let settled = false;
    const finish = (outcome: { value: HerdrResults[M] } | { failure: HerdrRequestFailure }): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      if ('failure' in outcome) reject(toError(outcome.failure));
      else resolve(outcome.value);
    };
    const timer = setTimeout(
      () => finish({ failure: { kind: 'lost', what: `herdr did not answer within ${requestTimeoutMs} ms` } }),
      requestTimeoutMs,
    );
    const onLine = (line: string): void => {
      const message = decodeLine(line);
      switch (message.kind) {
        case 'invalid':
          logger?.warn(
            { ...options.logContext, method, reason: message.reason },
            'ignoring malformed line from herdr',
          );
          return;
        case 'error':
          // herdr answers with an empty id when it could not parse the request at all.
          if (message.id === id || message.id === '')
            finish({ failure: { kind: 'refused', body: message.error } });
          return;
        case 'result': {
          if (message.id !== id) return;
          const decoded = decodeResult(method, message.result);
          finish(
            decoded.ok
              ? { value: decoded.value }
              : { failure: { kind: 'unexpected', reason: decoded.reason } },
          );
          return;
        }
        default:
          return;
      }
    };
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      for (const line of splitter.push(chunk)) onLine(line);
      if (splitter.takeOverflow())
        logger?.warn({ ...options.logContext, method }, 'dropped an over-long line from herdr');
    });
    socket.on('error', (err) => finish({ failure: { kind: 'lost', what: err.message, cause: err } }));
    socket.on('close', () =>
      finish({ failure: { kind: 'lost', what: 'herdr closed the connection before answering' } }),
    );
    socket.write(encodeRequest(id, method, params));
  });
}

/** Opens a connection, turning socket errors into messages that say what to do. */
export function openSocket(socketPath: string, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = createConnection(socketPath);
    let settled = false;
    const timer = setTimeout(() => {
      settled = true;
      socket.destroy();
      reject(
        new BridgeError(
          ErrorCode.paneUnavailable,
          `timed out after ${timeoutMs} ms connecting to herdr socket ${socketPath}: is herdr responsive?`,
          { retryable: true },
        ),
      );
    }, timeoutMs);
    socket.once('connect', () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(socket);
    });
    // Stays attached after connect so an error between here and the caller's own listener
    // cannot crash the process; the caller's 'error'/'close' listeners handle it.
    socket.on('error', (err: NodeJS.ErrnoException) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      reject(connectError(socketPath, err));
    });
  });
}

function connectError(socketPath: string, err: NodeJS.ErrnoException): BridgeError {
  const options = { cause: err, retryable: true, details: { socketPath, errno: err.code } };
  switch (err.code) {
    case 'ENOENT':
      return new BridgeError(
        ErrorCode.paneUnavailable,
        `herdr socket ${socketPath} not found: is herdr running? set HERDR_SOCKET_PATH to its socket`,
        options,
      );
    case 'ECONNREFUSED':
      return new BridgeError(
        ErrorCode.paneUnavailable,
        `herdr socket ${socketPath} refused the connection: herdr is not running (stale socket); start herdr or set HERDR_SOCKET_PATH`,
        options,
      );
    case 'EACCES':
      return new BridgeError(
        ErrorCode.paneUnavailable,
        `no permission to open herdr socket ${socketPath}: run the gateway as the user that runs herdr`,
        options,
      );
    default:
      return new BridgeError(
        ErrorCode.paneUnavailable,
        `cannot connect to herdr socket ${socketPath}: ${err.message}`,
        options,
      );
  }
}
