/**
 * The herdr pane injector: types messages into a herdr pane and follows the status of the agent
 * running there (R-DL2), over herdr's unix-socket API.
 *
 * herdr serves one request per connection (it reads one line, answers, and closes), so every
 * request opens its own short connection; the status subscription is the one long-lived
 * connection, reopened with backoff whenever it drops.
 */
import type { Socket } from 'node:net';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { ChannelError, ErrorCode } from '../errors.js';
import {
  createLineSplitter,
  decodeLine,
  decodeResult,
  encodeRequest,
  HERDR_AGENT_STATUS_CHANGED,
  HERDR_MAX_READ_LINES,
  type HerdrErrorBody,
  HerdrErrorCode,
  HerdrMethod,
  type HerdrParams,
  type HerdrResults,
} from './herdrProtocol.js';
import { herdrRequest, openSocket } from './herdrRequest.js';
import { type PaneInjector, PaneStatus } from './paneInjector.js';

/** The slice of a pino logger the injector uses. */
export interface HerdrInjectorLogger {
  warn(obj: Record<string, unknown>, msg: string): void;
  error(obj: Record<string, unknown>, msg: string): void;
}

export interface HerdrInjectorOptions {
  /** herdr pane id, preferably the stable form (`w64e95948145ed1-1`) a pane sees in HERDR_PANE_ID. */
  readonly paneId: string;
  /** Socket path; when absent it is resolved from `env` with `resolveHerdrSocketPath`. */
  readonly socketPath?: string | undefined;
  readonly env?: Readonly<Record<string, string | undefined>> | undefined;
  /** How long one request may take. herdr itself gives its UI thread 5 s to answer. Default 7000. */
  readonly requestTimeoutMs?: number | undefined;
  /** Default 2000. */
  readonly connectTimeoutMs?: number | undefined;
  /** First delay before reopening a dropped status subscription; doubles up to the max. Default 100. */
  readonly reconnectMinMs?: number | undefined;
  /** Default 5000. */
  readonly reconnectMaxMs?: number | undefined;
  /** Lines `contains` reads when the caller gives none. Default 200. */
  readonly readLines?: number | undefined;
  readonly logger?: HerdrInjectorLogger | undefined;
}

const SESSION_NAME = /^[A-Za-z0-9._-]{1,64}$/;

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}

/**
 * Where herdr's socket is, in herdr's own order: `HERDR_SOCKET_PATH`, then the named session
 * in `HERDR_SESSION`, then the default session, under `$XDG_CONFIG_HOME` or `~/.config`.
 * Throws a ChannelError (BAD_CONFIG) for a malformed HERDR_SESSION.
 */
export function resolveHerdrSocketPath(
  env: Readonly<Record<string, string | undefined>> = process.env,
): string {
  const explicit = nonEmpty(env.HERDR_SOCKET_PATH);
  if (explicit !== undefined) return explicit;
  const configHome = nonEmpty(env.XDG_CONFIG_HOME) ?? join(nonEmpty(env.HOME) ?? homedir(), '.config');
  const session = nonEmpty(env.HERDR_SESSION);
  if (session === undefined || session === 'default') return join(configHome, 'herdr', 'herdr.sock');
  if (!SESSION_NAME.test(session)) {
    throw new ChannelError(
      ErrorCode.badConfig,
      `HERDR_SESSION=${JSON.stringify(session)} is not a herdr session name (1-64 of A-Z a-z 0-9 . _ -): fix or unset it, or set HERDR_SOCKET_PATH`,
    );
  }
  return join(configHome, 'herdr', 'sessions', session, 'herdr.sock');
}

interface Watcher {
  readonly listener: (status: PaneStatus) => void;
  /** The last status this listener was given, so a listener never hears the same status twice in a row. */
  last: PaneStatus | undefined;
}

/**
 * Creates an injector for one herdr pane. Resolves the socket path at once (and throws on a
 * bad HERDR_SESSION) but connects only when used: each request on its own connection, and the
 * status subscription from the first `watchStatus` until the last unsubscribe or `close`.
 *
 * `inject` does not look at the status itself: holding a message until the pane is ready
 * (R-DL2) is the caller's decision, made from `watchStatus`.
 */
