import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { StringDecoder } from 'node:string_decoder';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { GatewayProcess } from './GatewayProcess.js';
import { callTool, connectMcp, type DrainedMessage, type Registered } from './mcpClient.js';

/**
 * Message streams between entities on gateway daemons, as the chaos tests run them while they
 * kill things: senders are mains driven over MCP, one call at a time per stream, each message
 * under an idempotency key and retried on every failure (tool error, timeout, connection lost;
 * the client reconnected), as an agent would; receivers are mains that drain and workers whose
 * tmux pane appends what is typed to a file. At the end `findings` says what was confirmed and
 * never arrived, what arrived under another msgId, out of send order (R-DL4), or more than once.
 */

/** An entity as `agentbridge register --json` prints it, and the gateway it is on. */
export interface Entity<G extends string = string> extends Registered {
  kind: string;
  on: G;
}

/** One bridge_drain call that returned messages: when it went out and came back. */
export interface DrainCall {
  drainer: string;
  startedAt: number;
  endedAt: number;
}

export interface Arrival {
  seq: number;
  msgId: string;
  at: number;
  /** The drain that handed it over; none for a line typed into the pane. */
  drain?: DrainCall;
}

/** Messages from one sender to one recipient, sent one after the other (R-DL4's unit). */
export interface Stream<G extends string = string> {
  id: string;
  sender: Entity<G>;
  recipient: Entity<G>;
  /** The recipient as the sender names it. */
  address: string;
  /** msgId and confirmation time of seq i at index i - 1. */
  confirmed: string[];
  confirmedAt: number[];
  /** A seq that never got a msgId before the stream's deadline (may or may not arrive). */
  unconfirmed?: number;
  calls: number;
  /** Retries answered `duplicate: true`: the first call had been accepted. */
  idempotentRepeats: number;
  /** Failed calls: when each went out, how long it took, and its error code. */
  failed: Array<{ at: number; ms: number; code: string }>;
  arrivals: Arrival[];
  /** seq → first arrival. */
  firstSeen: Map<number, Arrival>;
}

/** An MCP client that knows when its connection is lost. */
export type LosableClient = Client & { lost: AbortSignal };

/** Registers an entity on `gateway` with `agentbridge register ARGS --json`. */
export async function registerOn<G extends string>(
  gateway: GatewayProcess,
  on: G,
  args: string[],
): Promise<Entity<G>> {
  const result = await gateway.cli(['register', ...args, '--json']);
  if (result.code !== 0) throw new Error(`agentbridge register ${args.join(' ')} failed: ${result.stderr}`);
  return { ...(JSON.parse(result.stdout) as Registered & { kind: string }), on };
}

/** `agentbridge register` arguments for a worker in the tmux pane `pane` of the server at `socket`. */
export function tmuxWorkerArgs(name: string, pane: string, socket: string): string[] {
  return ['--kind', 'worker', '--name', name, '--tmux', pane, '--tmux-socket', socket];
}

/** Returns the complete lines appended to `file` since the previous call (none while it is missing). */
export function tailLines(file: string): () => string[] {
  let offset = 0;
  let partial = '';
  const decoder = new StringDecoder('utf8');
  return () => {
    let fd: number;
    try {
      fd = openSync(file, 'r');
    } catch {
      return [];
    }
    try {
      const size = fstatSync(fd).size;
      if (size <= offset) return [];
      const chunk = Buffer.alloc(size - offset);
      offset += readSync(fd, chunk, 0, chunk.length, offset);
      const parts = (partial + decoder.write(chunk)).split('\n');
      partial = parts.pop() ?? '';
      return parts.filter((line) => line.length > 0);
    } finally {
      closeSync(fd);
    }
  };
}

/** How many of a stream's failed calls failed with each code. */
export function errorCounts(s: Stream): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const { code } of s.failed) counts[code] = (counts[code] ?? 0) + 1;
  return counts;
}

