import { BridgeError, ErrorCode } from '../errors.js';
import type { Gateway } from '../gateway/Gateway.js';
import { addressOf } from '../send/Router.js';
import type { Address } from '../wire/envelope.js';
import type { ConsoleSessions } from './ConsoleSessions.js';

/** The login path a one-time URL points at; its code is the `code` query parameter. */
export const consoleLoginPath = '/ui/login';

export interface ConsoleLogin {
  /** Open it in a browser on this machine, once, before `expiresAt`. */
  readonly url: string;
  readonly operator: Address;
  readonly expiresAt: number;
}

/**
 * `agentbridge console`: a one-time login URL for the operator `name`, registered here as an
 * `operator` entity the first time. Only whoever may use the admin socket (mode 0600) gets one;
 * the session it opens stands for that operator, and every action the page takes is that
 * operator's, on the record (R-ID2).
 */
export async function consoleLogin(
  gateway: Gateway,
  sessions: ConsoleSessions,
  baseUrl: string | undefined,
  name: string,
): Promise<ConsoleLogin> {
  if (baseUrl === undefined) {
    throw new BridgeError(
      ErrorCode.notAvailable,
      'the gateway is still starting: its HTTP server is not listening yet; try again in a moment',
      { retryable: true },
    );
  }
  let operator = gateway.directory.find(name);
  if (operator && operator.record.kind !== 'operator') {
    throw new BridgeError(
      ErrorCode.nameTaken,
      `"${name}" is a ${operator.record.kind} on ${gateway.host}, not an operator: pick another name with --name`,
    );
  }
  if (!operator) {
    const registered = await gateway.services.registrations.register({ kind: 'operator', name });
    operator = gateway.directory.byGidOrUndefined(registered.gid);
  }
  if (!operator)
    throw new BridgeError(ErrorCode.internal, `the operator ${name} was registered but is not found`);
  const { code, expiresAt } = sessions.mintCode(operator.gid);
  return {
    url: `${baseUrl}${consoleLoginPath}?code=${code}`,
    operator: addressOf(operator, gateway.host),
    expiresAt,
  };
}
