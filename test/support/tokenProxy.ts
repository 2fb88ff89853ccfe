import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface TokenProxyOptions {
  /** Where the proxy listens. */
  listenHost: string;
  listenPort: number;
  /** The gateway it forwards to. */
  upstreamHost: string;
  upstreamPort: number;
  /** Sent as `Authorization: Bearer <token>` on every request that carries none (read per request). */
  token: () => string;
}

export interface TokenProxy {
  readonly url: string;
  close(): Promise<void>;
}

/**
 * A reverse proxy for clients that cannot send a bearer token (the MCP conformance suite): it
 * adds one and forwards everything else as sent, Host and Origin included, so the gateway judges
 * the client's own headers. Bodies stream both ways (SSE responses included).
 */
export async function startTokenProxy(options: TokenProxyOptions): Promise<TokenProxy> {
  const server = createServer((req, res) => {
    const headers = { ...req.headers };
    headers.authorization ??= `Bearer ${options.token()}`;
    const upstream = request(
      {
        host: options.upstreamHost,
        port: options.upstreamPort,
        method: req.method,
        path: req.url,
        headers,
        setHost: false,
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on('error', (err) => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
      res.end(`token proxy: upstream failed: ${err.message}`);
    });
    // A client that goes away (an SSE stream it cancels) ends the upstream request too.
    res.on('close', () => upstream.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.listenPort, options.listenHost, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const host = options.listenHost.includes(':') ? `[${options.listenHost}]` : options.listenHost;
  return {
    url: `http://${host}:${port}`,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
