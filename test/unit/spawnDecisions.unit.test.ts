import { describe, expect, it } from 'vitest';
import type { Config } from '../../src/config/schema.js';
import { asBridgeError, BridgeError, ErrorCode } from '../../src/errors.js';
import { foldEvents } from '../../src/kernel/foldEvents.js';
import { initEvent } from '../../src/kernel/parseRecordedEvent.js';
import { type SpawnContext, type SpawnInput, spawnMachine } from '../../src/machines/spawnMachine.js';
import { upcastSpawnLaunched } from '../../src/machines/upcastSpawnLaunched.js';
import { admitSpawn, type SpawnHost } from '../../src/spawn/admitSpawn.js';
import {
  answerResult,
  mayAnswer,
  mayStop,
  resultText,
  spawnResultOf,
  stopResult,
  unreadableSpawnResult,
} from '../../src/spawn/spawnResults.js';
import type { EventRow } from '../../src/store/eventRow.js';
import type { Address } from '../../src/wire/envelope.js';

const requestId = '0b9c3e0e-6f1e-4d36-9a57-3c2b9a1f00aa';
const gid = '5d6f0c1a-2b3c-4d5e-8f90-a1b2c3d4e5f6';
const profiles = { worker: { command: 'claude' } } as unknown as Config['profiles'];
const host = (over: Partial<SpawnHost> = {}): SpawnHost => ({
  host: 'host-b',
  profiles,
  hasName: () => false,
  keptRequest: { requestId, profile: 'worker' },
  ...over,
});
const asked = { requestId, profile: 'worker', groups: [] as string[] };
/** A spawn of the worker profile that a main on host-a asked for. */
const spawnInput: SpawnInput = {
  requestId,
  traceId: 't',
  msgId: 'm',
  requester: { gid: 'main', name: 'main', host: 'host-a', kind: 'main' },
  profile: 'worker',
  groups: [],
  digest: 'd',
  size: 0,
};

describe('admitSpawn: what a host takes', () => {
  it('a known profile: launched under the name asked, or one made from the profile', () => {
    expect(admitSpawn({ ...asked, name: 'helper' }, host())).toEqual({ ok: true, name: 'helper' });
    expect(admitSpawn(asked, host())).toEqual({ ok: true, name: 'worker-1f00aa' });
  });

  it('a request carrying something to run is refused, whatever it names', () => {
    const verdict = admitSpawn(
      asked,
      host({ keptRequest: { requestId, profile: 'worker', command: 'rm -rf /' } }),
    );
    expect(verdict).toMatchObject({ ok: false, code: ErrorCode.spawnRefused });
    expect(verdict.ok || verdict.message).toMatch(/carries command: a requester names a profile only/);
  });

  it('an unknown profile names the known ones, or says there are none', () => {
    expect(admitSpawn({ ...asked, profile: 'other' }, host())).toEqual({
      ok: false,
      code: ErrorCode.unknownProfile,
      message: 'host-b has no profile "other"; its profiles: worker',
    });
    const none = admitSpawn(asked, host({ profiles: {} as Config['profiles'] }));
    expect(none.ok || none.message).toBe(
      'host-b has no profile "worker"; it has no profiles configured (config `profiles`)',
    );
  });

  it('an inherited property is no profile', () => {
    expect(admitSpawn({ ...asked, profile: 'constructor' }, host())).toMatchObject({
      ok: false,
      code: ErrorCode.unknownProfile,
    });
  });

  it('a name already running, or one the rule refuses, is refused', () => {
    expect(admitSpawn({ ...asked, name: 'helper' }, host({ hasName: (n) => n === 'helper' }))).toMatchObject({
      ok: false,
      code: ErrorCode.nameTaken,
    });
    expect(admitSpawn({ ...asked, name: 'no spaces' }, host())).toMatchObject({
      ok: false,
      code: ErrorCode.badRequest,
    });
  });
});

