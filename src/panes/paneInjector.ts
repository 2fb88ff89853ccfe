import type { BusyPolicy, NativePath, OpenPermission, OwnerDecision } from '../wire/agentHost.js';

/**
 * What the gateway needs from a terminal pane: type a message into the agent's input, submit
 * it and verify that the agent took it (R-DL6), find a message again after a crash (R-DL5),
 * and, where the multiplexer knows it, the status of the agent running there (R-DL2).
 *
 * Typing and submitting are two steps because the gateway records `typed` between them: a
 * crash after the paste and before the Enter must neither type the text again nor leave it
 * unsubmitted (R-DL5 extended to submission).
 */
export const PaneStatus = {
  idle: 'idle',
  done: 'done',
  working: 'working',
  blocked: 'blocked',
  unknown: 'unknown',
} as const;
export type PaneStatus = (typeof PaneStatus)[keyof typeof PaneStatus];

/** A pane can take typed input only when its agent is idle or done (R-DL2). */
export function isReadyStatus(status: PaneStatus): status is typeof PaneStatus.idle | typeof PaneStatus.done {
  return status === PaneStatus.idle || status === PaneStatus.done;
}

/** A worker's agent behind an agent host, as the roster and `status` show it. */
export interface AgentDescription {
  readonly path: NativePath;
  readonly agent: string;
  readonly attach?: string | undefined;
  /** While its agent asks its owner: the oldest open request (what an answer without a number takes). */
  readonly permission?: OpenPermission | undefined;
}

/** One message as it is typed: the whole text, and the marker (its msg id) that identifies it. */
export interface PaneMessage {
  readonly text: string;
  readonly marker: string;
  /** The message's own policy for an agent in a turn, where it has one (an agent host's). */
  readonly busy?: BusyPolicy | undefined;
}

/** Why nothing was typed: the pane cannot take a message now; try again later. */
export const DeferReason = {
  /** A permission, trust or approval dialog (or the multiplexer's `blocked`): typing could answer it. */
  blocked: 'blocked',
  /** The input area already holds text someone else typed: never submit it. */
  dirtyInput: 'dirty-input',
  /** The agent is busy and its input does not queue (or the multiplexer says `working`). */
  busy: 'busy',
  /** The paste never showed in the input area (dropped, or the agent is not at its prompt). */
  notShown: 'not-shown',
} as const;
export type DeferReason = (typeof DeferReason)[keyof typeof DeferReason];

/** Why a pane cannot take a message now. */
export interface PaneHold {
  readonly reason: DeferReason;
  readonly detail: string;
}

export type TypeOutcome =
  /** In the input area, not submitted yet: call `submit` next. */
  | { readonly kind: 'typed' }
  /** Typed and submitted in one step (herdr `agent.prompt`), and verified as far as it can be. */
  | { readonly kind: 'submitted'; readonly how: string }
  /** Nothing was typed (or what was typed is known to be gone): retry later. */
  | { readonly kind: 'deferred'; readonly reason: DeferReason; readonly detail: string };

export type SubmitOutcome =
  /** The agent took it: the text left the input area (a turn started, or a line reader read it). */
  | { readonly kind: 'submitted'; readonly how: string }
  /** Enter was pressed (a bounded number of times) and the text still sits in the input area. */
  | { readonly kind: 'not-submitted'; readonly detail: string }
  /** A dialog came up between typing and Enter: nothing was pressed; try again later. */
  | { readonly kind: 'deferred'; readonly reason: DeferReason; readonly detail: string };

/** Where a message whose typing was interrupted is now (R-DL5). */
export type Whereabouts = 'absent' | 'typed' | 'submitted';

export interface PaneInjector {
  /**
   * Looks at the pane and, if it can take a message (no dialog, empty input, not busy), types
   * `message.text` without submitting it and waits until it shows in the input area. Never
   * sends keys that could answer a dialog. Rejects with a BridgeError when the pane is gone
   * or the multiplexer fails.
   */
  type(message: PaneMessage): Promise<TypeOutcome>;
  /**
   * Submits a message `type` left in the input area: Enter as its own step, then reads the
   * pane back; presses Enter again (bounded) while the text is still there.
   */
  submit(message: PaneMessage): Promise<SubmitOutcome>;
  /**
   * Whether the pane could take a message now (`message`, where its own policy matters),
   * without typing anything: undefined, or why not (a dialog, half-typed input, a busy agent).
   * What a held delivery polls.
   */
  inspect(message?: PaneMessage): Promise<PaneHold | undefined>;
  /** After a crash between the steps: is the message absent, still in the input area, or submitted? */
  locate(message: PaneMessage): Promise<Whereabouts>;
  /** True when `marker` appears in the pane's recent output (its last `lines` lines). */
  contains(marker: string, lines?: number): Promise<boolean>;
  /**
   * Calls `listener` with the pane's current status and on every change. Panes that cannot
   * report a status (tmux) report `idle` once. Returns an unsubscribe function.
   */
  watchStatus(listener: (status: PaneStatus) => void): () => void;
  /**
   * Where the agent runs behind its own protocol (an agent host): passes its owner's answer to a
   * permission request of the agent (the oldest open one, or `request`); resolves with the
   * request answered, rejects when there is none. Panes have no such request to answer.
   */
  answerOwner?(decision: OwnerDecision, request?: number): Promise<number>;
  /**
   * Where the agent runs behind its own protocol: its path, the agent as it named itself, and
   * the command a person runs to watch it and take part, as last seen (undefined before).
   */
  describe?(): AgentDescription | undefined;
  close(): Promise<void>;
}
