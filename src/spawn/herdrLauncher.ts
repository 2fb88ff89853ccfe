import { BridgeError, ErrorCode } from '../errors.js';
import { HerdrErrorCode, HerdrMethod, type HerdrParams, type HerdrResults } from '../panes/herdrProtocol.js';
import { type HerdrRequestFailure, herdrRequest } from '../panes/herdrRequest.js';
import { resolveHerdrSocketPath } from '../panes/resolveHerdrSocketPath.js';
import type { PaneTarget } from '../wire/paneTarget.js';
import { type EnvFile, envFileText, sourceAndRun, writeEnvFile } from './envFile.js';
import { type Launcher, type LaunchRequest, oneAtATime } from './launcher.js';

export interface HerdrLauncherOptions {
  /** herdr's socket; unset: resolved from `env` as herdr does (HERDR_SOCKET_PATH, HERDR_SESSION, …). */
  readonly socketPath?: string | undefined;
  /** herdr workspace id the tabs go in; unset: herdr's active workspace. */
  readonly workspace?: string | undefined;
  /** Default process.env. */
  readonly env?: Readonly<Record<string, string | undefined>> | undefined;
  /** Default 7000 (herdr gives its UI thread 5 s to answer). */
  readonly requestTimeoutMs?: number | undefined;
  /** Default 2000. */
  readonly connectTimeoutMs?: number | undefined;
}

/**
 * Launches agents as tabs of herdr over its socket API: `tab.create` (never taking focus),
 * `tab.rename` to the entity's name (so `find` sees it after a crash), then the command typed
 * into the tab's pane. herdr has no way to give a new pane an environment, and the
 * environment carries BRIDGE_TOKEN, so the variables go in a 0600 file in a fresh 0700
 * directory, and the line typed only sources and removes it before `exec`ing the command:
 * no secret on the screen or in the shell's history. Launches run one at a time.
 */
