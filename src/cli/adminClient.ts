import { existsSync } from 'node:fs';
import { request } from 'node:http';
import { BridgeError, ErrorCode } from '../errors.js';
import { adminReply } from '../interfaces/adminProtocol.js';

/** Calls the running gateway's admin socket; throws a BridgeError with the gateway's own code. */
export async function callAdmin(socketPath: string, route: string, body?: unknown): Promise<unknown> {
  if (!existsSync(socketPath)) {
    throw new BridgeError(
      ErrorCode.gatewayUnavailable,
      `no gateway is running here (no admin socket at ${socketPath}): start one with \`agentbridge start\`, ` +
        'or point BRIDGE_HOME at the running gateway’s home',
    );
  }
  const payload = body === undefined ? undefined : JSON.stringify(body);
  const text = await new Promise<string>((resolve, reject) => {
    const req = request(
      {
        socketPath,
        path: route,
        method: payload === undefined ? 'GET' : 'POST',
        headers: payload === undefined ? {} : { 'content-type': 'application/json' },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
        res.on('error', reject);
      },
    );
    req.on('error', (err) =>
      reject(
        new BridgeError(
          ErrorCode.gatewayUnavailable,
          `cannot reach the gateway at ${socketPath}: ${err.message}; is \`agentbridge start\` still running?`,
          { cause: err, retryable: true },
        ),
      ),
    );
    if (payload !== undefined) req.write(payload);
    req.end();
  });
  const reply = adminReply.parse(JSON.parse(text));
  if (reply.ok) return reply.result;
  throw new BridgeError(reply.error.code as ErrorCode, reply.error.message, {
    retryable: reply.error.retryable ?? false,
  });
}
