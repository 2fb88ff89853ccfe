import type {
  PaneHold,
  PaneInjector,
  PaneMessage,
  PaneStatus,
  SubmitOutcome,
  TypeOutcome,
  Whereabouts,
} from '../../src/panes/paneInjector.js';

/**
 * A pane that records what is submitted to it, for tests of the gateway's side (the real
 * panes are tested against tmux and the agent TUIs). Knobs: `failing` rejects every call,
 * `hanging` never settles a type (the gateway is "killed" mid-typing), `hold` makes it refuse
 * input (a dialog), `swallowEnter` leaves typed text unsubmitted.
 */
export class RecordingPane implements PaneInjector {
  /** What sits in the input area, typed and not submitted. */
  input: PaneMessage | undefined;
  failing = false;
  hanging = false;
  swallowEnter = false;
  hold: PaneHold | undefined;
  private listener: ((s: PaneStatus) => void) | undefined;

  /** `typed`: the texts submitted, in order (several panes may share one list). */
  constructor(readonly typed: string[] = []) {}

  /** Every message a type was tried with, and every one a held delivery looked with, in order. */
  readonly tried: PaneMessage[] = [];
  readonly inspected: Array<PaneMessage | undefined> = [];

  async inspect(message?: PaneMessage): Promise<PaneHold | undefined> {
    if (this.failing) throw new Error('pane is gone');
    this.inspected.push(message);
    return this.hold;
  }

  async type(message: PaneMessage): Promise<TypeOutcome> {
    if (this.failing) throw new Error('pane is gone');
    this.tried.push(message);
    if (this.hanging) return new Promise(() => {});
    if (this.input?.marker === message.marker) return { kind: 'typed' };
    if (this.hold) return { kind: 'deferred', ...this.hold };
    this.input = message;
    return { kind: 'typed' };
  }

  async submit(message: PaneMessage): Promise<SubmitOutcome> {
    if (this.failing) throw new Error('pane is gone');
    if (this.hold) return { kind: 'deferred', ...this.hold };
    if (this.input?.marker !== message.marker) {
      return { kind: 'deferred', reason: 'not-shown', detail: 'not in the input' };
    }
    if (this.swallowEnter) return { kind: 'not-submitted', detail: 'Enter swallowed' };
    this.typed.push(message.text);
    this.input = undefined;
    return { kind: 'submitted', how: 'recorded' };
  }

  async locate(message: PaneMessage): Promise<Whereabouts> {
    if (this.input?.marker === message.marker) return 'typed';
    return this.typed.some((t) => t.includes(message.marker)) ? 'submitted' : 'absent';
  }

  async contains(marker: string): Promise<boolean> {
    return this.typed.some((t) => t.includes(marker));
  }

  watchStatus(listener: (s: PaneStatus) => void): () => void {
    this.listener = listener;
    queueMicrotask(() => listener('idle'));
    return () => {
      this.listener = undefined;
    };
  }

  setStatus(status: PaneStatus): void {
    this.listener?.(status);
  }

  /** An agent behind an agent host: the ids of its open permission requests, oldest first. */
  openPermissions: number[] = [];
  /** The owner's answers the pane was given, in order. */
  readonly answers: Array<{ decision: string; request: number }> = [];

  async close(): Promise<void> {}

  /** As an agent host's injector does: the oldest open request (or `request`) answered. */
  async answerOwner(decision: 'allow' | 'deny', request?: number): Promise<number> {
    const id = request ?? this.openPermissions[0];
    if (id === undefined || !this.openPermissions.includes(id))
      throw new Error('the agent asks for no permission now');
    this.openPermissions = this.openPermissions.filter((open) => open !== id);
    this.answers.push({ decision, request: id });
    return id;
  }
}
