import type { PaneTarget } from '../wire/paneTarget.js';

/** What a launcher starts: one agent, in its own window or tab. */
export interface LaunchRequest {
  /** The entity's name; also the window's, so a relaunch after a crash can find it. */
  readonly name: string;
  readonly command: string;
  readonly cwd: string;
  readonly env: Readonly<Record<string, string>>;
}

/** Starts agents in panes (U4): tmux windows or herdr tabs. */
export interface Launcher {
  /** Starts the command in a new pane; resolves with the pane to deliver to. Rejects with a BridgeError. */
  launch(request: LaunchRequest): Promise<PaneTarget>;
  /** The pane a launch of `name` left behind, if any (crash recovery). */
  find(name: string): Promise<PaneTarget | undefined>;
  /** Ends the agent: closes its pane. A pane already gone is fine. */
  close(pane: PaneTarget): Promise<void>;
}

/**
 * Runs launches one at a time, in call order (two must not both create a session or race for
 * the same name); a failed launch does not stop the ones behind it.
 */
export function oneAtATime(
  launch: (request: LaunchRequest) => Promise<PaneTarget>,
): (request: LaunchRequest) => Promise<PaneTarget> {
  let tail: Promise<unknown> = Promise.resolve();
  return (request) => {
    const run = tail.then(() => launch(request));
    tail = run.catch(() => undefined);
    return run;
  };
}
