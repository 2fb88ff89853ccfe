import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import type { EntityActor } from '../deliver/EntityActor.js';
import { BridgeError, ErrorCode, toBridgeError } from '../errors.js';
import type { Gateway } from '../gateway/Gateway.js';
import type { ConsoleSessions } from './ConsoleSessions.js';
import {
  checkHostAndOrigin,
  createHostAllowList,
  type HostAllowList,
  urlHost,
} from './checkHostAndOrigin.js';
import { createConsoleHandler } from './consoleServer.js';
import { McpSessions } from './McpSessions.js';
import { createMcpSession } from './mcpTools.js';
import { readJsonBody } from './requestBody.js';
import { trackResponse } from './responseOutcome.js';

export interface HttpServerHandle {
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

/** A flood of dropped connections is one warning this often, and a counter. */
const dropLogEveryMs = 10_000;

/** JSON-RPC error code for transport-level refusals (the MCP SDK uses -32000 upward). */
const jsonRpcServerError = -32001;

/**
 * The gateway's loopback HTTP server: MCP over Streamable HTTP at `/mcp` (bearer token =
 * entity identity, R-ID2), Prometheus metrics at `/metrics`, liveness at `/healthz`, the operator
 * console at `/ui` (consoleServer.ts). Every
 * route, known or not, first checks `Host` and `Origin` (R-H7, DNS rebinding). The MCP SDK's
 * own checks do not fit: the transport's `allowedHosts` (deprecated) guards only `/mcp` and only
 * once a session's transport exists, and `hostHeaderValidation` is Express middleware that reads
 * `Host` alone, at any port.
 */
export interface HttpServerOptions {
  /** The operator console's logins; without it, `/ui` is not served. */
  readonly consoleSessions?: ConsoleSessions;
}

export async function startHttpServer(
  gateway: Gateway,
  options: HttpServerOptions = {},
): Promise<HttpServerHandle> {
  const { host, port, maxSessionsPerEntity, sessionIdleMs } = gateway.config.mcp;
  const sessions = new McpSessions({
    clock: gateway.clock,
    logger: gateway.logger,
    gauge: gateway.metrics.mcpSessions,
    maxPerEntity: maxSessionsPerEntity,
    idleMs: sessionIdleMs,
  });
  const maxBody = gateway.config.limits.maxTextBytes * 4 + 64 * 1024;
  const consoleHandler = options.consoleSessions
    ? createConsoleHandler(gateway, options.consoleSessions)
    : undefined;
  // Set once listening: the names are allowed at the port actually bound (`mcp.port` 0 picks one).
  let allowList: HostAllowList | undefined;

  const server: Server = createServer((req, res) => {
    trackResponse(res, () => handle(req, res)).catch((err: unknown) => {
      gateway.logger.error({ err, path: req.url }, 'http request failed');
      if (!res.headersSent) refuse(res, 500, ErrorCode.internal, 'internal error; see the gateway log');
      else res.end();
    });
  });

  // Each connection is a file descriptor, a parked call's for as long as it waits: past the cap
  // one more is closed at once, before it costs anything (R-H8), and counted.
  server.maxConnections = gateway.config.mcp.maxConnections;
  let lastDropLog = 0;
  server.on('drop', () => {
    gateway.metrics.droppedConnections.inc();
    const now = gateway.clock.now();
    if (now - lastDropLog < dropLogEveryMs) return;
    lastDropLog = now;
    gateway.logger.warn(
      { maxConnections: server.maxConnections },
      'closed an HTTP connection at once: mcp.maxConnections are open (see bridge_http_connections_dropped_total)',
    );
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    // Set before `listen` resolves, and no request comes in before the server listens.
    const verdict = checkHostAndOrigin(allowList!, { host: req.headers.host, origin: req.headers.origin });
    if (!verdict.ok) {
      gateway.metrics.rejectedRequests.inc({ code: ErrorCode.hostNotAllowed });
      gateway.logger.warn(
        { path, method: req.method, [verdict.header]: verdict.value, remote: req.socket.remoteAddress },
        `http request refused: ${verdict.reason}`,
      );
      return refuse(res, 403, ErrorCode.hostNotAllowed, verdict.reason);
    }
    if (path === '/healthz') return json(res, 200, { ok: true, host: gateway.host });
    if (path === '/metrics') {
      res.writeHead(200, { 'content-type': gateway.metrics.registry.contentType });
      res.end(await gateway.metrics.registry.metrics());
      return;
    }
    if (await consoleHandler?.handle(req, res, path)) return;
    if (path !== '/mcp')
      return refuse(res, 404, ErrorCode.badRequest, `no such endpoint ${path}; MCP is at /mcp`);

    const entity = authenticate(req);
    if (!entity) {
      gateway.metrics.rejectedRequests.inc({ code: ErrorCode.unauthorized });
      res.setHeader('www-authenticate', 'Bearer realm="bridge"');
      return refuse(
        res,
        401,
        ErrorCode.unauthorized,
        'missing or unknown bearer token: send "Authorization: Bearer <token>" with the token `agentbridge register` printed',
      );
    }

    const sessionId = req.headers['mcp-session-id'];
    if (typeof sessionId === 'string') {
      const session = sessions.get(sessionId);
      if (!session) {
        return refuse(
          res,
          404,
          ErrorCode.badRequest,
          `unknown MCP session ${sessionId}: it was ended (DELETE), closed by the gateway (idle longer than ` +
            'mcp.sessionIdleMs, or its entity opened more than mcp.maxSessionsPerEntity), or the gateway restarted; ' +
            'start a new session with initialize',
        );
      }
      if (session.entity !== entity) {
        return refuse(
          res,
          403,
          ErrorCode.unauthorized,
          'this MCP session belongs to another entity; use its own token',
        );
      }
      const body = req.method === 'POST' ? await readJson(req, res) : undefined;
      if (body === invalid) return;
      sessions.use(session, res);
      // Written out means the client has bridge's tools (a spawned agent's brief waits for this).
      if (listsTools(body)) {
        res.once('finish', () => {
          if (res.statusCode === 200) gateway.services.spawner.mcpToolsListed(entity.gid);
        });
      }
      await session.transport.handleRequest(req, res, body);
      return;
    }

    if (req.method !== 'POST') {
      return refuse(
        res,
        400,
        ErrorCode.badRequest,
        'no Mcp-Session-Id header: start a session with an initialize POST',
      );
    }
    const body = await readJson(req, res);
    if (body === invalid) return;
    if (!isInitializeRequest(body)) {
      return refuse(
        res,
        400,
        ErrorCode.badRequest,
        'no Mcp-Session-Id header: the first request must be initialize',
      );
    }
    const mcp = createMcpSession(gateway, entity);
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      enableJsonResponse: gateway.config.mcp.responses === 'json',
      onsessioninitialized: (id) => {
        sessions.add({ id, transport, server: mcp, entity });
      },
    });
    // Nudges (U3) reach the entity's open sessions as MCP log notifications.
    const stopNudges = gateway.onNudge((nudge) => {
      if (nudge.entity !== entity.gid || !transport.sessionId) return;
      void mcp.server
        .sendLoggingMessage(
          { level: 'notice', logger: 'bridge', data: { type: 'nudge', ...nudge } },
          transport.sessionId,
        )
        // A session closing as the nudge goes out: the reminder nudges again while messages wait.
        .catch((err: unknown) =>
          gateway.logger.debug(
            { err, entity: entity.record.name },
            'a nudge did not reach a closing MCP session',
          ),
        );
    });
    // Every way a session ends (DELETE, eviction, shutdown) closes its transport: free it all here.
    transport.onclose = () => {
      stopNudges();
      if (transport.sessionId) sessions.forget(transport.sessionId);
    };
    await mcp.connect(transport);
    try {
      await transport.handleRequest(req, res, body);
    } finally {
      // Refused before it began (e.g. 406 for an Accept without text/event-stream): no session
      // exists that a client could end, so the server and its nudge subscription would stay.
      if (!transport.sessionId) await transport.close();
    }
  }

