/**
 * One herdr pane's requests to the server: each on its own short connection (herdr reads one
 * line, answers, and closes), worded as errors that say what happened to the pane, and what
 * the server can do, learned from `ping` and learned again when herdr may have restarted.
 *
 * herdr has no capability handshake: its `version` says (see `herdrFeatures`). Anything but an
 * answer from herdr (a failed connection, no reply) may mean it restarted, and so may a
 * dropped status subscription (the status watch calls `forgetFeatures`); a method that turns
 * out to be unknown (`invalid_request`) is dropped with `withoutFeature`.
 */
import type { Socket } from 'node:net';
import { BridgeError, ErrorCode } from '../errors.js';
import { type HerdrFeatures, herdrFeatures, LEGACY_HERDR_FEATURES } from './herdrFeatures.js';
import {
  type HerdrErrorBody,
  HerdrErrorCode,
  HerdrMethod,
  type HerdrParams,
  type HerdrResults,
} from './herdrProtocol.js';
import { herdrRequest } from './herdrRequest.js';

/** The slice of a pino logger the herdr injector uses. */
export interface HerdrLogger {
  info?(obj: Record<string, unknown>, msg: string): void;
  warn(obj: Record<string, unknown>, msg: string): void;
  error(obj: Record<string, unknown>, msg: string): void;
}

/** What a request writes into the pane, which decides how an unanswered request is worded. */
export type Typing = 'text' | 'enter' | undefined;

/** A feature herdr's version promised that the server may turn out not to have. */
export type HerdrOptionalFeature = 'agentPrompt' | 'sessionSnapshot';

export interface HerdrSessionOptions {
  readonly paneId: string;
  readonly socketPath: string;
  readonly requestTimeoutMs: number;
  readonly connectTimeoutMs: number;
  readonly logger?: HerdrLogger | undefined;
}

export interface HerdrSession {
  readonly paneId: string;
  readonly socketPath: string;
  /** True once `close` was called: every request then rejects (SHUTTING_DOWN). */
  readonly closed: boolean;
  /**
   * One request on its own connection, as herdr serves them. Anything but an answer from
   * herdr (no connection, no reply) may mean herdr restarted: its features are asked again.
   */
  request<M extends HerdrMethod>(
    method: M,
    params: HerdrParams[M],
    extra?: { readonly typing?: Typing; readonly timeoutMs?: number },
  ): Promise<HerdrResults[M]>;
  /** The server's features, asked once and kept until herdr may have restarted. */
  features(): Promise<HerdrFeatures>;
  /** herdr may have restarted (as another version, too): ask its features again. */
  forgetFeatures(): void;
  /** herdr said it does not know a method after all: stop using it until herdr is asked again. */
  withoutFeature(feature: HerdrOptionalFeature): void;
  /** A fresh request id, for a request written on a connection of the caller's own. */
  nextId(method: HerdrMethod): string;
  /** The error for herdr's refusal of `method`. */
  refused(method: HerdrMethod, body: HerdrErrorBody, typing: Typing): BridgeError;
  /** Refuses new requests and drops those in flight. */
  close(): void;
}

/** The `code` herdr refused a request with, or undefined when the failure was not herdr's answer. */
export function herdrCodeOf(err: unknown): unknown {
  return err instanceof BridgeError ? err.details?.herdrCode : undefined;
}

