/**
 * The herdr pane injector: types messages into a herdr pane, submits and verifies them (R-DL6),
 * finds them again after a crash (R-DL5), and follows the status of the agent running there
 * (R-DL2), over herdr's unix-socket API.
 *
 * What the server can do is learned once per injector from `ping` (herdr has no capability
 * handshake: its `version` says, see `herdrFeatures`) and learned again after anything that
 * may mean herdr restarted (a failed connection, a dropped subscription) or when a method
 * turns out to be unknown (`invalid_request`). From herdr 0.8.2 on, `agent.prompt` types and
 * submits in one request, refusing a blocked agent without typing; before that, typing
 * (`pane.send_input` with text only) and Enter (its own `pane.send_input`, after a pause) are
 * two requests, each checked by reading the pane back.
 *
 * herdr serves one request per connection (it reads one line, answers, and closes), so every
 * request opens its own short connection; the status subscription is the one long-lived
 * connection, reopened with backoff whenever it drops.
 */
import type { Socket } from 'node:net';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { BridgeError, ErrorCode } from '../errors.js';
import {
  createLineSplitter,
  decodeLine,
  decodeResult,
  encodeRequest,
  HERDR_AGENT_STATUS_CHANGED,
  HERDR_MAX_READ_LINES,
  type HerdrErrorBody,
  HerdrErrorCode,
  type HerdrFeatures,
  HerdrMethod,
  type HerdrParams,
  type HerdrResults,
  herdrFeatures,
  LEGACY_HERDR_FEATURES,
} from './herdrProtocol.js';
import { herdrRequest, openSocket } from './herdrRequest.js';
import {
  DEFAULT_PROMPT_LINE,
  knownAgentScreen,
  locateOnScreen,
  pendingInput,
  shownOnScreen,
} from './herdrScreen.js';
import {
  DeferReason,
  type PaneHold,
  type PaneInjector,
  type PaneMessage,
  PaneStatus,
  type SubmitOutcome,
  type TypeOutcome,
  type Whereabouts,
} from './paneInjector.js';
import { neutralise } from './paneText.js';

/** The slice of a pino logger the injector uses. */
export interface HerdrInjectorLogger {
  info?(obj: Record<string, unknown>, msg: string): void;
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
  /** Lines `contains` and `locate` read when the caller gives none. Default 200. */
  readonly readLines?: number | undefined;
  /**
   * Pause between typing and Enter where herdr has no `agent.prompt`. Default 300, what herdr's
   * own prompt waits (AGENT_PROMPT_SUBMIT_DELAY, from 0.8.0); never less than 40.
   */
  readonly submitDelayMs?: number | undefined;
  /** How long to read the pane back for typed text to show, or to leave the input area. Default 1500. */
  readonly confirmTimeoutMs?: number | undefined;
  /** Between two reads of that. Default 50. */
  readonly pollIntervalMs?: number | undefined;
  /** Enter presses `submit` makes at most: the first, and this many minus one again. Default 3. */
  readonly maxEnterPresses?: number | undefined;
  /**
   * How long `agent.prompt` waits, in herdr, for the agent to react. Default 5000, herdr's own
   * limit for a prompt's first state change.
   */
  readonly promptWaitMs?: number | undefined;
  /** A line that starts the agent's input area. Default `DEFAULT_PROMPT_LINE`. */
  readonly promptLine?: RegExp | undefined;
  readonly logger?: HerdrInjectorLogger | undefined;
}

const SESSION_NAME = /^[A-Za-z0-9._-]{1,64}$/;

/** Statuses after an `agent.prompt` that show the agent took it: a turn started, ended, or asks. */
const PROMPT_TOOK: readonly PaneStatus[] = [PaneStatus.working, PaneStatus.done, PaneStatus.blocked];

/** So a caller that never calls `submit` after an `agent.prompt` cannot grow the set without bound. */
const MAX_REMEMBERED_PROMPTS = 256;

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}

/**
 * Where herdr's socket is, in herdr's own order: `HERDR_SOCKET_PATH`, then the named session
 * in `HERDR_SESSION`, then the default session, under `$XDG_CONFIG_HOME` or `~/.config`.
 * Throws a BridgeError (BAD_CONFIG) for a malformed HERDR_SESSION.
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
    throw new BridgeError(
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

/** What a request writes into the pane, which decides how an unanswered request is worded. */
type Typing = 'text' | 'enter' | undefined;

