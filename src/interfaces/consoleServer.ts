import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { EntityActor } from '../actors/EntityActor.js';
import type { Gateway } from '../actors/Gateway.js';
import { addressOf } from '../actors/Router.js';
import type { ConsoleSessions } from './ConsoleSessions.js';
import { consoleLoginPath } from './consoleLogin.js';

/** The cookie a console session travels in: HttpOnly, SameSite=Strict, only under /ui. */
export const consoleCookie = 'bridge_console';

/** How often a live page's roster is compared with what it was last sent. */
const rosterTickMs = 1_000;
/** A comment line on an idle event stream, so that proxies and the browser keep it open. */
const keepAliveMs = 15_000;

/**
 * The page's policy: nothing from anywhere but this origin, no inline script or style, no
 * frames, no plugins, no forms posting elsewhere.
 */
const securityHeaders = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
} as const;

/** The page's files, from `ui/` in the package; read once, at start. */
const assetDir = new URL('../../ui/', import.meta.url);
const assets: Record<string, { type: string; body: Buffer }> = Object.fromEntries(
  [
    ['/ui/', 'index.html', 'text/html; charset=utf-8'],
    ['/ui/app.js', 'app.js', 'text/javascript; charset=utf-8'],
    ['/ui/app.css', 'app.css', 'text/css; charset=utf-8'],
  ].map(([path, file, type]) => [path, { type, body: readFileSync(new URL(file as string, assetDir)) }]),
);

export interface ConsoleHandler {
  /** Serves a `/ui` request (the caller checked Host and Origin); false: not a console path. */
  handle(req: IncomingMessage, res: ServerResponse, path: string): boolean;
}

/**
 * The operator console at `/ui`, on the MCP server's loopback port: the page and its files,
 * the login that turns a `bridge console` code into a session cookie, and the page's API, which
 * reads the gateway (and later acts on it) as the session's operator.
 */
export function createConsoleHandler(gateway: Gateway, sessions: ConsoleSessions): ConsoleHandler {
  const operatorOf = (req: IncomingMessage): EntityActor | undefined => {
    const gid = sessions.operatorOf(cookieOf(req, consoleCookie));
    if (gid === undefined) return undefined;
    const entity = gateway.directory.byGidOrUndefined(gid);
    if (entity?.record.kind === 'operator') return entity;
    sessions.forgetOperator(gid); // deregistered since it logged in
    return undefined;
  };

  return {
    handle(req, res, path) {
      if (path === '/ui') return redirect(res, '/ui/');
      if (!path.startsWith('/ui/')) return false;
      if (path === consoleLoginPath) return login(req, res);
      const asset = assets[path];
      if (asset && path !== '/ui/') return send(res, 200, asset.type, asset.body);

      const operator = operatorOf(req);
      if (!operator) return refuseUnauthenticated(res, path);
      if (path === '/ui/') return send(res, 200, assets['/ui/']!.type, assets['/ui/']!.body);
      if (req.method === 'POST' && req.headers.origin === undefined) {
        // A browser always sends Origin on a POST; without it, it did not come from the page.
        return sendJson(res, 403, { error: 'a console action needs the Origin header its page sends' });
      }
      if (path === '/ui/api/me') return sendJson(res, 200, addressOf(operator, gateway.host));
      if (path === '/ui/api/roster') return sendJson(res, 200, gateway.roster());
      if (path === '/ui/api/events') return events(req, res);
      if (path === '/ui/api/logout' && req.method === 'POST') {
        sessions.end(cookieOf(req, consoleCookie) ?? '');
        res.setHeader('set-cookie', expiredCookie());
        return sendJson(res, 200, { ok: true });
      }
      return sendJson(res, 404, { error: `no console endpoint ${path}` });
    },
  };

  function login(req: IncomingMessage, res: ServerResponse): boolean {
    const code = new URL(req.url ?? '/', 'http://console').searchParams.get('code') ?? '';
    const redeemed = sessions.redeem(code);
    if (!redeemed) {
      gateway.logger.warn(
        { remote: req.socket.remoteAddress },
        'console login refused: unknown, used or expired code',
      );
      return sendPage(
        res,
        401,
        'This login link is unknown, used or expired. Run `bridge console` on the gateway host for a new one (each link works once, for 5 minutes).',
      );
    }
    const operator = gateway.directory.byGidOrUndefined(redeemed.operator);
    gateway.logger.info({ operator: operator?.record.name }, 'console login');
    res.setHeader('set-cookie', `${consoleCookie}=${redeemed.session}; HttpOnly; SameSite=Strict; Path=/ui`);
    return redirect(res, '/ui/');
  }

  /** Server-sent events: the roster now, then again whenever it changed. */
  function events(req: IncomingMessage, res: ServerResponse): boolean {
    res.writeHead(200, {
      ...securityHeaders,
      'content-type': 'text/event-stream; charset=utf-8',
      connection: 'keep-alive',
    });
    let last = '';
    const push = () => {
      if (operatorOf(req) === undefined) {
        res.end('event: logout\ndata: {}\n\n');
        return;
      }
      const roster = JSON.stringify(gateway.roster());
      if (roster === last) return;
      last = roster;
      res.write(`event: roster\ndata: ${roster}\n\n`);
    };
    push();
    const tick = setInterval(push, rosterTickMs);
    const keepAlive = setInterval(() => res.write(': keep-alive\n\n'), keepAliveMs);
    res.once('close', () => {
      clearInterval(tick);
      clearInterval(keepAlive);
    });
    return true;
  }
}

function cookieOf(req: IncomingMessage, name: string): string | undefined {
  const header = req.headers.cookie;
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const [key, ...value] = part.trim().split('=');
    if (key === name) return value.join('=');
  }
  return undefined;
}

function expiredCookie(): string {
  return `${consoleCookie}=; HttpOnly; SameSite=Strict; Path=/ui; Max-Age=0`;
}

function refuseUnauthenticated(res: ServerResponse, path: string): boolean {
  const message =
    'Not logged in (no console session, or it ended). Run `bridge console` on the gateway host and open the URL it prints.';
  if (path.startsWith('/ui/api/')) return sendJson(res, 401, { error: message });
  return sendPage(res, 401, message);
}

function redirect(res: ServerResponse, location: string): boolean {
  res.writeHead(303, { ...securityHeaders, location });
  res.end();
  return true;
}

function send(res: ServerResponse, status: number, type: string, body: Buffer | string): boolean {
  res.writeHead(status, { ...securityHeaders, 'content-type': type });
  res.end(body);
  return true;
}

function sendJson(res: ServerResponse, status: number, body: unknown): boolean {
  return send(res, status, 'application/json; charset=utf-8', JSON.stringify(body));
}

/** A page of one paragraph (a refusal), with the same policy as the console. */
function sendPage(res: ServerResponse, status: number, message: string): boolean {
  const escaped = message.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  return send(
    res,
    status,
    'text/html; charset=utf-8',
    `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>bridge console</title><link rel="icon" href="data:,">` +
      `<link rel="stylesheet" href="/ui/app.css"></head><body><main><h1>bridge console</h1><p>${escaped}</p></main></body></html>`,
  );
}
