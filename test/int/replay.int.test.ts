import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { ReplayEvent } from '../../src/replay/replayEvent.js';
import { replayTrace } from '../../src/replay/replayTrace.js';
import { decodeHlc } from '../../src/wire/hlc.js';
import { replayOutputs } from '../fixtures/replay/outputs.js';
import { GatewayProcess, runCli } from '../support/GatewayProcess.js';

const fixtures = join(import.meta.dirname, '..', 'fixtures', 'replay');
const scratch = mkdtempSync(join(tmpdir(), 'bridge-replay-'));

interface Fixture {
  name: string;
  traceId: string;
  files: string[];
}

function fixture(name: string): Fixture {
  return {
    name,
    traceId: readFileSync(join(fixtures, `${name}.trace`), 'utf8').trim(),
    files: ['alpha', 'beta'].map((host) => join(fixtures, `${name}.${host}.ndjson`)),
  };
}

function timeline(files: string[], traceId: string): ReplayEvent[] {
  const events: ReplayEvent[] = [];
  replayTrace({ sources: files, traceId, onEvent: (e) => events.push(e) });
  return events;
}

/**
 * A copy of a fixture file with its first matching line changed by `edit`: a new event, null
 * to drop the line, undefined to leave it.
 */
function tampered(
  file: string,
  edit: (event: Record<string, unknown>) => Record<string, unknown> | null | undefined,
): string {
  const lines = readFileSync(file, 'utf8').trimEnd().split('\n');
  let done = false;
  const out = lines.map((line, i) => {
    if (i === 0 || done) return line;
    const edited = edit(JSON.parse(line) as Record<string, unknown>);
    if (edited === undefined) return line;
    if (JSON.stringify(edited) === line) return line;
    done = true;
    return edited === null ? '' : JSON.stringify(edited);
  });
  if (!done) throw new Error('the edit matched no line');
  const copy = join(scratch, `tampered-${Math.random().toString(36).slice(2)}.ndjson`);
  writeFileSync(copy, `${out.filter((l) => l !== '').join('\n')}\n`);
  return copy;
}

afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe('replay of recorded multi-host logs (golden fixtures)', () => {
  it.each(['send-reply', 'ask-skewed'])(
    '%s: the timeline and the Mermaid diagram are as recorded',
    (name) => {
      const { files, traceId } = fixture(name);
      const outputs = replayOutputs(files, traceId);
      expect(outputs.text).toBe(readFileSync(join(fixtures, `${name}.timeline.txt`), 'utf8'));
      expect(outputs.mermaid).toBe(readFileSync(join(fixtures, `${name}.mermaid.txt`), 'utf8'));
      expect(outputs.text).toContain('every actor agrees with the current machine definitions');
    },
  );

  it.each(['send-reply', 'ask-skewed'])(
    '%s: every receive comes after its send, on the other host',
    (name) => {
      const { files, traceId } = fixture(name);
      const events = timeline(files, traceId);
      const sent = new Map<string, number>();
      let receives = 0;
      events.forEach((event, index) => {
        if (event.actorKind === 'send' && event.event === 'send.published' && event.msgId)
          sent.set(event.msgId, index);
        if (event.actorKind === 'delivery' && event.event === 'xstate.init' && event.msgId) {
          const at = sent.get(event.msgId);
          expect(at, `the send of ${event.msgId} precedes its delivery`).toBeDefined();
          expect(index).toBeGreaterThan(at as number);
          receives++;
        }
      });
      expect(receives).toBe(2);
    },
  );

  it('ask-skewed: alpha’s wall clock was minutes behind beta’s, and the clock merge still orders it', () => {
    const { files, traceId } = fixture('ask-skewed');
    const events = timeline(files, traceId);
    const askSent = events.find(
      (e) => e.host.startsWith('beta') && e.actorKind === 'send' && e.event === 'xstate.init',
    );
    const askReceived = events.find(
      (e) => e.host.startsWith('alpha') && e.actorKind === 'delivery' && e.event === 'xstate.init',
    );
    if (!askSent || !askReceived) throw new Error('the fixture lost its ASK');
    // acceptedAt is alpha's own wall clock when the ASK arrived: about three minutes earlier
    // than beta's stamp on the send that caused it.
    const alphaWall = (askReceived.data as { acceptedAt: number }).acceptedAt;
    const betaWall = decodeHlc(askSent.hlc).wall;
    expect(betaWall - alphaWall).toBeGreaterThan(2.5 * 60_000);
    expect(events.indexOf(askReceived)).toBeGreaterThan(events.indexOf(askSent));
    expect(events.map((e) => `${e.actorKind}:${e.toState}`)).toContain('turn:answered');
  });

  it('a tampered log yields a typed divergence naming the actor and the event', () => {
    const { files, traceId } = fixture('send-reply');
    const [alpha, beta] = files as [string, string];
    const changed = tampered(beta, (e) =>
      e.event === 'delivery.inject' ? { ...e, toState: 'acked' } : undefined,
    );
    const summary = replayTrace({ sources: [alpha, changed], traceId });
    expect(summary.divergences).toHaveLength(1);
    const [divergence] = summary.divergences;
    expect(divergence).toMatchObject({
      kind: 'state-mismatch',
      actorKind: 'delivery',
      event: 'delivery.inject',
      recorded: { from: 'pending', to: 'acked' },
      computed: 'injecting',
    });
    expect(divergence?.actorId).toMatch(/^[0-9a-f-]{36}\/[0-9a-f-]{36}$/);
    expect(divergence?.host).toMatch(/^beta-/);
  });

  it('a dropped event, an invented one and a missing creation are each reported where they part', () => {
    const { files, traceId } = fixture('send-reply');
    const [alpha, beta] = files as [string, string];
    const dropped = tampered(beta, (e) => (e.event === 'delivery.inject' ? null : undefined));
    expect(replayTrace({ sources: [alpha, dropped], traceId }).divergences[0]).toMatchObject({
      kind: 'state-mismatch',
      event: 'delivery.typed',
      computed: 'pending',
    });
    const invented = tampered(alpha, (e) =>
      e.event === 'send.confirmed' ? { ...e, event: 'send.teleported' } : undefined,
    );
    expect(replayTrace({ sources: [invented, beta], traceId }).divergences[0]).toMatchObject({
      kind: 'state-mismatch',
      actorKind: 'send',
      event: 'send.teleported',
    });
    const headless = tampered(alpha, (e) =>
      e.event === 'xstate.init' && e.actorKind === 'send' ? null : undefined,
    );
    expect(replayTrace({ sources: [headless, beta], traceId }).divergences[0]).toMatchObject({
      kind: 'missing-init',
      actorKind: 'send',
      event: 'send.published',
    });
  });
});

