import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { createSecureContext } from 'node:tls';
import { BridgeError, ErrorCode } from '../errors.js';
import type { BrokerTlsConfig } from './schema.js';

/** The TLS socket options amqplib passes to `tls.connect` for an `amqps://` URI. */
export interface BrokerTlsSocketOptions {
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  servername?: string;
  /** Always true: a broker whose certificate does not verify is never talked to. */
  rejectUnauthorized: true;
}

/**
 * Reads the PEM files named by `broker.tls` (once, when the gateway starts). An unreadable
 * file is a BAD_CONFIG error naming the key and the path, so a typo stops the start instead of
 * surfacing later as a puzzling handshake failure. Returns the options for an `amqps://` URI;
 * for `amqp://` there are none (the schema refuses `broker.tls` with a plain URI).
 */
export function readBrokerTls(
  uri: string,
  tls: BrokerTlsConfig | undefined,
): BrokerTlsSocketOptions | undefined {
  if (!uri.startsWith('amqps://')) return undefined;
  const read = (key: 'ca' | 'cert' | 'key'): Buffer | undefined => {
    const path = tls?.[key];
    if (path === undefined) return undefined;
    try {
      return readFileSync(resolve(path));
    } catch (err) {
      throw new BridgeError(
        ErrorCode.badConfig,
        `broker.tls.${key}: cannot read ${resolve(path)} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}); ` +
          'fix the path or its permissions',
        { cause: err },
      );
    }
  };
  const ca = read('ca');
  const cert = read('cert');
  const key = read('key');
  // Check the contents now too: a wrong file would otherwise show up only as a failed handshake.
  if (ca) check('ca', tls?.ca, () => new X509Certificate(ca));
  if (cert && key) check('cert', tls?.cert, () => createSecureContext({ cert, key }), 'broker.tls.key');
  return {
    ...(ca ? { ca } : {}),
    ...(cert ? { cert } : {}),
    ...(key ? { key } : {}),
    ...(tls?.servername === undefined ? {} : { servername: tls.servername }),
    rejectUnauthorized: true,
  };
}

function check(key: 'ca' | 'cert', path: string | undefined, probe: () => unknown, also?: string): void {
  try {
    probe();
  } catch (err) {
    const which = also ? `broker.tls.${key} / ${also}` : `broker.tls.${key}`;
    throw new BridgeError(
      ErrorCode.badConfig,
      `${which}: ${resolve(path ?? '')} is not usable (${(err as Error).message}); ` +
        (key === 'ca'
          ? 'give the PEM certificate of the CA that signed the broker'
          : "give this gateway's PEM client certificate and its matching private key"),
      { cause: err },
    );
  }
}
