/**
 * What the gateway needs from a terminal pane: type a message into it, look for a marker in
 * its recent output (crash recovery, R-DL5), and, where the multiplexer knows it, the status
 * of the agent running there (R-DL2).
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

export type PaneTarget =
  | { readonly type: 'tmux'; readonly target: string; readonly socket?: string | undefined }
  | { readonly type: 'herdr'; readonly paneId: string; readonly socketPath?: string | undefined };

export interface PaneInjector {
  /** Types `text` into the pane as one submission (text, then Enter). Rejects with a ChannelError. */
  inject(text: string): Promise<void>;
  /** True when `marker` appears in the pane's recent output (its last `lines` lines). */
  contains(marker: string, lines?: number): Promise<boolean>;
  /**
   * Calls `listener` with the pane's current status and on every change. Panes that cannot
   * report a status (tmux) report `idle` once. Returns an unsubscribe function.
   */
  watchStatus(listener: (status: PaneStatus) => void): () => void;
  close(): Promise<void>;
}