export function createHerdrLauncher(options: HerdrLauncherOptions): Launcher {
  const requestTimeoutMs = options.requestTimeoutMs ?? 7000;
  const connectTimeoutMs = options.connectTimeoutMs ?? 2000;
  const workspaceFilter = options.workspace === undefined ? {} : { workspace_id: options.workspace };

  /** Resolved per call: a bad HERDR_SESSION fails herdr launches, not the gateway's start. */
  const socketPathFor = (pane?: PaneTarget): string =>
    (pane?.type === 'herdr' ? pane.socketPath : undefined) ??
    options.socketPath ??
    resolveHerdrSocketPath(options.env ?? process.env);

  const paneOf = (paneId: string): PaneTarget => ({
    type: 'herdr',
    paneId,
    ...(options.socketPath === undefined ? {} : { socketPath: options.socketPath }),
  });

  function call<M extends HerdrMethod>(
    socketPath: string,
    method: M,
    params: HerdrParams[M],
  ): Promise<HerdrResults[M]> {
    const toError = (failure: HerdrRequestFailure): BridgeError => {
      const details = { socketPath, herdrMethod: method };
      switch (failure.kind) {
        case 'refused':
          return new BridgeError(
            ErrorCode.launchFailed,
            `herdr at ${socketPath} refused ${method}: ${failure.body.code}: ${failure.body.message}`,
            { details: { ...details, herdrCode: failure.body.code } },
          );
        case 'unexpected':
          return new BridgeError(
            ErrorCode.launchFailed,
            `herdr at ${socketPath} gave an unexpected reply to ${method} (${failure.reason}): is this herdr version supported?`,
            { details },
          );
        case 'lost':
          return new BridgeError(
            ErrorCode.launchFailed,
            `${failure.what} during ${method} on herdr socket ${socketPath}`,
            { cause: failure.cause, details },
          );
      }
    };
    return herdrRequest(method, params, { socketPath, connectTimeoutMs, requestTimeoutMs, toError });
  }

  /** The pane in `tabId`, from `pane.list`. */
  async function paneInTab(
    socketPath: string,
    workspaceId: string,
    tabId: string,
  ): Promise<string | undefined> {
    const { panes } = await call(socketPath, HerdrMethod.paneList, { workspace_id: workspaceId });
    return panes.find((pane) => pane.tab_id === tabId)?.pane_id;
  }

  async function launchNow(request: LaunchRequest): Promise<PaneTarget> {
    let socketPath = options.socketPath ?? '(unresolved)';
    const failed = (what: string, cause?: unknown): BridgeError =>
      new BridgeError(
        ErrorCode.launchFailed,
        `could not start ${request.name} in a new herdr tab via ${socketPath}: ${what}`,
        {
          cause,
          details: {
            socketPath,
            ...(cause instanceof BridgeError ? cause.details : {}),
          },
        },
      );
    let envText: string;
    try {
      socketPath = socketPathFor();
      envText = envFileText(request.env);
    } catch (err) {
      throw failed((err as Error).message, err);
    }

    let tab: HerdrResults[typeof HerdrMethod.tabCreate];
    try {
      tab = await call(socketPath, HerdrMethod.tabCreate, {
        ...workspaceFilter,
        cwd: request.cwd,
        focus: false,
      });
    } catch (err) {
      throw failed((err as Error).message, err);
    }

    const tabId = tab.tab.tab_id;
    let envFile: EnvFile | undefined;
    try {
      await call(socketPath, HerdrMethod.tabRename, { tab_id: tabId, label: request.name });
      const rootPane = tab.root_pane?.tab_id === tabId ? tab.root_pane.pane_id : undefined;
      const paneId = rootPane ?? (await paneInTab(socketPath, tab.tab.workspace_id, tabId));
      if (paneId === undefined) throw new Error(`herdr listed no pane in the new tab ${tabId}`);

      envFile = writeEnvFile(envText, 'bridge-herdr-');
      // The leading space keeps the line out of history where the shell ignores such lines;
      // there is nothing secret in it anyway.
      const line = ` ${sourceAndRun(envFile, request.command)}`;
      await call(socketPath, HerdrMethod.paneSendInput, { pane_id: paneId, text: line, keys: ['Enter'] });
      return paneOf(paneId);
    } catch (err) {
      envFile?.remove();
      // Half a launch is no launch: a tab left behind would hold a shell nobody uses.
      await call(socketPath, HerdrMethod.tabClose, { tab_id: tabId }).catch(() => undefined);
      throw failed((err as Error).message, err);
    }
  }

  return {
    launch: oneAtATime(launchNow),

    async find(name) {
      try {
        const socketPath = socketPathFor();
        const { tabs } = await call(socketPath, HerdrMethod.tabList, workspaceFilter);
        const tab = tabs.find((candidate) => candidate.label === name);
        if (tab === undefined) return undefined;
        const paneId = await paneInTab(socketPath, tab.workspace_id, tab.tab_id);
        return paneId === undefined ? undefined : paneOf(paneId);
      } catch {
        // herdr not running, or no such workspace: nothing was left behind.
        return undefined;
      }
    },

    async close(pane) {
      if (pane.type !== 'herdr') return;
      let socketPath = pane.socketPath ?? options.socketPath ?? '(unresolved)';
      try {
        socketPath = socketPathFor(pane);
        const { panes } = await call(socketPath, HerdrMethod.paneList, {});
        const tabId = panes.find((candidate) => candidate.pane_id === pane.paneId)?.tab_id;
        if (tabId === undefined) return;
        try {
          await call(socketPath, HerdrMethod.tabClose, { tab_id: tabId });
        } catch (err) {
          // herdr keeps a workspace's last tab: close the pane in it instead.
          if (herdrCode(err) !== HerdrErrorCode.tabCloseFailed) throw err;
          await call(socketPath, HerdrMethod.paneClose, { pane_id: pane.paneId });
        }
      } catch (err) {
        if (isGone(err)) return;
        throw new BridgeError(
          ErrorCode.paneUnavailable,
          `could not close herdr pane ${pane.paneId} via ${socketPath}: ${(err as Error).message}`,
          { cause: err, details: { socketPath, paneId: pane.paneId } },
        );
      }
    },
  };
}

function herdrCode(err: unknown): unknown {
  return err instanceof BridgeError ? err.details?.herdrCode : undefined;
}

/** The pane, its tab or herdr itself is gone: closing it has nothing left to do. */
function isGone(err: unknown): boolean {
  const code = herdrCode(err);
  if (code === HerdrErrorCode.paneNotFound || code === HerdrErrorCode.tabNotFound) return true;
  const errno = err instanceof BridgeError ? err.details?.errno : undefined;
  return errno === 'ENOENT' || errno === 'ECONNREFUSED';
}