/** Who occupies the pane, as far as herdr tells: its terminal and the agent herdr detected. */
interface Occupant {
  readonly terminalId: string | undefined;
  readonly agent: string | undefined;
}

function herdrCodeOf(err: unknown): unknown {
  return err instanceof BridgeError ? err.details?.herdrCode : undefined;
}

/**
 * Creates an injector for one herdr pane. Resolves the socket path at once (and throws on a
 * bad HERDR_SESSION) but connects only when used: each request on its own connection, and the
 * status subscription from the first `watchStatus` until the last unsubscribe or `close`.
 *
 * `type` and `submit` look at the status themselves and never type into a blocked or working
 * agent, but holding a message until the pane is ready (R-DL2) is still the caller's
 * decision, made from `watchStatus`.
 */
export function createHerdrInjector(options: HerdrInjectorOptions): PaneInjector {
  const paneId = options.paneId;
  if (paneId.trim() === '') {
    throw new BridgeError(ErrorCode.badConfig, 'herdr pane id is empty: pass the pane id (HERDR_PANE_ID)');
  }
  const socketPath = options.socketPath ?? resolveHerdrSocketPath(options.env ?? process.env);
  const requestTimeoutMs = options.requestTimeoutMs ?? 7000;
  const connectTimeoutMs = options.connectTimeoutMs ?? 2000;
  const reconnectMinMs = options.reconnectMinMs ?? 100;
  const reconnectMaxMs = options.reconnectMaxMs ?? 5000;
  const defaultReadLines = options.readLines ?? 200;
  const submitDelayMs = Math.max(40, options.submitDelayMs ?? 300);
  const confirmTimeoutMs = options.confirmTimeoutMs ?? 1500;
  const pollIntervalMs = options.pollIntervalMs ?? 50;
  const maxEnterPresses = Math.max(1, options.maxEnterPresses ?? 3);
  const promptWaitMs = options.promptWaitMs ?? 5000;
  const promptLine = options.promptLine ?? DEFAULT_PROMPT_LINE;
  const logger = options.logger;

  let closed = false;
  let sequence = 0;
  const inflight = new Set<Socket>();

  const nextId = (method: string): string => `bridge:${method}:${++sequence}`;

  const closedError = (): BridgeError =>
    new BridgeError(ErrorCode.shuttingDown, `herdr injector for pane ${paneId} is closed`);

  function herdrError(method: HerdrMethod, body: HerdrErrorBody, typing: Typing): BridgeError {
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

  /**
   * One request on its own connection, as herdr serves them. Anything but an answer from
   * herdr (no connection, no reply) may mean herdr restarted: its features are asked again.
   */
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
              return herdrError(method, failure.body, extra.typing);
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

  // --- what the server can do ---------------------------------------------------------------

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

  /** The server's features, asked once and kept until herdr may have restarted. */
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

  /** herdr said it does not know a method after all: stop using it until herdr is asked again. */
  function withoutFeature(feature: 'agentPrompt' | 'sessionSnapshot'): void {
    if (features !== undefined) features = { ...features, [feature]: false };
    logger?.warn(
      { paneId, socketPath, feature },
      'herdr does not know a method its version promised; not using it',
    );
  }

  // --- reading the pane ---------------------------------------------------------------------

  async function readScreen(lines = defaultReadLines): Promise<string> {
    const result = await request(HerdrMethod.paneRead, {
      pane_id: paneId,
      // Soft wraps joined, so a marker the pane width broke in two still matches.
      source: 'recent_unwrapped',
      lines: Math.max(1, Math.min(Math.trunc(lines), HERDR_MAX_READ_LINES)),
      format: 'text',
      strip_ansi: true,
    });
    return result.read.text;
  }

  async function whereIs(message: PaneMessage): Promise<Whereabouts> {
    return locateOnScreen(await readScreen(), message, promptLine);
  }

  /**
   * The agent's status now, from herdr. A status the subscription reports that is not ready
   * wins over `pane.get`'s answer: either is enough to keep hands off.
   */
  async function statusNow(): Promise<PaneStatus> {
    const info = await request(HerdrMethod.paneGet, { pane_id: paneId });
    paneIds.add(info.pane.pane_id);
    const fetched = info.pane.agent_status;
    if (fetched === PaneStatus.blocked || status === PaneStatus.blocked) return PaneStatus.blocked;
    if (fetched === PaneStatus.working || status === PaneStatus.working) return PaneStatus.working;
    return fetched;
  }

  /** Runs `probe` until it returns a value or `confirmTimeoutMs` has passed. */
  async function pollFor<T>(probe: () => Promise<T | undefined>): Promise<T | undefined> {
    const deadline = Date.now() + confirmTimeoutMs;
    for (;;) {
      const found = await probe();
      if (found !== undefined) return found;
      if (Date.now() >= deadline) return undefined;
      await sleep(pollIntervalMs);
    }
  }

  const deferred = (reason: DeferReason, detail: string): TypeOutcome & SubmitOutcome => ({
    kind: 'deferred',
    reason,
    detail,
  });

  // --- typing -------------------------------------------------------------------------------

  // Messages `agent.prompt` typed and submitted, for `submit` to confirm without reading.
  const prompted = new Set<string>();

  function rememberPrompted(marker: string): void {
    prompted.add(marker);
    if (prompted.size > MAX_REMEMBERED_PROMPTS) {
      const oldest = prompted.values().next().value;
      if (oldest !== undefined) prompted.delete(oldest);
    }
  }

  /** herdr types and submits: undefined when it cannot for this pane, so the caller types by keys. */
  async function typeByPrompt(message: PaneMessage): Promise<TypeOutcome | undefined> {
    try {
      await request(
        HerdrMethod.agentPrompt,
        {
          target: paneId,
          text: message.text,
          wait: { until: PROMPT_TOOK, timeout_ms: promptWaitMs },
        },
        { typing: 'text', timeoutMs: promptWaitMs + requestTimeoutMs },
      );
      rememberPrompted(message.marker);
      return { kind: 'submitted', how: 'herdr agent.prompt' };
    } catch (err) {
      switch (herdrCodeOf(err)) {
        case HerdrErrorCode.agentBlocked:
          return deferred(
            DeferReason.blocked,
            `herdr refused agent.prompt: the agent in pane ${paneId} waits at a dialog; nothing was typed`,
          );
        case HerdrErrorCode.invalidRequest:
          withoutFeature('agentPrompt');
          return undefined;
        case HerdrErrorCode.agentNotFound:
          // No agent herdr recognises runs there (a plain line reader, say), and nothing was
          // written: type it key by key instead.
          return undefined;
        case HerdrErrorCode.agentNotReady:
          // An agent herdr knows, still starting or gone from the foreground: its shell may be
          // what reads keys now, so type nothing.
          return deferred(
            DeferReason.busy,
            `herdr says the agent in pane ${paneId} is not ready for a prompt; nothing was typed`,
          );
        case HerdrErrorCode.agentPromptStalled:
        case HerdrErrorCode.timeout:
          // Typed and Enter pressed, but the agent did not visibly react: `submit` reads the
          // pane back and presses Enter again if the text still waits in the input area.
          return { kind: 'typed' };
        case HerdrErrorCode.agentNotRunning:
          throw new BridgeError(
            ErrorCode.injectFailed,
            `the agent in herdr pane ${paneId} went away while it was prompted: the text may have been typed; check the pane's output for the message id before typing it again`,
            {
              cause: err,
              details: { paneId, socketPath, herdrCode: HerdrErrorCode.agentNotRunning, ambiguous: true },
            },
          );
        default:
          throw err;
      }
    }
  }

  /** Types without Enter (`pane.send_input` text only), then waits to see it in the input area. */
  async function typeByKeys(message: PaneMessage): Promise<TypeOutcome> {
    await request(HerdrMethod.paneSendInput, { pane_id: paneId, text: message.text }, { typing: 'text' });
    const seen = await pollFor(async () => {
      const where = await whereIs(message);
      return where === 'absent' ? undefined : where;
    });
    if (seen === 'typed') return { kind: 'typed' };
    if (seen === 'submitted')
      return { kind: 'submitted', how: 'herdr pane.send_input (the agent took the text as typed)' };
    return deferred(
      DeferReason.notShown,
      `typed into herdr pane ${paneId}, but it did not show in the input area within ${confirmTimeoutMs} ms (dropped, or the agent is not at its prompt)`,
    );
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
  let occupant: Occupant | undefined;

  /**
   * herdr has no agent instance id: the same terminal and the same agent label is what it
   * calls the same occupant (`agent.wait`). Its status events carry the label only, so a new
   * occupant is noticed (and logged) when the label or, at a resubscription, the terminal
   * changes; an agent restarted under the same label in the same terminal looks the same.
   */
  function noteOccupant(seen: Partial<Occupant>): void {
    const previous = occupant;
    const next: Occupant = {
      terminalId: seen.terminalId ?? previous?.terminalId,
      agent: seen.agent ?? previous?.agent,
    };
    occupant = next;
    if (previous === undefined) return;
    const changed =
      (previous.terminalId !== undefined && next.terminalId !== previous.terminalId) ||
      (previous.agent !== undefined && next.agent !== previous.agent);
    if (changed) logger?.info?.({ paneId, was: previous, now: next }, 'a new agent occupies the herdr pane');
  }

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
    // herdr may have restarted as another version.
    forgetFeatures();
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

  /**
   * The pane's status and occupant right after the subscription's ack: from `session.snapshot`
   * where herdr has it (0.7.2 on), else, or when the snapshot does not list the pane under an
   * id we know (a positional id), from `pane.get`.
   */
  async function currentPane(): Promise<{ status: PaneStatus; occupant: Partial<Occupant> }> {
    const known = await negotiate();
    if (known.sessionSnapshot) {
      try {
        const { snapshot } = await request(HerdrMethod.sessionSnapshot, {});
        const pane = snapshot.panes.find((candidate) => paneIds.has(candidate.pane_id));
        if (pane !== undefined) {
          const agent = snapshot.agents.find((candidate) => candidate.pane_id === pane.pane_id);
          return {
            status: pane.agent_status,
            occupant: {
              terminalId: pane.terminal_id ?? agent?.terminal_id,
              agent: pane.agent ?? agent?.agent,
            },
          };
        }
      } catch (err) {
        if (herdrCodeOf(err) !== HerdrErrorCode.invalidRequest) throw err;
        withoutFeature('sessionSnapshot');
      }
    }
    const { pane } = await request(HerdrMethod.paneGet, { pane_id: paneId });
    paneIds.add(pane.pane_id);
    return { status: pane.agent_status, occupant: { terminalId: pane.terminal_id, agent: pane.agent } };
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
          drop(gen, herdrError(HerdrMethod.eventsSubscribe, message.error, undefined));
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
          // herdr pushes only changes after the ack (it replays no old status events), so ask
          // for the current status. Asked after the ack, so any change after it arrives as an
          // event; an event that beat the answer is at least as new, so the answer only counts
          // when no event came first.
          currentPane().then(
            (current) => {
              if (gen !== generation) return;
              noteOccupant(current.occupant);
              if (!sawEvent) setStatus(current.status);
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
          if (message.agent !== undefined) noteOccupant({ agent: message.agent });
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

  // --- the injector -------------------------------------------------------------------------

  /** Why herdr's status keeps hands off the pane, or undefined. */
  function statusHold(now: PaneStatus): PaneHold | undefined {
    if (now === PaneStatus.blocked) {
      return { reason: DeferReason.blocked, detail: `the agent in herdr pane ${paneId} waits at a dialog` };
    }
    if (now === PaneStatus.working) {
      return { reason: DeferReason.busy, detail: `the agent in herdr pane ${paneId} is working` };
    }
    return undefined;
  }

  /** Why the screen keeps hands off the pane (a dialog, someone's half-typed input), or undefined. */
  function screenHold(screen: string): PaneHold | undefined {
    // herdr's status and the agent table agree on most dialogs; either is enough to hold.
    const known = knownAgentScreen(screen);
    if (known?.blocked) {
      return {
        reason: DeferReason.blocked,
        detail: `herdr pane ${paneId} shows a dialog ("${known.blocked}")`,
      };
    }
    const pending = pendingInput(screen, promptLine);
    if (pending !== undefined && pending !== '') {
      return {
        reason: DeferReason.dirtyInput,
        detail: `the input area of herdr pane ${paneId} already holds text (${JSON.stringify(pending.slice(0, 40))})`,
      };
    }
    return undefined;
  }

  // Typed as keys, a message's control characters would act and its bidi or zero-width ones
  // would change what is read: the neutralisation the tmux injector applies too.
  function checked(message: PaneMessage): PaneMessage {
    return { text: neutralise(message.text), marker: message.marker };
  }

  async function holdNow(): Promise<PaneHold | undefined> {
    return statusHold(await statusNow()) ?? screenHold(await readScreen());
  }

  return {
    inspect: holdNow,

    async type(sent) {
      const message = checked(sent);
      if (message.text === '') {
        // Enter alone would submit whatever the user has half-typed (R-DL2).
        throw new BridgeError(
          ErrorCode.injectFailed,
          `refusing to type an empty message into herdr pane ${paneId}`,
        );
      }
      const known = await negotiate();
      const held = statusHold(await statusNow());
      if (held) return deferred(held.reason, held.detail);
      const screen = await readScreen();
      // Typed before a crash, or already taken: never type it twice (R-DL5).
      const where = locateOnScreen(screen, message, promptLine);
      if (where === 'typed') return { kind: 'typed' };
      if (where === 'submitted') return { kind: 'submitted', how: 'already in herdr pane transcript' };
      const onScreen = screenHold(screen);
      if (onScreen) return deferred(onScreen.reason, onScreen.detail);
      // Folded into one line unless the table knows the agent: one message, one input.
      const typed = { ...message, text: shownOnScreen(screen, message.text) };
      if (known.agentPrompt) {
        const outcome = await typeByPrompt(typed);
        if (outcome !== undefined) return outcome;
      }
      return typeByKeys(typed);
    },

    async submit(sent) {
      const message = checked(sent);
      if (prompted.delete(message.marker)) return { kind: 'submitted', how: 'herdr agent.prompt' };
      // herdr's own prompt waits before Enter, so a TUI that reads a paste in chunks has it all.
      await sleep(submitDelayMs);
      let presses = 0;
      for (;;) {
        const where = await whereIs(message);
        if (where === 'submitted' || (where === 'absent' && presses > 0)) {
          return {
            kind: 'submitted',
            how:
              presses === 0
                ? 'already left the input area'
                : 'herdr pane.send_input Enter; the text left the input area',
          };
        }
        if (where === 'absent') {
          return {
            kind: 'not-submitted',
            detail: `the message is not in the input area of herdr pane ${paneId}: nothing was pressed`,
          };
        }
        if (presses >= maxEnterPresses) {
          return {
            kind: 'not-submitted',
            detail: `Enter pressed ${presses} times in herdr pane ${paneId} and the text still waits in the input area`,
          };
        }
        const now = await statusNow();
        if (now === PaneStatus.blocked) {
          return deferred(
            DeferReason.blocked,
            `the agent in herdr pane ${paneId} waits at a dialog: Enter would answer it; nothing was pressed`,
          );
        }
        if (now === PaneStatus.working) {
          if (presses > 0)
            return { kind: 'submitted', how: 'herdr pane.send_input Enter; the agent is working' };
          return deferred(DeferReason.busy, `the agent in herdr pane ${paneId} is working: Enter waits`);
        }
        await request(HerdrMethod.paneSendInput, { pane_id: paneId, keys: ['Enter'] }, { typing: 'enter' });
        presses++;
        const took = await pollFor(async () => {
          if ((await statusNow()) === PaneStatus.working) return 'the agent is working';
          return (await whereIs(message)) === 'typed' ? undefined : 'the text left the input area';
        });
        if (took !== undefined) return { kind: 'submitted', how: `herdr pane.send_input Enter; ${took}` };
      }
    },

    locate: (message) => whereIs(checked(message)),

    async contains(marker, lines = defaultReadLines) {
      return (await readScreen(lines)).includes(marker);
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
