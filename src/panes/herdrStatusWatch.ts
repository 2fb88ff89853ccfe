/**
 * The status of the agent in one herdr pane (R-DL2): a `pane.agent_status_changed`
 * subscription, the one long-lived connection to herdr, reopened with backoff whenever it
 * drops, and who occupies the pane as far as herdr tells.
 */
import type { Socket } from 'node:net';
import { createLineSplitter } from '../text/lineSplitter.js';
import {
  decodeLine,
  decodeResult,
  encodeRequest,
  HERDR_AGENT_STATUS_CHANGED,
  HerdrErrorCode,
  HerdrMethod,
} from './herdrProtocol.js';
import { openSocket } from './herdrRequest.js';
import { type HerdrLogger, type HerdrSession, herdrCodeOf } from './herdrSession.js';
import { PaneStatus } from './paneInjector.js';

export interface HerdrStatusWatchOptions {
  /** How long herdr may take to acknowledge the subscription. */
  readonly requestTimeoutMs: number;
  readonly connectTimeoutMs: number;
  /** First delay before reopening a dropped subscription; doubles up to the max. */
  readonly reconnectMinMs: number;
  readonly reconnectMaxMs: number;
  readonly logger?: HerdrLogger | undefined;
}

export interface HerdrStatusWatch {
  /**
   * The agent's status now, from herdr. A status the subscription reports that is not ready
   * wins over `pane.get`'s answer: either is enough to keep hands off.
   */
  now(): Promise<PaneStatus>;
  /** The injector's `watchStatus`: subscribed from the first listener until the last one leaves. */
  watch(listener: (status: PaneStatus) => void): () => void;
  /** Drops every listener and the subscription. */
  close(): void;
}

interface Watcher {
  readonly listener: (status: PaneStatus) => void;
  /** The last status this listener was given, so a listener never hears the same status twice in a row. */
  last: PaneStatus | undefined;
}

/** Who occupies the pane, as far as herdr tells: its terminal and the agent herdr detected. */
interface Occupant {
  readonly terminalId: string | undefined;
  readonly agent: string | undefined;
}

export function createHerdrStatusWatch(
  session: HerdrSession,
  options: HerdrStatusWatchOptions,
): HerdrStatusWatch {
  const { paneId, socketPath } = session;
  const { requestTimeoutMs, connectTimeoutMs, reconnectMinMs, reconnectMaxMs, logger } = options;

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

  async function now(): Promise<PaneStatus> {
    const info = await session.request(HerdrMethod.paneGet, { pane_id: paneId });
    paneIds.add(info.pane.pane_id);
    const fetched = info.pane.agent_status;
    if (fetched === PaneStatus.blocked || status === PaneStatus.blocked) return PaneStatus.blocked;
    if (fetched === PaneStatus.working || status === PaneStatus.working) return PaneStatus.working;
    return fetched;
  }

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
    if (running || session.closed) return;
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
    session.forgetFeatures();
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
    if (!running || session.closed) return;
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
    const known = await session.features();
    if (known.sessionSnapshot) {
      try {
        const { snapshot } = await session.request(HerdrMethod.sessionSnapshot, {});
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
        session.withoutFeature('sessionSnapshot');
      }
    }
    const { pane } = await session.request(HerdrMethod.paneGet, { pane_id: paneId });
    paneIds.add(pane.pane_id);
    return { status: pane.agent_status, occupant: { terminalId: pane.terminal_id, agent: pane.agent } };
  }

  function listen(gen: number, socket: Socket): void {
    const id = session.nextId(HerdrMethod.eventsSubscribe);
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
          drop(gen, session.refused(HerdrMethod.eventsSubscribe, message.error, undefined));
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

  return {
    now,

    watch(listener) {
      const watcher: Watcher = { listener, last: undefined };
      if (session.closed) {
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

    close() {
      watchers.clear();
      stopWatching();
    },
  };
}