describe('spawn results', () => {
  const context: SpawnContext = {
    ...spawnInput,
    gid,
    entityName: 'helper',
    pane: null,
    attach: null,
    error: null,
    answered: false,
    ownerAnswers: [],
  };

  it('running, stopped since, refused', () => {
    const running = spawnResultOf('running', context, 'host-b');
    expect(running).toEqual({ requestId, op: 'spawn', ok: true, gid, name: 'helper', host: 'host-b' });
    expect(resultText(running, 'host-b')).toBe('spawned helper@host-b');
    expect(spawnResultOf('stopped', context, 'host-b')).toMatchObject({
      ok: false,
      code: ErrorCode.notSpawned,
    });
    const refused = spawnResultOf(
      'refused',
      { ...context, error: { code: 'NAME_TAKEN', message: 'taken' } },
      'h',
    );
    expect(resultText(refused, 'h')).toBe('spawn refused: NAME_TAKEN: taken');
    // An agent a person can attach to: its result says how.
    const attach = 'codex resume 01a2 --remote unix:///h/agent-hosts/helper.sock.agent';
    expect(spawnResultOf('running', { ...context, attach }, 'host-b')).toMatchObject({ ok: true, attach });
  });

  it('an unreadable request is refused within the room a result has', () => {
    const result = unreadableSpawnResult(requestId, 'host-b', 'x'.repeat(5000));
    expect(result.message).toHaveLength(2000);
    expect(result.message?.endsWith('...')).toBe(true);
  });

  it('who may stop: the requester, a main or an orchestrator; not another worker', () => {
    const worker = { gid: 'w2', name: 'w2', host: 'h', kind: 'worker' } as Address;
    expect(mayStop(worker, 'main')).toBe(false);
    expect(mayStop(worker, 'w2')).toBe(true);
    expect(mayStop({ ...worker, kind: 'main' }, 'main')).toBe(true);
    expect(stopResult.forbidden({ requestId, gid }, worker, 'helper').message).toMatch(
      /^w2@h may not stop helper/,
    );
  });

  it('who may answer a spawned worker’s agent from another host: its spawner, or an operator on the spawner’s host; no other main, worker or host', () => {
    const spawner = { gid: 'lead', name: 'lead', host: 'a', kind: 'main' } as Address;
    expect(mayAnswer(spawner, spawner)).toBe(true);
    expect(mayAnswer({ ...spawner, kind: 'worker' }, { ...spawner, kind: 'worker' })).toBe(true);
    expect(mayAnswer({ gid: 'ana', name: 'ana', host: 'a', kind: 'operator' }, spawner)).toBe(true);
    expect(mayAnswer({ gid: 'ana', name: 'ana', host: 'c', kind: 'operator' }, spawner)).toBe(false);
    expect(mayAnswer({ gid: 'other', name: 'other', host: 'a', kind: 'main' }, spawner)).toBe(false);
    expect(mayAnswer({ gid: 'boss', name: 'boss', host: 'a', kind: 'orchestrator' }, spawner)).toBe(false);
    expect(mayAnswer({ gid: 'w', name: 'w', host: 'a', kind: 'worker' }, spawner)).toBe(false);
  });

  it('an answer’s result reads as what was done, never as an allow it did not say', () => {
    const answer = { requestId, gid, decision: 'deny' as const };
    const denied = answerResult.answered(answer, 'b', 'helper', { request: 2, decision: 'deny' });
    expect(resultText(denied, 'b')).toBe('helper@b: request 2 denied');
    expect(resultText({ ...denied, decision: undefined }, 'b')).toBe('answered helper@b');
    expect(answerResult.notSpawned(answer, 'b', true).message).toContain('has been stopped since');
    expect(answerResult.notSpawned(answer, 'b', false).message).toContain('registered by hand');
  });

  it('a failure that is no BridgeError keeps what was thrown as its cause', () => {
    const thrown = new Error('tmux: no server');
    const failure = asBridgeError(thrown, ErrorCode.launchFailed);
    expect(failure).toMatchObject({ code: ErrorCode.launchFailed, message: 'tmux: no server' });
    expect(failure.cause).toBe(thrown);
    const own = new BridgeError(ErrorCode.paneUnavailable, 'gone');
    expect(asBridgeError(own, ErrorCode.launchFailed)).toBe(own);
  });
});

describe('upcastSpawnLaunched: logs written when the pane was recorded as text', () => {
  const input = spawnInput;
  const row = (event: string, data: Record<string, unknown>): EventRow => ({
    hlc: '0',
    host: 'host-b',
    actorKind: 'spawn',
    actorId: requestId,
    traceId: 't',
    msgId: 'm',
    event,
    fromState: null,
    toState: '',
    data,
  });

  it('reads each description the old log can hold back into the pane', () => {
    expect(upcastSpawnLaunched({ pane: 'tmux:%12' })).toEqual({ pane: { type: 'tmux', target: '%12' } });
    expect(upcastSpawnLaunched({ pane: 'herdr:p_3' })).toEqual({ pane: { type: 'herdr', paneId: 'p_3' } });
    expect(upcastSpawnLaunched({ pane: 'unknown' })).toEqual({ pane: null });
    const current = { pane: { type: 'tmux', target: '%1', socket: '/tmp/s' } };
    expect(upcastSpawnLaunched(current)).toEqual(current);
  });

  it('an old running spawn folds to the pane a STOP closes', () => {
    const rows = [
      row(initEvent, input),
      row('spawn.launching', { gid, name: 'helper' }),
      row('spawn.launched', { pane: 'tmux:%7' }),
    ];
    const snapshot = foldEvents('spawn', spawnMachine, rows);
    expect(snapshot.value).toBe('running');
    expect((snapshot.context as SpawnContext).pane).toEqual({ type: 'tmux', target: '%7' });
  });
});