/** A failure's short code: `BROKER_UNAVAILABLE`, `MCP error -32001: Request timed out`, ... */
export function errorCode(err: unknown): string {
  const message = String((err as Error)?.message ?? err);
  const code = /^(MCP error -?\d+: [^.:(]*|[A-Z_]{3,}\b)/.exec(message)?.[1];
  return (code ?? message.replace(/[0-9a-f-]{36}/g, '…')).trim().slice(0, 80);
}

export interface StreamRunOptions<G extends string> {
  /** Where the gateway `on` serves MCP now. */
  mcpUrlOf: (on: G) => string;
  /** Most messages a stream has confirmed and not yet seen delivered: bounds the final drain. */
  window: number;
  /** Pause between two sends of one stream. */
  paceMs: number;
  /** Pause before retrying a failed send, by its error code (default 50 ms). */
  retryPauseMs?: (code: string) => number;
  /** How long one bridge_send or bridge_drain may take before the client gives up on it. */
  callTimeoutMs?: number;
}

const paneLine = /^\[bridge SEND from (\S+)@(\S+) msg ([0-9a-f-]{36})\] (.*)$/;

/** The streams of one chaos test, their senders and receivers, and what they saw. */
export class StreamRun<G extends string = string> {
  readonly streams: Stream<G>[] = [];
  /** Every arrival of every stream, in the order the test saw them. */
  readonly arrivals: Array<{ stream: Stream<G>; arrival: Arrival }> = [];
  /** Lines and messages that belong to no stream (e.g. another test's broadcast on the shared broker). */
  foreign = 0;
  drainErrors = 0;
  connectionsLost = 0;
  private readonly clients = new Set<Client>();
  private readonly byId = new Map<string, Stream<G>>();
  private sending = false;
  private receiving = false;
  private giveUpAt = Number.POSITIVE_INFINITY;
  private senders: Promise<void>[] = [];
  private receivers: Promise<void>[] = [];

  constructor(private readonly options: StreamRunOptions<G>) {}

  stream(id: string, sender: Entity<G>, recipient: Entity<G>): Stream<G> {
    const s: Stream<G> = {
      id,
      sender,
      recipient,
      address: `${recipient.name}@${recipient.host}`,
      confirmed: [],
      confirmedAt: [],
      calls: 0,
      idempotentRepeats: 0,
      failed: [],
      arrivals: [],
      firstSeen: new Map(),
    };
    this.streams.push(s);
    this.byId.set(id, s);
    return s;
  }

  byStream(id: string): Stream<G> | undefined {
    return this.byId.get(id);
  }

  /**
   * An MCP client that `close` closes if the test does not. When its gateway dies mid-answer,
   * the SDK reports the broken response stream (`SSE stream disconnected`) through onerror but
   * leaves the call pending until its timeout; an agent that notices the connection is gone
   * gives up on the call at once, so `lost` aborts the calls made with it.
   */
  async connect(on: G, token: string): Promise<LosableClient> {
    const client = await connectMcp(this.options.mcpUrlOf(on), token);
    const lost = new AbortController();
    client.onerror = (err) => {
      const message = String(err?.message);
      // Closing the client aborts its own streams (an AbortError): not a lost connection.
      if (lost.signal.aborted || !this.clients.has(client) || /AbortError/.test(message)) return;
      if (/SSE stream disconnected|Failed to reconnect/.test(message)) {
        this.connectionsLost++;
        lost.abort(err);
      }
    };
    this.clients.add(client);
    return Object.assign(client, { lost: lost.signal });
  }

  /**
   * A tool call that gives up after `timeoutMs`, or when the client's connection is lost (the
   * signal is linked per call: the SDK would keep a listener per call on `lost` otherwise).
   */
  call(client: LosableClient, name: string, args: Record<string, unknown>, timeoutMs: number) {
    return callTool(client, name, args, timeoutMs, client.lost);
  }

  async disconnect(client: Client | undefined): Promise<void> {
    if (!client) return;
    this.clients.delete(client);
    await client.close().catch(() => {});
  }

  /** Whether the roster the entity `token` on `on` sees lists every one of `gids`, none `unknown`. */
  async rosterLists(on: G, token: string, gids: readonly string[]): Promise<boolean> {
    let client: LosableClient | undefined;
    try {
      client = await this.connect(on, token);
      const result = await this.call(client, 'bridge_roster', {}, 5_000);
      const listed = (result.structuredContent as { entities?: Array<{ gid: string; status: string }> })
        .entities;
      return gids.every((gid) => listed?.some((l) => l.gid === gid && l.status !== 'unknown'));
    } catch {
      return false;
    } finally {
      await this.disconnect(client);
    }
  }

  /** Whether every gateway's roster (asked as its probe entity) lists every one of `gids`. */
  async rostersConverged(probes: Record<G, Entity<G>>, gids: readonly string[]): Promise<boolean> {
    for (const [on, probe] of Object.entries(probes) as Array<[G, Entity<G>]>) {
      if (!(await this.rosterLists(on, probe.token, gids))) return false;
    }
    return true;
  }

  /** Notes a message seen by `recipient`, if it is one of the streams'. */
  arrive(
    from: { name: string; host: string },
    msgId: string,
    text: string,
    recipient: Entity<G>,
    drain?: DrainCall,
  ): void {
    const m = /^(\S+) (\d+)$/.exec(text);
    const s = m ? this.byId.get(m[1] as string) : undefined;
    if (!s || s.recipient !== recipient || s.sender.name !== from.name || s.sender.host !== from.host) {
      this.foreign++;
      return;
    }
    const arrival: Arrival = { seq: Number(m?.[2]), msgId, at: Date.now(), ...(drain ? { drain } : {}) };
    s.arrivals.push(arrival);
    if (!s.firstSeen.has(arrival.seq)) s.firstSeen.set(arrival.seq, arrival);
    this.arrivals.push({ stream: s, arrival });
  }

  /** Starts the receivers: `panes` maps a worker to the file its pane appends to; `drainers` drain. */
  startReceiving(
    panes: ReadonlyArray<{ worker: Entity<G>; file: string }>,
    drainers: readonly Entity<G>[],
  ): void {
    this.receiving = true;
    for (const { worker, file } of panes) this.receivers.push(this.readPane(worker, file));
    for (const entity of drainers) this.receivers.push(this.drain(entity));
  }

  startSending(): void {
    this.sending = true;
    this.senders = this.streams.map((s) => this.send(s));
  }

  /** Stops the senders; a send still failing after `giveUpMs` leaves its seq unconfirmed. */
  async stopSending(giveUpMs: number): Promise<void> {
    this.sending = false;
    this.giveUpAt = Date.now() + giveUpMs;
    await Promise.all(this.senders);
  }

  /** Whether every confirmed message of every stream has arrived. */
  allArrived(): boolean {
    return this.streams.every((s) => s.confirmed.every((_, i) => s.firstSeen.has(i + 1)));
  }

  /**
   * Waits for every confirmed message; stops waiting after `deadlineMs`, or once nothing has
   * arrived for `quietMs` (a loss), so the test reports it quickly. Then waits `repeatMs` for a
   * repeat that would come now, and stops the receivers.
   */
  async drainAll({ deadlineMs = 60_000, quietMs = 15_000, repeatMs = 1_500 } = {}): Promise<void> {
    const deadline = Date.now() + deadlineMs;
    let lastCount = -1;
    let lastChange = Date.now();
    while (!this.allArrived() && Date.now() < deadline && Date.now() - lastChange < quietMs) {
      if (this.arrivals.length !== lastCount) {
        lastCount = this.arrivals.length;
        lastChange = Date.now();
      }
      await sleep(100);
    }
    await sleep(repeatMs);
    await this.stopReceiving();
  }

  /** Stops everything and closes every client (afterAll, also when the test failed). */
  async close(): Promise<void> {
    this.sending = false;
    this.giveUpAt = 0;
    await this.stopReceiving();
    for (const client of this.clients) await client.close().catch(() => {});
    this.clients.clear();
  }

  /** Arrivals of `s` seen in [from, to]. */
  arrivedBetween(s: Stream<G>, from: number, to: number): number {
    return s.arrivals.filter((a) => a.at >= from && a.at <= to).length;
  }

  /**
   * What went wrong: confirmed and never arrived, arrived under another msgId than the send
   * returned, first arrivals out of send order, and repeats that `explain` does not account for
   * (it gets the stream, the first arrival and the repeats, and says how many it explains).
   */
  findings(explain: (s: Stream<G>, first: Arrival, again: Arrival[]) => number = () => 0) {
    const lost: Array<{ stream: string; seq: number; msgId: string }> = [];
    const wrongMsgId: Array<{ stream: string; seq: number; confirmed: string | undefined; got: string }> = [];
    const outOfOrder: Array<{ stream: string; after: number; came: number }> = [];
    const unexplainedRepeats: Array<{ stream: string; seq: number; msgId: string; copies: number }> = [];
    for (const s of this.streams) {
      s.confirmed.forEach((msgId, i) => {
        if (!s.firstSeen.has(i + 1)) lost.push({ stream: s.id, seq: i + 1, msgId });
      });
      let last = 0;
      for (const seq of s.firstSeen.keys()) {
        if (seq <= last) outOfOrder.push({ stream: s.id, after: last, came: seq });
        last = Math.max(last, seq);
      }
      const copies = new Map<number, Arrival[]>();
      for (const arrival of s.arrivals) {
        const confirmed = s.confirmed[arrival.seq - 1];
        if (confirmed !== arrival.msgId && !(arrival.seq === s.unconfirmed && confirmed === undefined))
          wrongMsgId.push({ stream: s.id, seq: arrival.seq, confirmed, got: arrival.msgId });
        copies.set(arrival.seq, [...(copies.get(arrival.seq) ?? []), arrival]);
      }
      for (const [seq, seen] of copies) {
        if (seen.length < 2) continue;
        const [first, ...again] = seen as [Arrival, ...Arrival[]];
        if (explain(s, first, again) < again.length)
          unexplainedRepeats.push({ stream: s.id, seq, msgId: first.msgId, copies: seen.length });
      }
    }
    return { lost, wrongMsgId, outOfOrder, unexplainedRepeats };
  }

  /** Per stream: confirmed, delivered, arrivals, failures and their codes. */
  summary(): Record<string, unknown> {
    return Object.fromEntries(
      this.streams.map((s) => [
        s.id,
        {
          confirmed: s.confirmed.length,
          delivered: s.firstSeen.size,
          arrivals: s.arrivals.length,
          failures: s.failed.length,
          errors: errorCounts(s),
        },
      ]),
    );
  }

  private async stopReceiving(): Promise<void> {
    this.receiving = false;
    await Promise.all(this.receivers.splice(0));
  }

  private async readPane(worker: Entity<G>, file: string): Promise<void> {
    const tail = tailLines(file);
    const read = () => {
      for (const line of tail()) {
        const m = paneLine.exec(line);
        if (m)
          this.arrive({ name: m[1] as string, host: m[2] as string }, m[3] as string, m[4] as string, worker);
        else this.foreign++;
      }
    };
    while (this.receiving) {
      read();
      await sleep(25);
    }
    read();
  }

  private async drain(entity: Entity<G>): Promise<void> {
    const timeoutMs = this.options.callTimeoutMs ?? 10_000;
    let client: LosableClient | undefined;
    while (this.receiving) {
      const startedAt = Date.now();
      try {
        client ??= await this.connect(entity.on, entity.token);
        const result = await this.call(client, 'bridge_drain', { max: 500 }, timeoutMs);
        if (result.isError) throw new Error(JSON.stringify(result.content));
        const messages = (result.structuredContent as { messages: DrainedMessage[] }).messages;
        if (messages.length === 0) {
          await sleep(30);
          continue;
        }
        const handover: DrainCall = { drainer: entity.name, startedAt, endedAt: Date.now() };
        for (const m of messages) this.arrive(m.from, m.msgId, m.text, entity, handover);
      } catch {
        this.drainErrors++; // its gateway is down or restarting
        await this.disconnect(client);
        client = undefined;
        await sleep(100);
      }
    }
    await this.disconnect(client);
  }

  private async send(s: Stream<G>): Promise<void> {
    const { window, paceMs } = this.options;
    const timeoutMs = this.options.callTimeoutMs ?? 10_000;
    const pause = this.options.retryPauseMs ?? (() => 50);
    let client: LosableClient | undefined;
    const failed = async (code: string, at: number): Promise<boolean> => {
      s.failed.push({ at, ms: Date.now() - at, code });
      if (Date.now() > this.giveUpAt) return false;
      await sleep(pause(code));
      return true;
    };
    try {
      for (let seq = 1; this.sending; seq++) {
        // Keep at most `window` messages of this stream in flight, so the end drains quickly.
        while (this.sending && seq - 1 - s.firstSeen.size >= window) await sleep(20);
        if (!this.sending) break;
        for (;;) {
          s.calls++;
          const at = Date.now();
          try {
            client ??= await this.connect(s.sender.on, s.sender.token);
            const result = await this.call(
              client,
              'bridge_send',
              { to: s.address, text: `${s.id} ${seq}`, idempotency_key: `${s.id}#${seq}` },
              timeoutMs,
            );
            if (result.isError) {
              const text = (result.content as Array<{ text?: string }>)[0]?.text ?? 'tool error';
              if (await failed(errorCode(text), at)) continue;
              s.unconfirmed = seq;
              return;
            }
            const sent = result.structuredContent as { msgId: string; duplicate: boolean };
            s.confirmed.push(sent.msgId);
            s.confirmedAt.push(Date.now());
            if (sent.duplicate) s.idempotentRepeats++;
            break;
          } catch (err) {
            // Timed out, connection refused or reset, session gone: reconnect and retry.
            const code = client?.lost.aborted ? 'connection lost' : errorCode(err);
            await this.disconnect(client);
            client = undefined;
            if (await failed(code, at)) continue;
            s.unconfirmed = seq;
            return;
          }
        }
        if (paceMs > 0) await sleep(paceMs);
      }
    } finally {
      await this.disconnect(client);
    }
  }
}
