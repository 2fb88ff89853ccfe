import { describe, expect, it } from 'vitest';
import { type ExecutableActionsFrom, initialTransition, type SnapshotFrom, transition } from 'xstate';
import { stateName } from '../../src/kernel/stateName.js';
import {
  keptOwnerAnswers,
  type SpawnEvent,
  type SpawnInput,
  spawnMachine,
} from '../../src/machines/spawnMachine.js';
import {
  allStateIds,
  createMachineCoverage,
  unreachedStateIds,
  unsampledEventTypes,
} from '../support/machineCoverage.js';

type Snapshot = SnapshotFrom<typeof spawnMachine>;
type Actions = ExecutableActionsFrom<typeof spawnMachine>[];

const input: SpawnInput = {
  requestId: 'req-1',
  traceId: 'trace-1',
  msgId: 'msg-spawn-1',
  requester: { gid: 'main-gid', name: 'main', host: 'host-a', kind: 'claude' },
  profile: 'worker',
  name: 'helper',
  groups: ['team'],
  digest: 'sha256:brief',
  size: 128,
};
const initialContext = {
  ...input,
  gid: null,
  entityName: null,
  pane: null,
  attach: null,
  error: null,
  answered: false,
  ownerAnswers: [],
};

// Every step records the (state, transition) pair it took; the last test compares that with the
// graph (test/support/machineCoverage.ts).
const coverage = createMachineCoverage(spawnMachine);
const step = (snapshot: Snapshot, event: SpawnEvent): [Snapshot, Actions] => coverage.step(snapshot, event);

/** The named actions to run, in order. */
const effects = (actions: ReadonlyArray<{ type: string }>): string[] => actions.map((action) => action.type);

function run(snapshot: Snapshot, ...events: SpawnEvent[]): Snapshot {
  let current = snapshot;
  for (const event of events) [current] = step(current, event);
  return current;
}

const launching = (gid = 'worker-gid', name = 'helper'): SpawnEvent => ({
  type: 'spawn.launching',
  gid,
  name,
});
const ownerAnswering = (requestId: string): SpawnEvent => ({
  type: 'spawn.ownerAnswering',
  requestId,
  by: 'lead@host-a',
});
const ownerAnswered = (requestId: string, request: number): SpawnEvent => ({
  type: 'spawn.ownerAnswered',
  requestId,
  request,
  decision: 'deny',
});
const ownerAnswerFailed = (requestId: string): SpawnEvent => ({
  type: 'spawn.ownerAnswerFailed',
  requestId,
  code: 'BAD_REQUEST',
  message: 'helper asks for no permission now',
});
const tmuxPane = (target: string) => ({ type: 'tmux' as const, target });
const launched = (target = '%7'): SpawnEvent => ({ type: 'spawn.launched', pane: tmuxPane(target) });
const launchFailed = (code = 'LAUNCH_FAILED', message = 'tmux: no server'): SpawnEvent => ({
  type: 'spawn.launchFailed',
  code,
  message,
});
const refused = (code = 'UNKNOWN_PROFILE', message = 'no profile "worker"'): SpawnEvent => ({
  type: 'spawn.refused',
  code,
  message,
});
const answered: SpawnEvent = { type: 'spawn.answered' };
const stopped = (by = 'main-gid'): SpawnEvent => ({ type: 'spawn.stopped', by });
const rehydrated: SpawnEvent = { type: 'actor.rehydrated' };

const requested = (): Snapshot => initialTransition(spawnMachine, input)[0];

/** How to get a fresh spawn into each non-final state. */
const reach = {
  requested,
  launching: () => run(requested(), launching()),
  running: () => run(requested(), launching(), launched()),
  refused: () => run(requested(), refused()),
} as const satisfies Record<string, () => Snapshot>;

