import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/loadConfig.js';
import { type Daemon, startDaemon } from '../../src/daemon/startDaemon.js';
import { createLogger } from '../../src/log/logger.js';
import { uniqueHostId } from '../support/broker.js';
import { startTlsBroker, type TlsBroker } from '../support/tlsBroker.js';
import { waitFor } from '../support/waitFor.js';

// amqps:// with certificate verification (R-H2) against a private RabbitMQ node with a TLS
// listener (test/support/tlsBroker.ts); the shared broker on 5672 is not involved.

interface BrokerStatus {
  state: string;
  lastError: string | null;
}

describe('amqps:// with verification (private TLS broker)', () => {
  let broker: TlsBroker;
  const homes: string[] = [];
  const daemons: Daemon[] = [];

  beforeAll(async () => {
    broker = await startTlsBroker();
    console.log(`TLS test broker ${broker.nodeName} started in ${broker.startupMs} ms`);
  }, 120_000);
  afterAll(async () => {
    await broker?.stop();
  }, 60_000);
  afterEach(async () => {
    for (const daemon of daemons.splice(0)) await daemon.stop();
    for (const home of homes.splice(0)) rmSync(home, { recursive: true, force: true });
  });

  /** Starts a gateway in-process whose broker settings are `tls` (and `uri`); returns it and its log. */
  const gateway = async (tls: Record<string, string>, uri = broker.amqpsUri()) => {
    const home = mkdtempSync(join(tmpdir(), 'bridge-tls-'));
    homes.push(home);
    const hostId = uniqueHostId('tls');
    writeFileSync(
      join(home, 'config.json'),
      JSON.stringify({ hostId, mcp: { port: 0 }, broker: { uri, tls, retryBaseMs: 100, retryMaxMs: 400 } }),
    );
    const { config } = loadConfig({ env: { BRIDGE_HOME: home } });
    const lines: string[] = [];
    const logger = createLogger({
      level: 'info',
      host: hostId,
      destination: { write: (l: string) => lines.push(l) },
    });
    const daemon = await startDaemon({ config, logger });
    daemons.push(daemon);
    const status = async () => (await daemon.gateway.services.status.status()).broker as BrokerStatus;
    return { daemon, status, lines, hostId };
  };

  it('connects over amqps with the broker CA (and the name in broker.tls.servername)', async () => {
    const { status } = await gateway({ ca: broker.files.ca.cert, servername: 'localhost' });
    const connected = await waitFor('connected', async () =>
      (await status()).state === 'connected' ? true : undefined,
    );
    expect(connected).toBe(true);
    expect((await status()).lastError).toBeNull();
  });

  it('presents a client certificate from broker.tls.cert/key, which the broker verifies', async () => {
    const good = await gateway({
      ca: broker.files.ca.cert,
      servername: 'localhost',
      cert: broker.files.client.cert,
      key: broker.files.client.key,
    });
    await waitFor('connected', async () => ((await good.status()).state === 'connected' ? true : undefined));

    // The same gateway with a client certificate from a CA the broker does not trust: refused.
    const bad = await gateway({
      ca: broker.files.ca.cert,
      servername: 'localhost',
      cert: broker.files.otherClient.cert,
      key: broker.files.otherClient.key,
    });
    const error = await waitFor('a refusal', async () => (await bad.status()).lastError ?? undefined);
    expect((await bad.status()).state).not.toBe('connected');
    expect(error).toMatch(
      /^TLS: the broker refused the handshake \(tlsv1 alert unknown ca\) — .*broker\.tls\.cert/,
    );
  });

  it('with the wrong CA it does not connect, says so clearly, and keeps retrying', async () => {
    const { status, lines } = await gateway({ ca: broker.files.otherCa.cert, servername: 'localhost' });
    const error = await waitFor('lastError', async () => (await status()).lastError ?? undefined);
    expect(error).toMatch(/^TLS: self[- ]signed certificate in certificate chain — .*check broker\.tls\.ca$/);
    // Retries with backoff like any connection failure, each attempt logged as an error.
    await waitFor('a third failed attempt', () =>
      lines.filter((l) => l.includes('"level":50') && l.includes('broker.tls.ca')).length >= 3
        ? true
        : undefined,
    );
    expect((await status()).state).not.toBe('connected');
    const logged = JSON.parse(lines.find((l) => l.includes('broker.tls.ca')) as string) as { msg: string };
    expect(logged.msg).toContain('broker connection attempt failed: TLS: ');
  });

  it('with a certificate for another name it does not connect and points at broker.tls.servername', async () => {
    const { status } = await gateway({ ca: broker.files.ca.cert, servername: 'broker.example.org' });
    const error = await waitFor('lastError', async () => (await status()).lastError ?? undefined);
    expect(error).toMatch(/^TLS: Hostname\/IP does not match certificate's altnames/);
    expect(error).toContain('broker.tls.servername');
    expect((await status()).state).not.toBe('connected');
  });

  it('refuses to start when a broker.tls file cannot be read, naming the key and the path', async () => {
    const missing = join(tmpdir(), `no-such-ca-${process.pid}.pem`);
    await expect(gateway({ ca: missing })).rejects.toMatchObject({
      code: 'BAD_CONFIG',
      message: expect.stringMatching(new RegExp(`^broker\\.tls\\.ca: cannot read ${missing} \\(ENOENT\\)`)),
    });
    // A file that is not a certificate is caught at start too, not at the handshake.
    await expect(gateway({ ca: broker.files.ca.key })).rejects.toMatchObject({
      code: 'BAD_CONFIG',
      message: expect.stringContaining('broker.tls.ca'),
    });
  });

  it('refuses broker.tls with a plain amqp:// URI', async () => {
    await expect(gateway({ ca: broker.files.ca.cert }, broker.amqpUri)).rejects.toMatchObject({
      code: 'BAD_CONFIG',
      message: expect.stringContaining('broker.tls: is set but broker.uri has a plain amqp:// URI'),
    });
  });
});
