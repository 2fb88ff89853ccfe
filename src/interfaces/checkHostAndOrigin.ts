/**
 * DNS-rebinding defence for the gateway's HTTP server (R-H7). A page on `evil.example` whose
 * name an attacker re-points at 127.0.0.1 reaches a loopback server from the victim's browser,
 * but its requests still say `Host: evil.example` (and `Origin: http://evil.example`): the server
 * answers only to the names it is known by, at its own port.
 *
 * Pure: the HTTP server asks, this answers. Names are read as config/authority.ts reads them.
 */
import { type Authority, normaliseHostname, parseAuthority } from '../config/authority.js';

/** The names a gateway's HTTP server answers to, each at one port. */
export interface HostAllowList {
  readonly entries: readonly { readonly hostname: string; readonly port: number }[];
  /** The port the server listens on, for the advice in a refusal. */
  readonly port: number;
}

export type HostVerdict =
  | { readonly ok: true }
  | {
      readonly ok: false;
      readonly header: 'host' | 'origin';
      readonly value: string;
      readonly reason: string;
    };

/** The names every gateway answers to: loopback, in the spellings browsers and clients use. */
export const loopbackHostnames = ['localhost', '127.0.0.1', '[::1]'] as const;

/** Bind addresses that stand for every interface, and so name no host a client could use. */
const wildcardBindAddresses = new Set(['0.0.0.0', '[::]']);

/** A host as a URL writes it: an IPv6 address in brackets. */
export function urlHost(host: string): string {
  return host.includes(':') ? `[${host}]` : host;
}

/**
 * What a gateway listening on `bindHost:port` answers to: the loopback names, the bind address
 * itself unless it is a wildcard (it is the address the gateway's own URL names, e.g. the
 * BRIDGE_MCP_URL its spawned agents get), and the operator's `mcp.allowedHosts` (an entry
 * without a port means the gateway's port).
 */
export function createHostAllowList(options: {
  bindHost: string;
  port: number;
  allowedHosts: readonly Authority[];
}): HostAllowList {
  const { port } = options;
  const bind = normaliseHostname(urlHost(options.bindHost));
  const entries = [
    ...loopbackHostnames.map((hostname) => ({ hostname, port })),
    ...(bind === undefined || wildcardBindAddresses.has(bind) ? [] : [{ hostname: bind, port }]),
    ...options.allowedHosts.map(({ hostname, port: own }) => ({ hostname, port: own ?? port })),
  ];
  return { entries, port };
}

function allows(list: HostAllowList, authority: Authority, defaultPorts: readonly number[]): boolean {
  return list.entries.some(
    (entry) =>
      entry.hostname === authority.hostname &&
      (authority.port === undefined ? defaultPorts.includes(entry.port) : authority.port === entry.port),
  );
}

/**
 * The verdict on one request's `Host` and `Origin` headers. `Host` is required (HTTP/1.1 always
 * sends it) and must be an allowed name at its port. `Origin` is optional (non-browser clients
 * send none); when present it must be an http(s) origin on an allowed name: `null` (a sandboxed
 * frame, a `file:` page) is refused, being a page anyone can make.
 */
export function checkHostAndOrigin(
  list: HostAllowList,
  headers: { host?: string | undefined; origin?: string | undefined },
): HostVerdict {
  const advice = `address the gateway as http://127.0.0.1:${list.port} (or localhost), or list the name in mcp.allowedHosts`;
  const host = headers.host === undefined ? undefined : parseAuthority(headers.host);
  if (!host) {
    return {
      ok: false,
      header: 'host',
      value: headers.host ?? '',
      reason:
        headers.host === undefined
          ? `no Host header; ${advice}`
          : `Host ${JSON.stringify(headers.host)} is not host[:port]; ${advice}`,
    };
  }
  // Without a port the client used its scheme's default: 80, or 443 behind a TLS proxy.
  if (!allows(list, host, [80, 443])) {
    return {
      ok: false,
      header: 'host',
      value: headers.host as string,
      reason: `Host ${JSON.stringify(headers.host)} is not a name this gateway answers to (DNS rebinding?); ${advice}`,
    };
  }
  if (headers.origin === undefined) return { ok: true };
  const origin = parseOrigin(headers.origin);
  if (!origin || !allows(list, origin.authority, [origin.defaultPort])) {
    return {
      ok: false,
      header: 'origin',
      value: headers.origin,
      reason: `Origin ${JSON.stringify(headers.origin)} is not a page this gateway serves (DNS rebinding or a cross-site request?); ${advice}`,
    };
  }
  return { ok: true };
}

function parseOrigin(text: string): { authority: Authority; defaultPort: number } | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return undefined;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return undefined;
  if (url.username !== '' || url.password !== '' || url.pathname !== '/' || url.search || url.hash)
    return undefined;
  return {
    authority: { hostname: url.hostname, port: url.port === '' ? undefined : Number(url.port) },
    defaultPort: url.protocol === 'https:' ? 443 : 80,
  };
}
