import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ChannelError, ErrorCode } from '../../src/errors.js';
import { createHerdrInjector, resolveHerdrSocketPath } from '../../src/inject/herdrInjector.js';
import type { PaneInjector, PaneStatus } from '../../src/inject/paneInjector.js';
import { type FakeHerdr, startFakeHerdr } from '../support/fakeHerdr.js';

const PANE_A = 'w64e95948145ed1-1';
const PANE_B = 'w64e95948145ed1-2';

/** Polls until `check` passes; generous, as a loaded CI machine delays socket round trips. */
function eventually(check: () => void): Promise<void> {
  return vi.waitFor(check, { timeout: 5000, interval: 20 });
}

/** Collects every status a watcher hears. */
function recordStatuses(injector: PaneInjector): { seen: PaneStatus[]; stop: () => void } {
  const seen: PaneStatus[] = [];
  const stop = injector.watchStatus((status) => seen.push(status));
  return { seen, stop };
}

async function rejection(promise: Promise<unknown>): Promise<ChannelError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ChannelError);
  return err as ChannelError;
}

describe('herdr injector against a fake herdr', () => {
  let herdr: FakeHerdr;
  const injectors: PaneInjector[] = [];
  const warnings: string[] = [];
  const logger = {
    warn: (_obj: Record<string, unknown>, msg: string) => warnings.push(msg),
    error: (_obj: Record<string, unknown>, msg: string) => warnings.push(msg),
  };

  function injector(paneId: string, extra: { requestTimeoutMs?: number } = {}): PaneInjector {
    const created = createHerdrInjector({
      paneId,
      socketPath: herdr.socketPath,
      reconnectMinMs: 20,
      reconnectMaxMs: 100,
      logger,
      ...extra,
    });
    injectors.push(created);
    return created;
  }

  beforeEach(async () => {
    herdr = await startFakeHerdr();
    herdr.addPane(PANE_A);
    herdr.addPane(PANE_B);
    warnings.length = 0;
  });

  afterEach(async () => {
    await Promise.all(injectors.splice(0).map((i) => i.close()));
    await herdr.close();
  });

  it('types the text and then Enter, in one pane.send_input', async () => {
    await injector(PANE_A).type({ text: '[from alice msg 01J] hello\nsecond line', marker: '' });

    expect(herdr.inputs(PANE_A)).toEqual([
      { method: 'pane.send_input', text: '[from alice msg 01J] hello\nsecond line', keys: ['Enter'] },
    ]);
    expect(herdr.typed(PANE_B)).toEqual([]);
  });

  it('refuses to type an empty message, which would submit half-typed input', async () => {
    const err = await rejection(injector(PANE_A).type({ text: '', marker: '' }));
    expect(err.code).toBe(ErrorCode.injectFailed);
    expect(herdr.inputs(PANE_A)).toEqual([]);
  });

  it('reports the current status first, then changes, only for its own pane', async () => {
    herdr.setStatus(PANE_A, 'working');
    const a = recordStatuses(injector(PANE_A));
    const b = recordStatuses(injector(PANE_B));
    await eventually(() => expect(a.seen).toEqual(['unknown', 'working']));
    await eventually(() => expect(b.seen).toEqual(['unknown', 'idle']));

    herdr.setStatus(PANE_A, 'blocked');
    herdr.setStatus(PANE_A, 'done');
    await eventually(() => expect(a.seen).toEqual(['unknown', 'working', 'blocked', 'done']));
    // B's own later event arrives after any stray event for A would have.
    herdr.setStatus(PANE_B, 'working');
    await eventually(() => expect(b.seen).toEqual(['unknown', 'idle', 'working']));
  });

  it('ignores a status event for another pane on its own subscription', async () => {
    const a = recordStatuses(injector(PANE_A));
    await eventually(() => expect(a.seen).toEqual(['unknown', 'idle']));

    herdr.sendRaw(
      JSON.stringify({
        event: 'pane.agent_status_changed',
        data: { pane_id: PANE_B, workspace_id: 'w64e95948145ed1', agent_status: 'blocked' },
      }),
    );
    herdr.setStatus(PANE_A, 'working');
    await eventually(() => expect(a.seen).toEqual(['unknown', 'idle', 'working']));
  });

  it('follows a pane named by its positional id, whose events carry the stable id', async () => {
    herdr.addPane('w5f00-1', { aliases: ['3-1'], status: 'working' });
    const pane = injector('3-1');
    const seen = recordStatuses(pane).seen;
    await eventually(() => expect(seen).toEqual(['unknown', 'working']));

    herdr.setStatus('w5f00-1', 'idle');
    await eventually(() => expect(seen).toEqual(['unknown', 'working', 'idle']));
    await pane.type({ text: 'hi', marker: '' });
    expect(herdr.typed('w5f00-1')).toEqual(['hi']);
  });

  it('stops calling a listener after it unsubscribes, and drops the subscription', async () => {
    const a = recordStatuses(injector(PANE_A));
    await eventually(() => expect(herdr.subscriberCount()).toBe(1));
    await eventually(() => expect(a.seen).toEqual(['unknown', 'idle']));

    a.stop();
    herdr.setStatus(PANE_A, 'working');
    await eventually(() => expect(herdr.subscriberCount()).toBe(0));
    expect(a.seen).toEqual(['unknown', 'idle']);
  });

  it('finds a marker that was typed and not one that was not', async () => {
    const pane = injector(PANE_A);
    await pane.type({ text: '[bridge msg 01JABCDEF] please review', marker: '' });
    herdr.print(PANE_A, 'agent output line\n');

    expect(await pane.contains('01JABCDEF')).toBe(true);
    expect(await pane.contains('agent output line')).toBe(true);
    expect(await pane.contains('01JNOTSENT')).toBe(false);
  });

  it('looks only at the last lines it is asked for', async () => {
    const pane = injector(PANE_A);
    await pane.type({ text: '[bridge msg OLDMARK]', marker: '' });
    herdr.print(PANE_A, `${Array.from({ length: 30 }, (_, i) => `line ${i}`).join('\n')}\n`);

    expect(await pane.contains('OLDMARK', 10)).toBe(false);
    expect(await pane.contains('OLDMARK', 100)).toBe(true);
  });

  it('says clearly when the pane does not exist', async () => {
    const ghost = injector('w64e95948145ed1-9');

    const err = await rejection(ghost.type({ text: 'hello', marker: '' }));
    expect(err.code).toBe(ErrorCode.paneUnavailable);
    expect(err.message).toContain('herdr has no pane w64e95948145ed1-9');
    expect(err.message).toContain('HERDR_PANE_ID');
    expect(err.details).toMatchObject({ herdrCode: 'pane_not_found' });

    const readErr = await rejection(ghost.contains('x'));
    expect(readErr.code).toBe(ErrorCode.paneUnavailable);
  });

  it('reports an unknown pane as unknown status rather than ready', async () => {
    const seen = recordStatuses(injector('w64e95948145ed1-9')).seen;
    await eventually(() => expect(herdr.methods()).toContain('events.subscribe'));
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(seen).toEqual(['unknown']);
    expect(warnings).toContain('herdr status subscription lost; retrying');
  });

  it('says clearly when herdr is not running', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'no-herdr-'));
    try {
      const missing = join(dir, 'herdr.sock');
      const pane = createHerdrInjector({ paneId: PANE_A, socketPath: missing });
      injectors.push(pane);

      const err = await rejection(pane.type({ text: 'hello', marker: '' }));
      expect(err.code).toBe(ErrorCode.paneUnavailable);
      expect(err.retryable).toBe(true);
      expect(err.message).toBe(
        `herdr socket ${missing} not found: is herdr running? set HERDR_SOCKET_PATH to its socket`,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('fails an inject that herdr never answers, and says the text may have been typed', async () => {
    herdr.mute('pane.send_input');
    const started = Date.now();

    const err = await rejection(
      injector(PANE_A, { requestTimeoutMs: 300 }).type({ text: 'hello', marker: '' }),
    );
    expect(Date.now() - started).toBeLessThan(3000);
    expect(err.code).toBe(ErrorCode.injectFailed);
    expect(err.message).toContain('herdr did not answer within 300 ms');
    expect(err.message).toContain('may have been typed');
  });

  it('goes unknown while herdr is away and watches again when it returns', async () => {
    const a = recordStatuses(injector(PANE_A));
    await eventually(() => expect(a.seen).toEqual(['unknown', 'idle']));

    await herdr.stop();
    await eventually(() => expect(a.seen).toEqual(['unknown', 'idle', 'unknown']));

    // A change while herdr is away is picked up by the status fetch after resubscribing.
    herdr.setStatus(PANE_A, 'blocked');
    await herdr.restart();
    await eventually(() => expect(a.seen).toEqual(['unknown', 'idle', 'unknown', 'blocked']));
    await eventually(() => expect(herdr.subscriberCount()).toBe(1));

    herdr.setStatus(PANE_A, 'done');
    await eventually(() => expect(a.seen).toEqual(['unknown', 'idle', 'unknown', 'blocked', 'done']));
  });

  it('survives malformed lines on the subscription', async () => {
    const a = recordStatuses(injector(PANE_A));
    await eventually(() => expect(a.seen).toEqual(['unknown', 'idle']));

    herdr.sendRaw('this is not json');
    herdr.sendRaw('{"event":"pane.agent_status_changed","data":{"pane_id":42}}');
    herdr.sendRaw('{"event":"pane.agent_status_changed"}');
    herdr.sendRaw('{"id":7}');
    herdr.sendRaw('[]');
    herdr.sendRaw(JSON.stringify({ event: 'workspace_created', data: { workspace: {} } }));
    herdr.setStatus(PANE_A, 'working');

    await eventually(() => expect(a.seen).toEqual(['unknown', 'idle', 'working']));
    expect(warnings.filter((w) => w === 'ignoring malformed line on herdr status subscription')).toHaveLength(
      5,
    );
    expect(herdr.subscriberCount()).toBe(1);
  });

  it('survives malformed lines before a reply', async () => {
    herdr.setResponsePrefix(['garbage', '{"id":"someone-else","result":{"type":"ok"}}', '{"nope":true}']);
    const pane = injector(PANE_A);

    await pane.type({ text: 'still typed', marker: '' });
    expect(herdr.typed(PANE_A)).toEqual(['still typed']);
    expect(await pane.contains('still typed')).toBe(true);
  });

  it('reads a status herdr does not know yet as unknown, which is not ready', async () => {
    const a = recordStatuses(injector(PANE_A));
    await eventually(() => expect(a.seen).toEqual(['unknown', 'idle']));

    herdr.sendRaw(
      JSON.stringify({
        event: 'pane.agent_status_changed',
        data: { pane_id: PANE_A, workspace_id: 'w64e95948145ed1', agent_status: 'thinking', title: 'x' },
      }),
    );
    await eventually(() => expect(a.seen).toEqual(['unknown', 'idle', 'unknown']));
  });

  it('rejects calls after close and closes its subscription', async () => {
    const pane = injector(PANE_A);
    const a = recordStatuses(pane);
    await eventually(() => expect(herdr.subscriberCount()).toBe(1));
    await eventually(() => expect(a.seen).toEqual(['unknown', 'idle']));

    await pane.close();
    const err = await rejection(pane.type({ text: 'late', marker: '' }));
    expect(err.code).toBe(ErrorCode.shuttingDown);
    await eventually(() => expect(herdr.subscriberCount()).toBe(0));
    herdr.setStatus(PANE_A, 'working');
    expect(a.seen).toEqual(['unknown', 'idle']);
    expect(herdr.typed(PANE_A)).toEqual([]);
  });
});

describe('resolveHerdrSocketPath', () => {
  it('prefers HERDR_SOCKET_PATH', () => {
    expect(
      resolveHerdrSocketPath({ HERDR_SOCKET_PATH: '/run/h.sock', XDG_CONFIG_HOME: '/x', HOME: '/h' }),
    ).toBe('/run/h.sock');
  });

  it('uses XDG_CONFIG_HOME, then ~/.config', () => {
    expect(resolveHerdrSocketPath({ XDG_CONFIG_HOME: '/x', HOME: '/h' })).toBe('/x/herdr/herdr.sock');
    expect(resolveHerdrSocketPath({ HOME: '/h' })).toBe('/h/.config/herdr/herdr.sock');
    expect(resolveHerdrSocketPath({ XDG_CONFIG_HOME: '', HOME: '/h' })).toBe('/h/.config/herdr/herdr.sock');
  });

  it('follows a named HERDR_SESSION and rejects a malformed one', () => {
    expect(resolveHerdrSocketPath({ HERDR_SESSION: 'work', HOME: '/h' })).toBe(
      '/h/.config/herdr/sessions/work/herdr.sock',
    );
    expect(resolveHerdrSocketPath({ HERDR_SESSION: 'default', HOME: '/h' })).toBe(
      '/h/.config/herdr/herdr.sock',
    );
    expect(() => resolveHerdrSocketPath({ HERDR_SESSION: '../etc', HOME: '/h' })).toThrow(/HERDR_SESSION/);
  });
});