describe('replay parses each recorded row with its machine’s schemas', () => {
  it('an event whose payload the schema refuses is a typed divergence, though the states agree', () => {
    const { files, traceId } = fixture('send-reply');
    const [alpha, beta] = files as [string, string];
    const changed = tampered(beta, (e) =>
      e.event === 'delivery.acked' ? { ...e, data: { via: 'telepathy' } } : undefined,
    );
    const { divergences } = replayTrace({ sources: [alpha, changed], traceId });
    expect(divergences).toHaveLength(1);
    expect(divergences[0]).toMatchObject({
      kind: 'invalid-event',
      actorKind: 'delivery',
      event: 'delivery.acked',
      recorded: { from: 'submitted', to: 'acked' },
      computed: null,
    });
    expect(divergences[0]?.detail).toMatch(/^the recorded event does not fit the delivery machine \(via: /);
  });

  it('a creation whose input the schema refuses is a typed divergence', () => {
    const { files, traceId } = fixture('send-reply');
    const [alpha, beta] = files as [string, string];
    const changed = tampered(alpha, (e) =>
      e.event === 'xstate.init' && e.actorKind === 'send'
        ? { ...e, data: { ...(e.data as Record<string, unknown>), size: 'large' } }
        : undefined,
    );
    expect(replayTrace({ sources: [changed, beta], traceId }).divergences[0]).toMatchObject({
      kind: 'invalid-event',
      actorKind: 'send',
      event: 'xstate.init',
      detail: expect.stringMatching(
        /^the recorded event has an input the send machine does not take \(size: /,
      ),
    });
  });

  it('an event the machine has no name for, recorded where the state stays, is reported at that event', () => {
    const { files, traceId } = fixture('send-reply');
    const [alpha, beta] = files as [string, string];
    const changed = tampered(alpha, (e) =>
      e.event === 'send.published' ? { ...e, event: 'send.teleported', toState: e.fromState } : undefined,
    );
    expect(replayTrace({ sources: [changed, beta], traceId }).divergences[0]).toMatchObject({
      kind: 'invalid-event',
      actorKind: 'send',
      event: 'send.teleported',
      computed: 'accepted',
      detail: 'the recorded event is no event of the send machine',
    });
  });
});

describe('agentbridge export / agentbridge replay (CLI)', () => {
  const gateways: GatewayProcess[] = [];
  afterAll(async () => {
    for (const g of gateways) await g.dispose();
  });

  it('replays the fixtures, prints JSON and Mermaid, and exits 1 on a divergence', async () => {
    const { files, traceId } = fixture('send-reply');
    const text = await runCli(['replay', '--trace', traceId, ...files]);
    expect(text.code, text.stderr || text.stdout).toBe(0);
    expect(text.stdout).toBe(readFileSync(join(fixtures, 'send-reply.timeline.txt'), 'utf8'));
    const json = await runCli(['replay', '--trace', traceId, '--json', ...files]);
    const parsed = JSON.parse(json.stdout) as { events: number; hosts: string[]; timeline: ReplayEvent[] };
    expect(parsed.events).toBe(20);
    expect(parsed.timeline).toHaveLength(20);
    const progress = await runCli(['replay', '--trace', traceId, '--progress', '--quiet', ...files]);
    expect(progress.stderr).toMatch(/replay \[#+\] 100% 20\/20 events\n$/);
    expect(progress.stdout).toMatch(/^20 events from 2 host\(s\)/);
    const mermaid = await runCli(['replay', '--trace', traceId, '--mermaid', ...files]);
    expect(mermaid.stdout).toBe(readFileSync(join(fixtures, 'send-reply.mermaid.txt'), 'utf8'));

    const changed = tampered(files[1] as string, (e) =>
      e.event === 'delivery.acked' ? { ...e, toState: 'dead-lettered' } : undefined,
    );
    const diverged = await runCli(['replay', '--trace', traceId, files[0] as string, changed]);
    expect(diverged.code).toBe(1);
    expect(diverged.stdout).toMatch(/DIVERGENCE state-mismatch: delivery .* at event #\d+ delivery\.acked/);
  });

  it('refuses bad input clearly', async () => {
    const { files, traceId } = fixture('send-reply');
    const missing = await runCli(['replay', '--trace', traceId, join(scratch, 'nope.ndjson')]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/cannot read .*nope\.ndjson/);
    const garbage = join(scratch, 'garbage.ndjson');
    writeFileSync(garbage, 'hello\n');
    const bad = await runCli(['replay', '--trace', traceId, garbage]);
    expect(bad.stderr).toMatch(/garbage\.ndjson:1: not JSON .*not a bridge export line/);
    const twice = join(scratch, 'twice.ndjson');
    copyFileSync(files[0] as string, twice);
    const same = await runCli(['replay', '--trace', traceId, files[0] as string, twice]);
    expect(same.stderr).toMatch(/are both logs of host alpha-send-reply: give one log per host/);
    const unknown = await runCli(['replay', '--trace', 'no-such-trace', ...files]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/no events of trace no-such-trace/);
    const noTrace = await runCli(['replay', ...files]);
    expect(noTrace.stderr).toMatch(/replay needs --trace ID/);
  });

  it('exports a live gateway’s slice of a flow and replays it from the export and from events.db', async () => {
    const gateway = new GatewayProcess();
    gateways.push(gateway);
    await gateway.start();
    const register = async (name: string) =>
      JSON.parse((await gateway.cli(['register', '--kind', 'main', '--name', name, '--json'])).stdout) as {
        token: string;
      };
    const a = await register('a');
    const b = await register('b');
    const sent = JSON.parse(
      (await gateway.cli(['send', 'b', 'hello', '--json'], { BRIDGE_TOKEN: a.token })).stdout,
    ) as {
      traceId: string;
    };
    await gateway.cli(['drain'], { BRIDGE_TOKEN: b.token });
    const out = join(scratch, 'live.ndjson');
    const exported = await gateway.cli(['export', '--trace', sent.traceId, '--out', out, '--json']);
    expect(exported.code, exported.stderr || exported.stdout).toBe(0);
    expect(JSON.parse(exported.stdout)).toMatchObject({ host: gateway.hostId, out });
    const header = JSON.parse(readFileSync(out, 'utf8').split('\n')[0] as string) as Record<string, unknown>;
    expect(header).toMatchObject({ bridgeExport: 1, host: gateway.hostId, traceId: sent.traceId });
    for (const source of [out, join(gateway.home, 'events.db')]) {
      const replayed = await gateway.cli(['replay', '--trace', sent.traceId, source]);
      expect(replayed.code, replayed.stderr || replayed.stdout).toBe(0);
      expect(replayed.stdout).toMatch(/delivery\.acked\s+handed-over → acked/);
      expect(replayed.stdout).toMatch(/every actor agrees/);
    }
  });
});
