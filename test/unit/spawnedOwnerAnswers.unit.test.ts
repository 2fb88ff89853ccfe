import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { profileSchema } from '../../src/config/schema.js';
import type { EntityActor } from '../../src/deliver/EntityActor.js';
import { BridgeError, ErrorCode } from '../../src/errors.js';
import type { Gateway } from '../../src/gateway/Gateway.js';
import { addressOf } from '../../src/send/Router.js';
import type { Launcher } from '../../src/spawn/launcher.js';
import { type ControlResult, type Envelope, WireKind } from '../../src/wire/envelope.js';
import { uuidv7 } from '../../src/wire/ids.js';
import { MemoryGateway } from '../support/MemoryGateway.js';
import { RecordingPane } from '../support/RecordingPane.js';

/** Starts nothing: each launch is a new pane the test's RecordingPane stands for. */
function fakeLauncher(): Launcher {
  let panes = 0;
  return {
    launch: async () => ({ type: 'tmux', target: `%${++panes}` }),
    find: async () => undefined,
    close: async () => undefined,
  };
}

/**
 * An owner's answer to a spawned worker's agent as the worker's host takes it (OWNER_ANSWER,
 * issue 33): the same request the control queue brings from another host, here handed to the
 * spawner on its own host. Who may answer, once per request across a redelivery and a restart,
 * and a worker registered by hand answered on its host only.
 */