  function authenticate(req: IncomingMessage): EntityActor | undefined {
    const header = req.headers.authorization;
    const match = header === undefined ? null : /^Bearer\s+(\S+)$/i.exec(header);
    return match?.[1] === undefined ? undefined : gateway.directory.authenticate(match[1]);
  }

  const invalid = Symbol('invalid');

  async function readJson(req: IncomingMessage, res: ServerResponse): Promise<unknown> {
    try {
      return await readJsonBody(req, { maxBytes: maxBody, emptyIsObject: false });
    } catch (err) {
      const error = toBridgeError(err);
      refuse(res, error.code === ErrorCode.textTooLarge ? 413 : 400, error.code, error.message);
      return invalid;
    }
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      void sessions.closeAll(); // stops its sweeper: no server, no sessions
      reject(
        err.code === 'EADDRINUSE'
          ? new BridgeError(
              ErrorCode.badConfig,
              `MCP port ${port} on ${host} is in use (another gateway?): stop it or set BRIDGE_MCP_PORT / mcp.port`,
              { cause: err },
            )
          : err,
      );
    });
    server.listen(port, host, () => {
      server.removeAllListeners('error');
      allowList = createHostAllowList({
        bindHost: host,
        port: (server.address() as AddressInfo).port,
        allowedHosts: gateway.config.mcp.allowedHosts,
      });
      resolve();
    });
  });
  const bound = (server.address() as AddressInfo).port;
  const url = `http://${urlHost(host)}:${bound}`;
  return {
    url,
    port: bound,
    async close() {
      consoleHandler?.close();
      await sessions.closeAll();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

function refuse(res: ServerResponse, status: number, code: string, message: string): void {
  json(res, status, {
    jsonrpc: '2.0',
    error: { code: jsonRpcServerError, message: `${code}: ${message}` },
    id: null,
  });
}

/** Whether a POST's body (one JSON-RPC message or a batch) asks for the tool list. */
function listsTools(body: unknown): boolean {
  const messages: unknown[] = Array.isArray(body) ? body : [body];
  return messages.some(
    (m) => typeof m === 'object' && m !== null && (m as { method?: unknown }).method === 'tools/list',
  );
}
