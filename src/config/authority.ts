/**
 * Host names and ports as a gateway's HTTP server reads them (a `Host` header, an
 * `mcp.allowedHosts` entry). Names are normalised by the WHATWG URL parser, as the MCP SDK's
 * `hostHeaderValidation` does (so `LOCALHOST`, `127.1` and `[0:0::1]` read as the loopback names
 * they are). Here, in the configuration, because the configuration is checked with it too.
 */

/** A host name (lower case; IPv6 in brackets) and a port; no port means the scheme's default. */
export interface Authority {
  readonly hostname: string;
  readonly port: number | undefined;
}

/** A DNS name or IPv4 address (letters, digits, `.`, `-`, `_`), or an IPv6 address in brackets. */
const authorityPattern = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::(\d{1,5}))?$/;

/**
 * Parses `host` or `host:port` (a `Host` header, an `mcp.allowedHosts` entry). Undefined for
 * anything else: userinfo, a path, a bad port, an empty name.
 */
export function parseAuthority(text: string): Authority | undefined {
  const match = authorityPattern.exec(text.trim());
  if (!match) return undefined;
  const [, name, portText] = match;
  const hostname = normaliseHostname(name as string);
  if (hostname === undefined) return undefined;
  if (portText === undefined) return { hostname, port: undefined };
  const port = Number(portText);
  return port >= 1 && port <= 65_535 ? { hostname, port } : undefined;
}

/** A host name as the WHATWG URL parser writes it (lower case, IPv6 in brackets), or undefined. */
export function normaliseHostname(name: string): string | undefined {
  try {
    const hostname = new URL(`http://${name}/`).hostname;
    return hostname === '' ? undefined : hostname;
  } catch {
    return undefined;
  }
}