describe("an owner's answer to a spawned worker's agent, on the worker's host (in memory)", () => {
  let memory: MemoryGateway;
  let pane: RecordingPane;
  let gateway: Gateway;
  let lead: EntityActor;
  let other: EntityActor;
  let helper: string;

  const settle = () => memory.settle();
  const entity = async (kind: 'main' | 'operator', name: string) => {
    const { token } = await gateway.services.registrations.register({ kind, name });
    return gateway.directory.authenticate(token)!;
  };
  /** The OWNER_ANSWER the control queue would bring from `from`. */
  const ownerAnswer = (from: EntityActor, requestId = uuidv7(Date.now())): Envelope =>
    gateway.services.router.compose(addressOf(from, 'h1'), WireKind.ownerAnswer, 'h1', '', {
      msgId: requestId,
      ownerAnswer: { requestId, gid: helper, decision: 'allow' },
    });
  /** The SPAWN_RESULTs in `to`'s inbox. */
  const results = async (to: EntityActor): Promise<ControlResult[]> => {
    await settle();
    const handover = await gateway.services.drains.drain(to);
    handover.confirm();
    return handover.envelopes.flatMap((e) => (e.result ? [e.result] : []));
  };
  const answer = async (from: EntityActor, gid = helper) => {
    const asked = gateway.services.spawnRequests.answerSpawned(from, gid, 'h1', {
      decision: 'allow',
      waitMs: 5_000,
    });
    await settle();
    return (await asked).result;
  };
  const marks = () =>
    (
      memory.events(
        "SELECT event, data FROM event_log WHERE actor_kind = 'spawn' AND event LIKE 'spawn.ownerAnswer%' ORDER BY hlc",
      ) as Array<{ event: string; data: string }>
    ).map((row) => ({ event: row.event, ...JSON.parse(row.data) }));

  beforeEach(async () => {
    pane = new RecordingPane();
    memory = new MemoryGateway({
      createInjector: () => pane,
      launchers: { tmux: fakeLauncher(), herdr: fakeLauncher() },
      config: (config) => ({
        ...config,
        profiles: { helper: profileSchema.parse({ command: 'helper-agent', cwd: '/' }) },
      }),
    });
    gateway = await memory.boot();
    gateway.setMcpUrl('http://127.0.0.1:9/mcp');
    lead = await entity('main', 'lead');
    other = await entity('main', 'other');
    const spawning = gateway.services.spawnRequests.spawn(lead, {
      host: 'h1',
      profile: 'helper',
      name: 'helper',
      brief: 'hello',
      waitMs: 5_000,
    });
    await settle();
    const spawned = await spawning;
    expect(spawned.result).toMatchObject({ ok: true, name: 'helper' });
    helper = spawned.result!.gid!;
    pane.openPermissions = [1, 2];
  });
  afterEach(async () => {
    await memory.close();
  });

  it('only whoever spawned it, or an operator on its host, answers it; the agent is told once, the answer recorded on the spawn and on the worker', async () => {
    expect(await answer(other)).toMatchObject({ op: 'answer', ok: false, code: ErrorCode.forbidden });
    expect(pane.answers).toEqual([]);
    expect(await answer(lead)).toMatchObject({
      op: 'answer',
      ok: true,
      name: 'helper',
      request: 1,
      decision: 'allow',
    });
    const operator = await entity('operator', 'ana');
    expect(await answer(operator)).toMatchObject({ ok: true, request: 2 });
    expect(pane.answers).toEqual([
      { decision: 'allow', request: 1 },
      { decision: 'allow', request: 2 },
    ]);
    expect(marks().map((m) => [m.event, m.request ?? null, m.by ?? null])).toEqual([
      ['spawn.ownerAnswering', null, 'lead@h1'],
      ['spawn.ownerAnswered', 1, null],
      ['spawn.ownerAnswering', null, 'ana@h1'],
      ['spawn.ownerAnswered', 2, null],
    ]);
    const onWorker = memory.events(
      "SELECT data FROM event_log WHERE actor_kind = 'entity' AND event = 'entity.ownerAnswered' ORDER BY hlc",
    ) as Array<{ data: string }>;
    expect(onWorker.map((r) => JSON.parse(r.data).by)).toEqual(['lead@h1', 'ana@h1']);
    // Nothing left to answer: refused with the agent's own reason, nothing marked as taken.
    expect(await answer(lead)).toMatchObject({
      ok: false,
      message: expect.stringContaining('asks for no permission now'),
    });
    expect(marks().at(-1)?.event).toBe('spawn.ownerAnswerFailed');
  });

  it('the same request again (a redelivery) is answered as before from its mark and asks the agent nothing', async () => {
    const routed: string[] = [];
    const router = gateway.services.router;
    const route = router.routeEnvelope.bind(router);
    router.routeEnvelope = (envelope) => {
      routed.push(envelope.msgId);
      return route(envelope);
    };
    const request = ownerAnswer(lead);
    gateway.services.spawner.receiveControl(request);
    expect(await results(lead)).toMatchObject([{ ok: true, request: 1 }]);
    gateway.services.spawner.receiveControl(request);
    await settle();
    expect(pane.answers).toEqual([{ decision: 'allow', request: 1 }]);
    expect(pane.openPermissions).toEqual([2]);
    // Answered again, under the same msgId: the requester, who has it, gets nothing new.
    expect(routed).toHaveLength(2);
    expect(new Set(routed).size).toBe(1);
    expect(await results(lead)).toEqual([]);
  });

  it('the same request twice at once (a redelivery while it is being given): the agent is asked once, and both deliveries are acked after its answer is recorded', async () => {
    let take: (request: number) => void = () => {};
    let asked = 0;
    pane.answerOwner = () => {
      asked++;
      return new Promise<number>((resolve) => {
        take = resolve;
      });
    };
    const acked: string[] = [];
    const request = ownerAnswer(lead);
    gateway.services.spawner.receiveControl(request, {
      ack: () => acked.push('first'),
      content: Buffer.alloc(0),
      headers: {},
    });
    await settle();
    gateway.services.spawner.receiveControl(request, {
      ack: () => acked.push('again'),
      content: Buffer.alloc(0),
      headers: {},
    });
    await settle();
    expect(asked).toBe(1);
    expect(acked).toEqual([]);
    take(1);
    expect(await results(lead)).toMatchObject([{ ok: true, request: 1 }]);
    expect(acked).toEqual(['first', 'again']);
    expect(asked).toBe(1);
  });

  it('a request its agent refused is refused again when it comes again, without asking the agent', async () => {
    pane.openPermissions = [];
    const request = ownerAnswer(lead);
    gateway.services.spawner.receiveControl(request);
    const [refused] = await results(lead);
    expect(refused).toMatchObject({
      ok: false,
      message: expect.stringContaining('asks for no permission now'),
    });
    pane.openPermissions = [3];
    gateway.services.spawner.receiveControl(request);
    await settle();
    expect(pane.answers).toEqual([]);
    expect(marks().map((m) => m.event)).toEqual(['spawn.ownerAnswering', 'spawn.ownerAnswerFailed']);
  });

  it('an agent host that does not answer may have taken it: the result says so, and the request again asks it nothing', async () => {
    let asked = 0;
    pane.answerOwner = async () => {
      asked++;
      throw new BridgeError(
        ErrorCode.paneUnavailable,
        'the agent host did not answer answer within 10000 ms',
        {
          retryable: true,
        },
      );
    };
    const request = ownerAnswer(lead);
    gateway.services.spawner.receiveControl(request);
    expect(await results(lead)).toMatchObject([
      {
        ok: false,
        code: ErrorCode.notAvailable,
        message: expect.stringContaining('may or may not have taken'),
      },
    ]);
    gateway.services.spawner.receiveControl(request);
    await settle();
    expect(asked).toBe(1);
    expect(marks().map((m) => m.event)).toEqual(['spawn.ownerAnswering']);
  });

  it('a gateway that stopped while giving the answer: the request again says it is unknown whether the agent took it, and never gives it twice', async () => {
    pane.answerOwner = () => new Promise<number>(() => {});
    const request = ownerAnswer(lead);
    gateway.services.spawner.receiveControl(request);
    await settle();
    expect(marks().map((m) => m.event)).toEqual(['spawn.ownerAnswering']);
    await memory.stop();
    gateway = await memory.boot();
    lead = gateway.directory.byGidOrUndefined(lead.gid)!;
    let asked = 0;
    pane.answerOwner = async () => ++asked;
    gateway.services.spawner.receiveControl(request);
    expect(await results(lead)).toMatchObject([
      {
        ok: false,
        code: ErrorCode.notAvailable,
        message: expect.stringContaining(
          'may or may not have taken this answer (its gateway stopped while giving it)',
        ),
      },
    ]);
    expect(asked).toBe(0);
  });

  it('a worker registered by hand, or an entity that is not a worker, is answered on its own host only', async () => {
    const { gid } = await gateway.services.registrations.register({
      kind: 'worker',
      name: 'w',
      pane: { type: 'tmux', target: '%1' },
    });
    expect(await answer(lead, gid)).toMatchObject({ ok: false, code: ErrorCode.notSpawned });
    expect(pane.answers).toEqual([]);
    // On its host, anyone who may use the admin socket or the console answers it.
    expect(await gateway.services.ownerAnswers.answer('w', 'deny', 'bo')).toMatchObject({ request: 1 });
  });
});
