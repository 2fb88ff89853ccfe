/**
 * Where herdr's socket is, as herdr itself resolves it. Shared by the pane injector and the
 * herdr launcher, so both talk to the server the user's herdr listens on.
 */
import { homedir } from 'node:os';
import { join } from 'node:path';
import { BridgeError, ErrorCode } from '../errors.js';

const SESSION_NAME = /^[A-Za-z0-9._-]{1,64}$/;

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}

/**
 * Where herdr's socket is, in herdr's own order: `HERDR_SOCKET_PATH`, then the named session
 * in `HERDR_SESSION`, then the default session, under `$XDG_CONFIG_HOME` or `~/.config`.
 * Throws a BridgeError (BAD_CONFIG) for a malformed HERDR_SESSION.
 */
export function resolveHerdrSocketPath(
  env: Readonly<Record<string, string | undefined>> = process.env,
): string {
  const explicit = nonEmpty(env.HERDR_SOCKET_PATH);
  if (explicit !== undefined) return explicit;
  const configHome = nonEmpty(env.XDG_CONFIG_HOME) ?? join(nonEmpty(env.HOME) ?? homedir(), '.config');
  const session = nonEmpty(env.HERDR_SESSION);
  if (session === undefined || session === 'default') return join(configHome, 'herdr', 'herdr.sock');
  if (!SESSION_NAME.test(session)) {
    throw new BridgeError(
      ErrorCode.badConfig,
      `HERDR_SESSION=${JSON.stringify(session)} is not a herdr session name (1-64 of A-Z a-z 0-9 . _ -): fix or unset it, or set HERDR_SOCKET_PATH`,
    );
  }
  return join(configHome, 'herdr', 'sessions', session, 'herdr.sock');
}