export function createHerdrSession(options: HerdrSessionOptions): HerdrSession {
  const { paneId, socketPath, requestTimeoutMs, connectTimeoutMs, logger } = options;

  let closed = false;
  let sequence = 0;
  const inflight = new Set<Socket>();

  const nextId = (method: string): string => `bridge:${method}:${++sequence}`;

  const closedError = (): BridgeError =>
    new BridgeError(ErrorCode.shuttingDown, `herdr injector for pane ${paneId} is closed`);

  function refused(method: HerdrMethod, body: HerdrErrorBody, typing: Typing): BridgeError {
    const details = { paneId, socketPath, herdrMethod: method, herdrCode: body.code };
    if (body.code === HerdrErrorCode.paneNotFound) {
      return new BridgeError(
        ErrorCode.paneUnavailable,
        `herdr has no pane ${paneId} (${body.message || body.code}): the pane was closed or the id is wrong; register the agent again with its HERDR_PANE_ID`,
        { details },
      );
    }
    const code = typing === undefined ? ErrorCode.paneUnavailable : ErrorCode.injectFailed;
    return new BridgeError(
      code,
      `herdr refused ${method} for pane ${paneId}: ${body.code}: ${body.message}`,
      {
        details,
        // A herdr-side timeout while typing is as ambiguous as our own: never retry that blindly.
        retryable: body.code === HerdrErrorCode.timeout && typing === undefined,
      },
    );
  }

  /** What to say when a request was sent but no answer came back. */
  function lostAnswer(method: HerdrMethod, what: string, typing: Typing, cause?: unknown): BridgeError {
    const details = { paneId, socketPath, herdrMethod: method };
    if (typing === 'text') {
      // The text may or may not have reached the pane: retrying blindly could type it twice (R-DL5).
      return new BridgeError(
        ErrorCode.injectFailed,
        `${what} while typing into herdr pane ${paneId}: the text may have been typed; check the pane's output for the message id before typing it again`,
        { cause, details: { ...details, ambiguous: true } },
      );
    }
    if (typing === 'enter') {
      return new BridgeError(
        ErrorCode.injectFailed,
        `${what} while pressing Enter in herdr pane ${paneId}: it may have been pressed; read the pane back before pressing it again`,
        { cause, details: { ...details, ambiguous: true } },
      );
    }
    return new BridgeError(ErrorCode.paneUnavailable, `${what} during ${method} for herdr pane ${paneId}`, {
      cause,
      retryable: true,
      details,
    });
  }

  function unexpectedReply(method: HerdrMethod, reason: string, typing: Typing): BridgeError {
    if (typing !== undefined) return lostAnswer(method, `herdr gave an unexpected reply (${reason})`, typing);
    return new BridgeError(
      ErrorCode.paneUnavailable,
      `herdr pane ${paneId}: ${reason}: is this herdr version supported?`,
      {
        details: { paneId, socketPath, herdrMethod: method },
      },
    );
  }

  async function request<M extends HerdrMethod>(
    method: M,
    params: HerdrParams[M],
    extra: { readonly typing?: Typing; readonly timeoutMs?: number } = {},
  ): Promise<HerdrResults[M]> {
    if (closed) throw closedError();
    let answered = false;
    try {
      return await herdrRequest(method, params, {
        socketPath,
        connectTimeoutMs,
        requestTimeoutMs: extra.timeoutMs ?? requestTimeoutMs,
        id: nextId(method),
        logger,
        logContext: { paneId },
        onConnected(socket) {
          if (closed) throw closedError();
          inflight.add(socket);
          socket.once('close', () => inflight.delete(socket));
        },
        toError(failure) {
          switch (failure.kind) {
            case 'refused':
              answered = true;
              return refused(method, failure.body, extra.typing);
            case 'unexpected':
              answered = true;
              return unexpectedReply(method, failure.reason, extra.typing);
            case 'lost':
              return closed ? closedError() : lostAnswer(method, failure.what, extra.typing, failure.cause);
          }
        },
      });
    } catch (err) {
      if (!answered) forgetFeatures();
      throw err;
    }
  }

  // What the server can do, once learned; the `ping` asking it, while in flight. `epoch` is
  // bumped when herdr may have restarted, so an answer from before that is not kept.
  let features: HerdrFeatures | undefined;
  let asking: Promise<HerdrFeatures> | undefined;
  let epoch = 0;

  function forgetFeatures(): void {
    features = undefined;
    asking = undefined;
    epoch++;
  }

  function negotiate(): Promise<HerdrFeatures> {
    if (features !== undefined) return Promise.resolve(features);
    if (asking !== undefined) return asking;
    const askedIn = epoch;
    const asked = request(HerdrMethod.ping, {})
      .then(
        (pong): HerdrFeatures => herdrFeatures(pong),
        (err: unknown): HerdrFeatures => {
          // A server that does not know `ping` still has the methods every herdr has.
          if (herdrCodeOf(err) === HerdrErrorCode.invalidRequest) return LEGACY_HERDR_FEATURES;
          throw err;
        },
      )
      .then((learned) => {
        if (askedIn === epoch) {
          features = learned;
          logger?.info?.({ paneId, socketPath, herdr: learned }, 'herdr server features');
        }
        return learned;
      })
      .finally(() => {
        if (asking === asked) asking = undefined;
      });
    asking = asked;
    return asked;
  }

  function withoutFeature(feature: HerdrOptionalFeature): void {
    if (features !== undefined) features = { ...features, [feature]: false };
    logger?.warn(
      { paneId, socketPath, feature },
      'herdr does not know a method its version promised; not using it',
    );
  }

  return {
    paneId,
    socketPath,
    get closed() {
      return closed;
    },
    request,
    features: negotiate,
    forgetFeatures,
    withoutFeature,
    nextId,
    refused,
    close() {
      closed = true;
      for (const socket of inflight) socket.destroy();
      inflight.clear();
    },
  };
}
