import { chmodSync, existsSync, unlinkSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createConnection } from 'node:net';
import { BridgeError, ErrorCode, toBridgeError } from '../errors.js';
import type { Gateway } from '../gateway/Gateway.js';
import {
  adminRoutes,
  broadcastBody,
  consoleLoginBody,
  deregisterBody,
  dlqListBody,
  dlqRequeueBody,
  drainBody,
  messageStatusBody,
  ownerAnswerBody,
  registerBody,
  sendBody,
  spawnBody,
  stopBody,
} from './adminProtocol.js';
import type { ConsoleSessions } from './ConsoleSessions.js';
import { consoleLogin } from './consoleLogin.js';
import { parseBody, readJsonBody } from './requestBody.js';
import { responseGoneSignal, settleOnResponse, trackResponse } from './responseOutcome.js';

export interface AdminServerHandle {
  readonly socketPath: string;
  close(): Promise<void>;
}

/**
 * The admin socket: a unix socket (mode 0600) in the gateway's home, speaking JSON over HTTP.
 * Operator commands (`agentbridge register`, `status`, `roster`, `send`) talk to the gateway here.
 */
export interface AdminServerOptions {
  /** `agentbridge console`'s logins, and the URL the console is at once the HTTP server listens. */
  readonly console?: { readonly sessions: ConsoleSessions; readonly baseUrl: () => string | undefined };
}

export async function startAdminServer(
  gateway: Gateway,
  socketPath: string,
  options: AdminServerOptions = {},
): Promise<AdminServerHandle> {
  await claimSocketPath(socketPath);
  const routes: Record<string, (body: unknown) => Promise<unknown>> = {
    [adminRoutes.status]: async () => {
      // Where agents reach this gateway: what `agentbridge connect` writes into their configs.
      const base = options.console?.baseUrl();
      return {
        ...(await gateway.services.status.status()),
        ...(base === undefined ? {} : { mcpUrl: `${base}/mcp` }),
      };
    },
    [adminRoutes.messageStatus]: async (body) =>
      gateway.services.messageStatus(undefined, parseBody(messageStatusBody, body).msgId),
    [adminRoutes.roster]: async () => gateway.services.status.roster(),
    [adminRoutes.register]: async (body) => {
      const request = parseBody(registerBody, body);
      return gateway.services.registrations.register(request);
    },
    [adminRoutes.deregister]: async (body) =>
      gateway.services.registrations.deregister(parseBody(deregisterBody, body).address),
    [adminRoutes.send]: async (body) => {
      const { token, ...request } = parseBody(sendBody, body);
      const { handover, ...outcome } = await gateway.services.sends.send(entityOf(token), request);
      settleOnResponse(handover);
      return outcome;
    },
    [adminRoutes.broadcast]: async (body) => {
      const { token, ...request } = parseBody(broadcastBody, body);
      return gateway.services.router.broadcast(entityOf(token), request);
    },
    [adminRoutes.spawn]: async (body) => {
      const { token, ...request } = parseBody(spawnBody, body);
      return gateway.services.spawnRequests.spawn(entityOf(token), request);
    },
    [adminRoutes.stop]: async (body) => {
      const { token, gid, waitMs } = parseBody(stopBody, body);
      return gateway.services.spawnRequests.stopSpawned(entityOf(token), gid, waitMs);
    },
    [adminRoutes.dlqList]: async (body) =>
      gateway.services.deadLetters.listDeadLetters(parseBody(dlqListBody, body ?? {}).max ?? 100),
    [adminRoutes.dlqRequeue]: async (body) => {
      const { msgId, force } = parseBody(dlqRequeueBody, body ?? {});
      return gateway.services.deadLetters.requeueDeadLetters(msgId, force ?? false);
    },
    [adminRoutes.ownerAnswer]: async (body) => {
      const { worker, decision, request, by, token, waitMs } = parseBody(ownerAnswerBody, body);
      // The token is read only for a worker on another host (a stale one does not stop a local answer).
      const from = token === undefined ? undefined : { entity: () => entityOf(token), waitMs };
      return gateway.services.ownerAnswers.answer(worker, decision, `${by} (admin socket)`, request, from);
    },
    [adminRoutes.consoleLogin]: async (body) => {
      const console_ = options.console;
      if (!console_) throw new BridgeError(ErrorCode.notAvailable, 'this gateway serves no console');
      const { name } = parseBody(consoleLoginBody, body ?? {});
      return consoleLogin(gateway, console_.sessions, console_.baseUrl(), name);
    },
    [adminRoutes.drain]: async (body) => {
      const { token, max, waitMs } = parseBody(drainBody, body);
      const handover = await gateway.services.drains.drain(
        entityOf(token),
        max,
        waitMs,
        responseGoneSignal(),
      );
      settleOnResponse(handover);
      return handover.envelopes;
    },
  };

  function entityOf(token: string) {
    const entity = gateway.directory.authenticate(token);
    if (!entity) {
      throw new BridgeError(
        ErrorCode.unauthorized,
        'unknown token: use the token `agentbridge register` printed (BRIDGE_TOKEN or --token)',
      );
    }
    return entity;
  }

  const server = createServer((req, res) => {
    void trackResponse(res, () => serve(req, res));
  });

  async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const route = routes[(req.url ?? '').split('?')[0] ?? ''];
    try {
      if (!route)
        throw new BridgeError(
          ErrorCode.badRequest,
          `no admin endpoint ${req.url}; upgrade the CLI or the gateway`,
        );
      const body = req.method === 'POST' ? await readJsonBody(req) : undefined;
      reply(res, 200, { ok: true, result: await route(body) });
    } catch (err) {
      const error = toBridgeError(err);
      if (error.code === ErrorCode.internal)
        gateway.logger.error({ err, path: req.url }, 'admin request failed');
      reply(res, error.code === ErrorCode.internal ? 500 : 400, { ok: false, error: error.toJSON() });
    }
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => {
      server.off('error', reject);
      resolve();
    });
  });
  chmodSync(socketPath, 0o600);
  return {
    socketPath,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function reply(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

/** Removes a stale socket left by a crashed gateway; refuses if a live gateway answers on it. */
async function claimSocketPath(socketPath: string): Promise<void> {
  if (!existsSync(socketPath)) return;
  const alive = await new Promise<boolean>((resolve) => {
    const probe = createConnection(socketPath);
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
  if (alive) {
    throw new BridgeError(
      ErrorCode.badConfig,
      `another gateway is running with this home (${socketPath} answers): stop it, or give this one its own BRIDGE_HOME`,
    );
  }
  unlinkSync(socketPath);
}