describe('spawnMachine: initial state', () => {
  it('starts requested with the input as context, nothing chosen yet, and begins', () => {
    const [snapshot, actions] = initialTransition(spawnMachine, input);
    expect(snapshot.value).toBe('requested');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context).toEqual(initialContext);
    expect(effects(actions)).toEqual(['begin']);
  });

  it('name is optional in the input: the entity name comes from spawn.launching', () => {
    const { name: _name, ...unnamed } = input;
    const [snapshot] = initialTransition(spawnMachine, unnamed);
    expect(snapshot.context.name).toBeUndefined();
    const [next] = step(snapshot, launching('worker-gid', 'picked-name'));
    expect(next.context.entityName).toBe('picked-name');
  });
});

describe('spawnMachine: requested', () => {
  it('spawn.launching → launching: records gid and name before the launch, then launches', () => {
    const [snapshot, actions] = step(requested(), launching('worker-gid', 'helper-2'));
    expect(snapshot.value).toBe('launching');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context).toEqual({ ...initialContext, gid: 'worker-gid', entityName: 'helper-2' });
    expect(effects(actions)).toEqual(['launch']);
  });

  it('spawn.refused → refused: records the error and answers the requester (not final)', () => {
    const [snapshot, actions] = step(requested(), refused('UNKNOWN_PROFILE', 'no such profile'));
    expect(snapshot.value).toBe('refused');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context).toEqual({
      ...initialContext,
      error: { code: 'UNKNOWN_PROFILE', message: 'no such profile' },
    });
    expect(effects(actions)).toEqual(['answer']);
  });

  it('actor.rehydrated → requested again: begins again, context unchanged', () => {
    const [snapshot, actions] = step(requested(), rehydrated);
    expect(snapshot.value).toBe('requested');
    expect(snapshot.context).toEqual(initialContext);
    expect(effects(actions)).toEqual(['begin']);
  });

  it.each([launched(), launchFailed(), answered, stopped()])('ignores $type', (event) => {
    const before = requested();
    const [after, actions] = transition(spawnMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('spawnMachine: launching', () => {
  it('spawn.launched → running: records the pane and answers the requester', () => {
    const [snapshot, actions] = step(reach.launching(), launched('%42'));
    expect(snapshot.value).toBe('running');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context).toEqual({
      ...initialContext,
      gid: 'worker-gid',
      entityName: 'helper',
      pane: tmuxPane('%42'),
    });
    expect(effects(actions)).toEqual(['answer']);
    // An agent host's: the command that attaches a person is kept for the result.
    const attach = 'codex resume t --remote unix:///s.agent';
    const [hosted] = step(reach.launching(), { type: 'spawn.launched', pane: tmuxPane('%43'), attach });
    expect(hosted.context.attach).toBe(attach);
  });

  it('spawn.launchFailed → refused: records the error, keeps the gid it chose, answers', () => {
    const [snapshot, actions] = step(reach.launching(), launchFailed('LAUNCH_FAILED', 'agent exited'));
    expect(snapshot.value).toBe('refused');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context).toEqual({
      ...initialContext,
      gid: 'worker-gid',
      entityName: 'helper',
      error: { code: 'LAUNCH_FAILED', message: 'agent exited' },
    });
    expect(effects(actions)).toEqual(['answer']);
  });

  it('actor.rehydrated → launching again: launches again with the gid recorded before', () => {
    const before = reach.launching();
    const [snapshot, actions] = step(before, rehydrated);
    expect(snapshot.value).toBe('launching');
    expect(snapshot.context).toEqual(before.context);
    expect(snapshot.context.gid).toBe('worker-gid');
    expect(effects(actions)).toEqual(['launch']);
  });

  // A second launching (a redelivered SPAWN) does not pick another gid or launch twice.
  it.each([launching('other-gid', 'other'), refused(), answered, stopped()])('ignores $type', (event) => {
    const before = reach.launching();
    const [after, actions] = transition(spawnMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('spawnMachine: running', () => {
  it('spawn.answered stays running: records answered, answers nothing more', () => {
    const before = reach.running();
    const [snapshot, actions] = step(before, answered);
    expect(snapshot.value).toBe('running');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context).toEqual({ ...before.context, answered: true });
    expect(actions).toEqual([]);
  });

  it('spawn.stopped → stopped (final), keeping the context', () => {
    const before = run(reach.running(), answered);
    const [snapshot, actions] = step(before, stopped('main-gid'));
    expect(snapshot.value).toBe('stopped');
    expect(snapshot.status).toBe('done');
    expect(snapshot.context).toEqual(before.context);
    expect(actions).toEqual([]);
  });

  it('spawn.stopped before the answer was recorded still stops', () => {
    const [snapshot] = step(reach.running(), stopped());
    expect(snapshot.value).toBe('stopped');
    expect(snapshot.context.answered).toBe(false);
  });

  it('actor.rehydrated before the answer was recorded → running again: answers again', () => {
    const before = reach.running();
    const [snapshot, actions] = step(before, rehydrated);
    expect(snapshot.value).toBe('running');
    expect(snapshot.context).toEqual(before.context);
    expect(effects(actions)).toEqual(['answer']);
  });

  // The machine re-runs `answer` on every rehydration of running, answered or not: the
  // runtime's `answer` has to look at context.answered to avoid a second SPAWN_RESULT.
  it('actor.rehydrated after the answer was recorded still re-runs answer, with answered true', () => {
    const before = run(reach.running(), answered);
    const [snapshot, actions] = step(before, rehydrated);
    expect(snapshot.value).toBe('running');
    expect(snapshot.context.answered).toBe(true);
    expect(effects(actions)).toEqual(['answer']);
  });

  it('an owner’s answer from another host is marked before the agent is asked, then with what it took, or with why it was refused', () => {
    const before = reach.running();
    const [asking, asked] = step(before, ownerAnswering('r1'));
    expect(asking.value).toBe('running');
    expect(asking.context.ownerAnswers).toEqual([
      { requestId: 'r1', request: null, decision: null, failure: null },
    ]);
    expect(asked).toEqual([]);
    const [taken] = step(asking, ownerAnswered('r1', 3));
    expect(taken.context.ownerAnswers).toEqual([
      { requestId: 'r1', request: 3, decision: 'deny', failure: null },
    ]);
    const [failed] = step(run(taken, ownerAnswering('r2')), ownerAnswerFailed('r2'));
    expect(failed.context.ownerAnswers).toEqual([
      ...taken.context.ownerAnswers,
      {
        requestId: 'r2',
        request: null,
        decision: null,
        failure: { code: 'BAD_REQUEST', message: 'helper asks for no permission now' },
      },
    ]);
    expect(failed.context).toEqual({ ...before.context, ownerAnswers: failed.context.ownerAnswers });
  });

  it(`keeps the latest ${keptOwnerAnswers} owner’s answers, oldest first`, () => {
    const ids = Array.from({ length: keptOwnerAnswers + 2 }, (_, i) => `r${i}`);
    const snapshot = run(reach.running(), ...ids.map((id) => ownerAnswered(id, 1)));
    expect(snapshot.context.ownerAnswers.map((m) => m.requestId)).toEqual(ids.slice(2));
  });

  it.each([launching(), launched('%9'), launchFailed(), refused()])('ignores $type', (event) => {
    const before = reach.running();
    const [after, actions] = transition(spawnMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('spawnMachine: refused', () => {
  it('spawn.answered → closed (final): records answered, keeps the error', () => {
    const before = reach.refused();
    const [snapshot, actions] = step(before, answered);
    expect(snapshot.value).toBe('closed');
    expect(snapshot.status).toBe('done');
    expect(snapshot.context).toEqual({ ...before.context, answered: true });
    expect(snapshot.context.error).toEqual({ code: 'UNKNOWN_PROFILE', message: 'no profile "worker"' });
    expect(actions).toEqual([]);
  });

  it('a failed launch is closed once answered, with its gid and error', () => {
    const snapshot = run(reach.launching(), launchFailed('LAUNCH_FAILED', 'agent exited'), answered);
    expect(snapshot.value).toBe('closed');
    expect(snapshot.context).toMatchObject({
      gid: 'worker-gid',
      pane: null,
      answered: true,
      error: { code: 'LAUNCH_FAILED', message: 'agent exited' },
    });
  });

  it('actor.rehydrated → refused again: answers again', () => {
    const before = reach.refused();
    const [snapshot, actions] = step(before, rehydrated);
    expect(snapshot.value).toBe('refused');
    expect(snapshot.context).toEqual(before.context);
    expect(effects(actions)).toEqual(['answer']);
  });

  it.each([launching(), launched(), launchFailed(), refused('OTHER', 'again'), stopped()])(
    'ignores $type',
    (event) => {
      const before = reach.refused();
      const [after, actions] = transition(spawnMachine, before, event);
      expect(after).toBe(before);
      expect(actions).toEqual([]);
    },
  );
});

describe('spawnMachine: whole requests', () => {
  it('a spawn that runs: begin, launch, answer once each, then stopped', () => {
    const ran: string[] = [];
    let [snapshot, actions] = initialTransition(spawnMachine, input);
    ran.push(...effects(actions));
    for (const event of [launching('w-gid', 'w'), launched('%3'), answered, stopped()]) {
      [snapshot, actions] = step(snapshot, event);
      ran.push(...effects(actions));
    }
    expect(ran).toEqual(['begin', 'launch', 'answer']);
    expect(snapshot.value).toBe('stopped');
    expect(snapshot.context).toEqual({
      ...initialContext,
      gid: 'w-gid',
      entityName: 'w',
      pane: tmuxPane('%3'),
      answered: true,
    });
  });

  it('a restart at every step re-runs the step it died in and nothing before it', () => {
    const ran: string[] = [];
    let [snapshot, actions] = initialTransition(spawnMachine, input);
    ran.push(...effects(actions));
    for (const event of [rehydrated, launching(), rehydrated, launched(), rehydrated, answered]) {
      [snapshot, actions] = step(snapshot, event);
      ran.push(...effects(actions));
    }
    expect(ran).toEqual(['begin', 'begin', 'launch', 'launch', 'answer', 'answer']);
    expect(stateName(snapshot.value)).toBe('running');
    expect(snapshot.context.answered).toBe(true);
  });
});

/** One of every event the machine knows, with a payload. */
const sampleEvents: SpawnEvent[] = [
  launching(),
  launched(),
  launchFailed(),
  refused(),
  answered,
  stopped(),
  ownerAnswering('r9'),
  ownerAnswered('r9', 1),
  ownerAnswerFailed('r9'),
  rehydrated,
];

describe('spawnMachine: final states ignore every event', () => {
  const finals = {
    stopped: () => run(reach.running(), stopped()),
    closed: () => run(reach.refused(), answered),
  };

  it.each(Object.keys(finals) as Array<keyof typeof finals>)('%s', (state) => {
    const before = finals[state]();
    expect(before.value).toBe(state);
    expect(before.status).toBe('done');
    for (const event of sampleEvents) {
      const [after, actions] = transition(spawnMachine, before, event);
      expect(after, event.type).toBe(before);
      expect(actions, event.type).toEqual([]);
    }
  });
});

describe('spawnMachine: graph', () => {
  it('the sample events name every event the machine declares a transition for', () => {
    expect(unsampledEventTypes(spawnMachine, sampleEvents)).toEqual([]);
  });

  it('every state node is reachable from the initial state', () => {
    expect(allStateIds(spawnMachine)).toEqual([
      'spawn.closed',
      'spawn.launching',
      'spawn.refused',
      'spawn.requested',
      'spawn.running',
      'spawn.stopped',
    ]);
    expect(unreachedStateIds(spawnMachine, { input, events: sampleEvents })).toEqual([]);
  });

  it('only stopped and closed are final', () => {
    const finals = allStateIds(spawnMachine).filter(
      (id) => spawnMachine.getStateNodeById(id).type === 'final',
    );
    expect(finals).toEqual(['spawn.closed', 'spawn.stopped']);
  });

  // Must stay last: it checks what the tests above exercised.
  it('every declared (state, transition) pair is exercised by a test above', () => {
    expect(coverage.declaredCount()).toBe(14);
    expect(coverage.uncovered()).toEqual([]);
    expect(coverage.undeclared()).toEqual([]);
  });
});