export function createHerdrInjector(options: HerdrInjectorOptions): PaneInjector {
  const paneId = options.paneId;
  if (paneId.trim() === '') {
    throw new ChannelError(ErrorCode.badConfig, 'herdr pane id is empty: pass the pane id (HERDR_PANE_ID)');
  }
  const socketPath = options.socketPath ?? resolveHerdrSocketPath(options.env ?? process.env);
  const requestTimeoutMs = options.requestTimeoutMs ?? 7000;
  const connectTimeoutMs = options.connectTimeoutMs ?? 2000;
  const reconnectMinMs = options.reconnectMinMs ?? 100;
  const reconnectMaxMs = options.reconnectMaxMs ?? 5000;
  const defaultReadLines = options.readLines ?? 200;
  const logger = options.logger;

  let closed = false;
  let sequence = 0;
  const inflight = new Set<Socket>();

  const nextId = (method: string): string => `bridge:${method}:${++sequence}`;

  const closedError = (): ChannelError =>
    new ChannelError(ErrorCode.shuttingDown, `herdr injector for pane ${paneId} is closed`);

  function herdrError(method: HerdrMethod, body: HerdrErrorBody): ChannelError {
    const details = { paneId, socketPath, herdrMethod: method, herdrCode: body.code };
    if (body.code === HerdrErrorCode.paneNotFound) {
      return new ChannelError(
        ErrorCode.paneUnavailable,
        `herdr has no pane ${paneId} (${body.message || body.code}): the pane was closed or the id is wrong; register the agent again with its HERDR_PANE_ID`,
        { details },
      );
    }
    const code = method === HerdrMethod.paneSendInput ? ErrorCode.injectFailed : ErrorCode.paneUnavailable;
    return new ChannelError(
      code,
      `herdr refused ${method} for pane ${paneId}: ${body.code}: ${body.message}`,
      {
        details,
        // A herdr-side timeout while typing is as ambiguous as our own: never retry that blindly.
        retryable: body.code === HerdrErrorCode.timeout && method !== HerdrMethod.paneSendInput,
      },
    );
  }

  /** What to say when a request was sent but no answer came back. */
  function lostAnswer(method: HerdrMethod, what: string, cause?: unknown): ChannelError {
    const details = { paneId, socketPath, herdrMethod: method };
    if (method === HerdrMethod.paneSendInput) {
      // The text may or may not have reached the pane: retrying blindly could type it twice (R-DL5).
      return new ChannelError(
        ErrorCode.injectFailed,
        `${what} while typing into herdr pane ${paneId}: the text may have been typed; check the pane's output for the message id before typing it again`,
        { cause, details: { ...details, ambiguous: true } },
      );
    }
    return new ChannelError(ErrorCode.paneUnavailable, `${what} during ${method} for herdr pane ${paneId}`, {
      cause,
      retryable: true,
      details,
    });
  }

  function unexpectedReply(method: HerdrMethod, reason: string): ChannelError {
    if (method === HerdrMethod.paneSendInput)
      return lostAnswer(method, `herdr gave an unexpected reply (${reason})`);
    return new ChannelError(
      ErrorCode.paneUnavailable,
      `herdr pane ${paneId}: ${reason}: is this herdr version supported?`,
      {
        details: { paneId, socketPath, herdrMethod: method },
      },
    );
  }

  /** One request on its own connection, as herdr serves them. */
  async function request<M extends HerdrMethod>(method: M, params: HerdrParams[M]): Promise<HerdrResults[M]> {
    if (closed) throw closedError();
    return herdrRequest(method, params, {
      socketPath,
      connectTimeoutMs,
      requestTimeoutMs,
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
            return herdrError(method, failure.body);
          case 'unexpected':
            return unexpectedReply(method, failure.reason);
          case 'lost':
            return closed ? closedError() : lostAnswer(method, failure.what, failure.cause);
        }
      },
    });
  }

  // --- status -------------------------------------------------------------------------------

  let status: PaneStatus = PaneStatus.unknown;
  const watchers = new Set<Watcher>();
  // Bumped whenever the subscription is torn down, so callbacks of an old one do nothing.
  let generation = 0;
  let subscriptionSocket: Socket | undefined;
  let running = false;
  let retryTimer: NodeJS.Timeout | undefined;
  let backoffMs = reconnectMinMs;
  let lastFailure: string | undefined;
  // herdr also accepts positional ids ("1-2") but reports stable ones; learn the stable one.
  const paneIds = new Set([paneId]);

  function deliver(watcher: Watcher): void {
    if (!watchers.has(watcher) || watcher.last === status) return;
    watcher.last = status;
    try {
      watcher.listener(status);
    } catch (err) {
      logger?.error({ err, paneId }, 'pane status listener threw');
    }
  }

  function setStatus(next: PaneStatus): void {
    if (next === status) return;
    status = next;
    for (const watcher of [...watchers]) deliver(watcher);
  }

  function startWatching(): void {
    if (running || closed) return;
    running = true;
    backoffMs = reconnectMinMs;
    subscribe();
  }

  function stopWatching(): void {
    running = false;
    generation++;
    clearTimeout(retryTimer);
    retryTimer = undefined;
    subscriptionSocket?.destroy();
    subscriptionSocket = undefined;
    status = PaneStatus.unknown;
  }

  /** The subscription failed or dropped: status is unknown until it is back. */
  function drop(gen: number, err: unknown): void {
    if (gen !== generation || !running) return;
    generation++;
    subscriptionSocket?.destroy();
    subscriptionSocket = undefined;
    setStatus(PaneStatus.unknown);
    const message = err instanceof Error ? err.message : String(err);
    // One line per streak of the same failure, not one per retry.
    if (message !== lastFailure) {
      logger?.warn(
        { err, paneId, socketPath, retryInMs: backoffMs },
        'herdr status subscription lost; retrying',
      );
      lastFailure = message;
    }
    retryTimer = setTimeout(() => {
      retryTimer = undefined;
      subscribe();
    }, backoffMs);
    backoffMs = Math.min(backoffMs * 2, reconnectMaxMs);
  }

  function subscribe(): void {
    if (!running || closed) return;
    const gen = ++generation;
    openSocket(socketPath, connectTimeoutMs).then(
      (socket) => {
        if (gen !== generation) {
          socket.destroy();
          return;
        }
        subscriptionSocket = socket;
        listen(gen, socket);
      },
      (err: unknown) => drop(gen, err),
    );
  }

  function listen(gen: number, socket: Socket): void {
    const id = nextId(HerdrMethod.eventsSubscribe);
    const splitter = createLineSplitter();
    let acked = false;
    let sawEvent = false;
    const ackTimer = setTimeout(
      () =>
        drop(
          gen,
          new Error(`herdr did not acknowledge the status subscription within ${requestTimeoutMs} ms`),
        ),
      requestTimeoutMs,
    );

    const onLine = (line: string): void => {
      const message = decodeLine(line);
      switch (message.kind) {
        case 'invalid':
          logger?.warn(
            { paneId, reason: message.reason },
            'ignoring malformed line on herdr status subscription',
          );
          return;
        case 'error':
          if (acked || (message.id !== id && message.id !== '')) return;
          clearTimeout(ackTimer);
          drop(gen, herdrError(HerdrMethod.eventsSubscribe, message.error));
          return;
        case 'result': {
          if (acked || message.id !== id) return;
          clearTimeout(ackTimer);
          const decoded = decodeResult(HerdrMethod.eventsSubscribe, message.result);
          if (!decoded.ok) {
            drop(gen, new Error(decoded.reason));
            return;
          }
          acked = true;
          backoffMs = reconnectMinMs;
          lastFailure = undefined;
          // Without a status filter herdr pushes only changes, so ask for the current one. Asked
          // after the ack, so any change after it arrives as an event; an event that beat the
          // answer is at least as new, so the answer only counts when no event came first.
          request(HerdrMethod.paneGet, { pane_id: paneId }).then(
            (info) => {
              if (gen !== generation) return;
              paneIds.add(info.pane.pane_id);
              if (!sawEvent) setStatus(info.pane.agent_status);
            },
            (err: unknown) => drop(gen, err),
          );
          return;
        }
        case 'statusChanged':
          // herdr filters by pane already; checking again keeps a confused server from
          // gating this pane on another pane's agent.
          if (!acked || !paneIds.has(message.paneId)) return;
          sawEvent = true;
          setStatus(message.status);
          return;
        default:
          return;
      }
    };

    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      if (gen !== generation) return;
      for (const line of splitter.push(chunk)) {
        if (gen !== generation) return;
        onLine(line);
      }
      if (splitter.takeOverflow()) logger?.warn({ paneId }, 'dropped an over-long line from herdr');
    });
    socket.on('error', (err) => {
      clearTimeout(ackTimer);
      drop(gen, err);
    });
    socket.on('close', () => {
      clearTimeout(ackTimer);
      drop(gen, new Error(`herdr closed the status subscription for pane ${paneId}`));
    });
    socket.write(
      encodeRequest(id, HerdrMethod.eventsSubscribe, {
        subscriptions: [{ type: HERDR_AGENT_STATUS_CHANGED, pane_id: paneId }],
      }),
    );
  }

  return {
    // SHIM (to be replaced by verified submission, R-DL6): `type` sends the text with Enter in
    // one step, as the old inject did, and reports it submitted; `submit` and `locate` are trivial.
    async type({ text }) {
      if (text === '') {
        // Enter alone would submit whatever the user has half-typed (R-DL2).
        throw new ChannelError(
          ErrorCode.injectFailed,
          `refusing to type an empty message into herdr pane ${paneId}`,
        );
      }
      await request(HerdrMethod.paneSendInput, { pane_id: paneId, text, keys: ['Enter'] });
      return { kind: 'submitted', how: 'pane.send_input with Enter (shim)' };
    },
    async submit() {
      return { kind: 'submitted', how: 'shim' };
    },
    async locate(message) {
      return (await this.contains(message.marker)) ? 'submitted' : 'absent';
    },

    async contains(marker, lines = defaultReadLines) {
      const result = await request(HerdrMethod.paneRead, {
        pane_id: paneId,
        // Soft wraps joined, so a marker the pane width broke in two still matches.
        source: 'recent_unwrapped',
        lines: Math.max(1, Math.min(Math.trunc(lines), HERDR_MAX_READ_LINES)),
        format: 'text',
        strip_ansi: true,
      });
      return result.read.text.includes(marker);
    },

    watchStatus(listener) {
      const watcher: Watcher = { listener, last: undefined };
      if (closed) {
        queueMicrotask(() => listener(PaneStatus.unknown));
        return () => {};
      }
      watchers.add(watcher);
      startWatching();
      // Async so the caller has its unsubscribe function before the first call.
      queueMicrotask(() => deliver(watcher));
      return () => {
        if (!watchers.delete(watcher)) return;
        if (watchers.size === 0) stopWatching();
      };
    },

    async close() {
      if (closed) return;
      closed = true;
      watchers.clear();
      stopWatching();
      for (const socket of inflight) socket.destroy();
      inflight.clear();
    },
  };
}
