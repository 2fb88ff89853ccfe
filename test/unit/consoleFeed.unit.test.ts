import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { BridgeError, ErrorCode } from '../../src/errors.js';
import { ConsoleFeed } from '../../src/interfaces/ConsoleFeed.js';

/** What a page's event stream was sent: its frames, parsed, and whether it was ended. */
class Stream extends EventEmitter {
  text = '';
  ended = false;
  write(chunk: string): boolean {
    this.text += chunk;
    return true;
  }
  end(chunk?: string): void {
    if (chunk) this.text += chunk;
    this.ended = true;
    this.emit('close');
  }
  events(topic: string): unknown[] {
    return [...this.text.matchAll(/^event: (.*)\ndata: (.*)$/gm)]
      .filter((m) => m[1] === topic)
      .map((m) => JSON.parse(m[2] as string));
  }
}

const asResponse = (stream: Stream) => stream as unknown as ServerResponse;

describe('ConsoleFeed', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('reads each topic once per period for every page, sends only changes, and nothing while no page listens', async () => {
    let roster = ['a'];
    const read = vi.fn(() => roster);
    const feed = new ConsoleFeed([{ name: 'roster', everyMs: 1_000, read }], pino({ level: 'silent' }));
    await vi.advanceTimersByTimeAsync(5_000);
    expect(read).not.toHaveBeenCalled();

    const first = new Stream();
    feed.subscribe(asResponse(first), () => true);
    await vi.advanceTimersByTimeAsync(0);
    expect(first.events('roster')).toEqual([['a']]);
    const second = new Stream();
    feed.subscribe(asResponse(second), () => true);
    // A page that comes later gets the latest at once, without a read of its own.
    expect(second.events('roster')).toEqual([['a']]);
    await vi.advanceTimersByTimeAsync(3_000);
    expect(read).toHaveBeenCalledTimes(4);
    expect(first.events('roster')).toHaveLength(1); // unchanged: not sent again

    roster = ['a', 'b'];
    await vi.advanceTimersByTimeAsync(1_000);
    expect(first.events('roster')).toEqual([['a'], ['a', 'b']]);
    expect(second.events('roster')).toEqual([['a'], ['a', 'b']]);

    first.emit('close');
    second.emit('close');
    read.mockClear();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(read).not.toHaveBeenCalled();
  });

  it('reads a topic again when it was refreshed during a read that began before the change', async () => {
    let asks = ['before'];
    let release: (() => void) | undefined;
    const read = vi.fn(async () => {
      const now = asks;
      await new Promise<void>((resolve) => {
        release = resolve;
      });
      return now;
    });
    const feed = new ConsoleFeed([{ name: 'asks', everyMs: 60_000, read }], pino({ level: 'silent' }));
    const page = new Stream();
    feed.subscribe(asResponse(page), () => true);
    asks = []; // answered while the first read was under way
    feed.refresh('asks');
    release?.();
    await vi.advanceTimersByTimeAsync(0);
    release?.();
    await vi.advanceTimersByTimeAsync(0);
    expect(read).toHaveBeenCalledTimes(2);
    expect(page.events('asks')).toEqual([['before'], []]);
  });

  it('sends a failed read as its error, refreshes a topic on demand, and logs a page out when its session ends', async () => {
    let fails = true;
    let allowed = true;
    let asks = 0;
    const feed = new ConsoleFeed(
      [
        {
          name: 'dlq',
          everyMs: 5_000,
          read: async () => {
            if (fails) throw new BridgeError(ErrorCode.notAvailable, 'no broker on a single-host gateway');
            return [];
          },
        },
        { name: 'asks', everyMs: 60_000, read: () => asks },
      ],
      pino({ level: 'silent' }),
    );
    const page = new Stream();
    feed.subscribe(asResponse(page), () => allowed);
    await vi.advanceTimersByTimeAsync(0);
    expect(page.events('dlq')).toEqual([
      {
        error: expect.objectContaining({
          code: ErrorCode.notAvailable,
          message: expect.stringMatching(/broker/),
        }),
      },
    ]);
    fails = false;
    await vi.advanceTimersByTimeAsync(5_000);
    expect(page.events('dlq').at(-1)).toEqual([]);

    asks = 1;
    feed.refresh('asks');
    await vi.advanceTimersByTimeAsync(0);
    expect(page.events('asks')).toEqual([0, 1]);

    // A session that ends gets no more news, only its logout.
    allowed = false;
    asks = 2;
    feed.refresh('asks');
    await vi.advanceTimersByTimeAsync(0);
    expect(page.events('asks')).toEqual([0, 1]);
    expect(page.events('logout')).toEqual([{}]);
    expect(page.ended).toBe(true);
  });
});
