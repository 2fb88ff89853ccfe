import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { EntityActor } from '../../src/deliver/EntityActor.js';
import type { Gateway } from '../../src/gateway/Gateway.js';
import type { PaneMessage, TypeOutcome } from '../../src/panes/paneInjector.js';
import type { Envelope } from '../../src/wire/envelope.js';
import { MemoryGateway } from '../support/MemoryGateway.js';
import { RecordingPane } from '../support/RecordingPane.js';

/** The body of a typed message, without its `[bridge SEND from …]` header. */
const bodyOf = (typed: string): string => typed.slice(typed.indexOf('] ') + 2);

/**
 * A pane whose typing can be held open by the test: `started` lists, in order, the messages
 * whose typing began; while `gate` is closed, a typing that began does not end.
 */
class GatedPane extends RecordingPane {
  readonly started: string[] = [];
  private gate: Promise<void> | undefined;
  private release: (() => void) | undefined;

  shut(): void {
    this.gate = new Promise((resolve) => {
      this.release = resolve;
    });
  }

  open(): void {
    this.gate = undefined;
    this.release?.();
  }

  override async type(message: PaneMessage): Promise<TypeOutcome> {
    this.started.push(bodyOf(message.text));
    if (this.gate) await this.gate;
    return super.type(message);
  }
}

/**
 * The delivery rules, given/when/then over the in-memory tier: given the entities and messages
 * recorded by the commands a case runs, when a command or the pane's answer, then the events the
 * log gained and what was asked of the pane.
 */
describe('delivery rules in memory', () => {
  let memory: MemoryGateway;
  let pane: GatedPane;
  let gateway: Gateway;
  let main: EntityActor;

  const send = (to: string, text: string) => gateway.services.sends.send(main, { kind: 'SEND', to, text });
  const entity = (name: string): EntityActor => {
    const found = [...gateway.directory.all()].find((e) => e.record.name === name);
    if (!found) throw new Error(`no entity ${name}`);
    return found;
  };

  beforeEach(async () => {
    pane = new GatedPane();
    memory = new MemoryGateway({ createInjector: () => pane });
    gateway = await memory.boot();
    const registered = await gateway.services.registrations.register({ kind: 'main', name: 'm' });
    main = gateway.directory.authenticate(registered.token) as EntityActor;
  });
  afterEach(async () => {
    pane.open();
    await memory.close();
  });

  it('FIFO: given a message being typed, when more come, then none is typed before it has gone in, and all go in in order', async () => {
    await gateway.services.registrations.register({
      kind: 'worker',
      name: 'w',
      pane: { type: 'tmux', target: '%1' },
    });
    pane.shut();
    for (const text of ['one', 'two', 'three']) await send('w', text);
    await memory.settle();
    expect(pane.started).toEqual(['one']);
    pane.open();
    await memory.settle();
    expect(pane.started).toEqual(['one', 'two', 'three']);
    expect(pane.typed.map(bodyOf)).toEqual(['one', 'two', 'three']);
  });

  it('FIFO: given a held head (a dialog), when more come, then they wait behind it, and go in after it', async () => {
    await gateway.services.registrations.register({
      kind: 'worker',
      name: 'w',
      pane: { type: 'tmux', target: '%1' },
    });
    pane.hold = { reason: 'blocked', detail: 'a dialog' };
    const first = await send('w', 'one');
    await memory.settle();
    await send('w', 'two');
    await memory.advance(1_000);
    // The held pane is looked at (inspect), not typed into again; the second is not begun.
    expect(pane.started).toEqual(['one']);
    pane.hold = undefined;
    await memory.advance(1_000);
    expect(pane.typed.map(bodyOf)).toEqual(['one', 'two']);
    expect(memory.deliveryTrail(first.msgId)).toContain('waiting-pane');
  });

  it('dedup by msgId: given a message delivered and acked, when the same envelope comes again, then it is a duplicate and nothing is recorded or delivered', async () => {
    await gateway.services.registrations.register({ kind: 'main', name: 'b' });
    const { msgId } = await send('b', 'once');
    const taken = await gateway.services.drains.drain(entity('b'));
    const envelope = taken.envelopes[0] as Envelope;
    expect(envelope.msgId).toBe(msgId);
    taken.confirm();
    await memory.settle();
    const rows = memory.events('SELECT count(*) AS n FROM event_log');
    expect(entity('b').accept(envelope)).toBe('duplicate');
    await memory.settle();
    expect(memory.events('SELECT count(*) AS n FROM event_log')).toEqual(rows);
    expect((await gateway.services.drains.drain(entity('b'))).envelopes).toEqual([]);
    expect(memory.deliveryTrail(msgId)).toEqual(['pending', 'held', 'handed-over', 'acked']);
  });

  it('dedup by msgId: given a message still waiting for its pane, when the same envelope comes again, then it is typed once', async () => {
    await gateway.services.registrations.register({ kind: 'main', name: 'b' });
    const { msgId } = await send('b', 'copy');
    const [envelope] = entity('b').heldOf('SEND');
    await gateway.services.registrations.register({
      kind: 'worker',
      name: 'w',
      pane: { type: 'tmux', target: '%1' },
    });
    pane.hold = { reason: 'busy', detail: 'working' };
    const copy = { ...(envelope as Envelope), to: entity('w').gid };
    expect(entity('w').accept(copy)).toBe('accepted');
    await memory.settle();
    expect(entity('w').accept(copy)).toBe('duplicate');
    pane.hold = undefined;
    await memory.advance(1_000);
    expect(pane.typed.filter((t) => t.includes(msgId))).toHaveLength(1);
    expect(entity('w').depth).toBe(0);
  });
});
