import type { ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { ErrorCode, toBridgeError } from '../errors.js';
import { neutralisedJson } from '../text/neutralise.js';

/** One kind of news on the console's event stream: what it reads, and how often. */
export interface FeedTopic {
  /** The SSE event name (`roster`, `asks`, …). */
  readonly name: string;
  readonly everyMs: number;
  read(): unknown;
}

interface Subscriber {
  readonly res: ServerResponse;
  /** False once its session is over: it is sent `logout` and closed. */
  readonly allowed: () => boolean;
}

/** A comment line on an idle stream, so that proxies and the browser keep it open. */
const keepAliveMs = 15_000;
/** How often the subscribers' sessions are checked. */
const sessionCheckMs = 1_000;

/**
 * The console's server-sent events, shared by every open page: each topic is read on its own
 * period while a page listens (not at all when none does), once for all of them, and sent only
 * when it changed. A page that connects gets the latest of every topic at once. A read that
 * fails is sent as `{ error }` on its topic (a single-host gateway has no dead-letter queue), so
 * the page can say why.
 */
export class ConsoleFeed {
  private readonly subscribers = new Set<Subscriber>();
  /** topic → its last `data:` payload, sent to every subscriber. */
  private readonly latest = new Map<string, string>();
  private readonly reading = new Set<string>();
  /** Topics to read again when their read under way ends (it may have begun before a change). */
  private readonly stale = new Set<string>();
  private timers: Array<ReturnType<typeof setInterval>> = [];

  constructor(
    private readonly topics: readonly FeedTopic[],
    private readonly logger: Logger,
  ) {}

  /** Streams the topics to `res` until it closes or `allowed` says the session is over. */
  subscribe(res: ServerResponse, allowed: () => boolean): void {
    const subscriber: Subscriber = { res, allowed };
    this.subscribers.add(subscriber);
    res.once('close', () => this.unsubscribe(subscriber));
    for (const [topic, data] of this.latest) res.write(frame(topic, data));
    if (this.timers.length === 0) this.start();
  }

  /** Reads a topic now (after an action that changed it) and sends it if it changed. */
  refresh(name: string): void {
    const topic = this.topics.find((candidate) => candidate.name === name);
    if (!topic || this.subscribers.size === 0) return;
    if (this.reading.has(name)) this.stale.add(name);
    else void this.read(topic);
  }

  /** Ends every stream (the server is closing). */
  close(): void {
    for (const { res } of this.subscribers) res.end();
    this.subscribers.clear();
    this.stop();
  }

  private start(): void {
    this.timers = [
      ...this.topics.map((topic) => setInterval(() => void this.read(topic), topic.everyMs)),
      setInterval(() => this.checkSessions(), sessionCheckMs),
      setInterval(() => this.broadcast(': keep-alive\n\n'), keepAliveMs),
    ];
    for (const topic of this.topics) void this.read(topic);
  }

  private stop(): void {
    for (const timer of this.timers) clearInterval(timer);
    this.timers = [];
    // What a later page gets first must be read then, not left from before.
    this.latest.clear();
  }

  private unsubscribe(subscriber: Subscriber): void {
    this.subscribers.delete(subscriber);
    if (this.subscribers.size === 0) this.stop();
  }

  private async read(topic: FeedTopic): Promise<void> {
    if (this.reading.has(topic.name)) return; // the last read is still under way
    this.reading.add(topic.name);
    let data: string;
    try {
      data = neutralisedJson(await topic.read());
    } catch (err) {
      const error = toBridgeError(err);
      if (error.code === ErrorCode.internal)
        this.logger.error({ err, topic: topic.name }, 'console feed: a read failed');
      data = neutralisedJson({ error: error.toJSON() });
    } finally {
      this.reading.delete(topic.name);
    }
    if (this.stale.delete(topic.name)) void this.read(topic);
    if (this.subscribers.size === 0 || this.latest.get(topic.name) === data) return;
    this.latest.set(topic.name, data);
    this.broadcast(frame(topic.name, data));
  }

  private checkSessions(): void {
    for (const subscriber of this.subscribers) this.stillAllowed(subscriber);
  }

  /** A page whose session is over is sent `logout` and closed. */
  private stillAllowed(subscriber: Subscriber): boolean {
    if (subscriber.allowed()) return true;
    subscriber.res.end(frame('logout', '{}'));
    this.unsubscribe(subscriber);
    return false;
  }

  /** Writes to every page still logged in: no news reaches a session that ended. */
  private broadcast(text: string): void {
    for (const subscriber of this.subscribers) {
      if (this.stillAllowed(subscriber)) subscriber.res.write(text);
    }
  }
}

function frame(topic: string, data: string): string {
  return `event: ${topic}\ndata: ${data}\n\n`;
}
