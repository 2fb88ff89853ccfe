import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import amqp, { type ChannelModel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addTrust } from '../../src/security/TrustStore.js';
import { uniqueHostId } from '../support/broker.js';
import { brokerEnv, brokerUri, removeDeadLettersOf, waitFor } from '../support/federation.js';
import { freePort, GatewayProcess, runCli } from '../support/GatewayProcess.js';
import { addVhost, deleteVhost } from '../support/rabbit.js';
import { announcePresence, fakePeer } from '../support/signedPeer.js';

/** One FAIL line of `agentbridge doctor`'s text output and the fix under it. */
function failure(stdout: string, check: string): string | undefined {
  const lines = stdout.split('\n');
  const at = lines.findIndex((line) => line.startsWith(`FAIL ${check}:`));
  return at < 0 ? undefined : `${lines[at]}\n${lines[at + 1] ?? ''}`;
}

/**
 * `agentbridge doctor` finds what a new install lacks, each failure with its fix, and exits 1:
 * tmux missing, the port taken, the broker down or not set up, a peer not trusted here, a peer
 * that does not trust this host back, a peer's clock 10 minutes off.
 */
describe('agentbridge doctor', () => {
  let home: string;
  let listener: Server;
  let takenPort: number;

  beforeAll(async () => {
    home = mkdtempSync(join(tmpdir(), 'bridge-doctor-'));
    takenPort = await freePort();
    listener = createServer();
    await new Promise<void>((resolve) => listener.listen(takenPort, '127.0.0.1', resolve));
  });

  afterAll(async () => {
    await new Promise((resolve) => listener?.close(resolve));
    rmSync(home, { recursive: true, force: true });
  });

  it('no tmux, the port taken, the broker down: each a FAIL with its fix, exit 1', async () => {
    const closedPort = await freePort();
    const result = await runCli(['doctor'], {
      PATH: '/nonexistent',
      BRIDGE_HOME: join(home, 'gateway'),
      BRIDGE_MCP_PORT: String(takenPort),
      BRIDGE_BROKER_URI: `amqp://guest:guest@127.0.0.1:${closedPort}`,
    });
    expect(result.code, result.stderr || result.stdout).toBe(1);
    expect(failure(result.stdout, 'tmux')).toMatch(/not found on PATH.*\n +fix: install tmux/);
    expect(failure(result.stdout, 'port')).toMatch(
      new RegExp(
        `127\\.0\\.0\\.1:${takenPort} is taken \\(EADDRINUSE\\)\\n +fix: .*BRIDGE_MCP_PORT or mcp\\.port`,
      ),
    );
    expect(failure(result.stdout, 'broker')).toMatch(
      new RegExp(`127\\.0\\.0\\.1:${closedPort} does not answer: .*ECONNREFUSED.*\\n +fix: start RabbitMQ`),
    );
    expect(result.stdout).toMatch(/^3 checks failed$/m);
  });

  it('a vhost without the shared topology: run broker setup', async () => {
    const vhost = `bridge-test-doctor-${process.pid}`;
    await addVhost(vhost);
    try {
      const result = await runCli(['doctor', '--json'], {
        BRIDGE_HOME: join(home, 'gateway'),
        BRIDGE_MCP_PORT: String(await freePort()),
        BRIDGE_BROKER_URI: `${brokerUri.replace(/\/$/, '')}/${vhost}`,
      });
      expect(result.code, result.stderr || result.stdout).toBe(1);
      const report = JSON.parse(result.stdout) as {
        ok: boolean;
        findings: Array<{ check: string; ok: boolean; detail: string; fix?: string }>;
      };
      expect(report.ok).toBe(false);
      expect(report.findings).toContainEqual({
        check: 'broker setup',
        ok: false,
        detail: expect.stringMatching(/lacks the shared topology \(exchange bridge\.msg/),
        fix: expect.stringContaining('run `agentbridge broker setup` once as the broker operator'),
      });
    } finally {
      await deleteVhost(vhost);
    }
  });

  describe('peers of a running gateway', () => {
    let alpha: GatewayProcess;
    let beta: GatewayProcess;
    let connection: ChannelModel;
    const stranger = fakePeer('doc-stranger');
    const skewed = fakePeer('doc-skewed');

    beforeAll(async () => {
      // beta trusts nobody: it refuses alpha's messages; alpha trusts beta, so it routes to it.
      alpha = new GatewayProcess({ hostId: uniqueHostId('doc-alpha'), env: { ...brokerEnv } });
      beta = new GatewayProcess({
        hostId: uniqueHostId('doc-beta'),
        env: { ...brokerEnv },
        trustCircle: false,
      });
      beta.publicKey; // its key, made before it starts
      alpha.trust(beta);
      addTrust(alpha.home, skewed.host, skewed.keys.publicKeyString);
      await Promise.all([alpha.start(), beta.start()]);
      connection = await amqp.connect(brokerUri);
    });

    afterAll(async () => {
      await connection?.close().catch(() => {});
      await Promise.all([alpha?.dispose(), beta?.dispose()]);
      await removeDeadLettersOf([alpha?.hostId, beta?.hostId].filter((h): h is string => h !== undefined));
      for (const peer of [stranger, skewed]) rmSync(peer.home, { recursive: true, force: true });
    });

    it('a peer not trusted here, one not trusting this host back, one whose clock is 10 minutes off', async () => {
      const lead = JSON.parse(
        (await alpha.cli(['register', '--kind', 'main', '--name', 'lead', '--json'])).stdout,
      ) as { token: string };
      expect((await beta.cli(['register', '--kind', 'main', '--name', 'far'])).code).toBe(0);
      await waitFor('far@beta in alpha’s roster', async () =>
        (await alpha.cli(['roster'])).stdout.includes(`far@${beta.hostId}`) ? true : undefined,
      );
      const sent = await alpha.cli(['send', `far@${beta.hostId}`, 'are we trusted?'], {
        BRIDGE_TOKEN: lead.token,
      });
      expect(sent.code, sent.stderr || sent.stdout).toBe(0);
      const channel = await connection.createConfirmChannel();
      await announcePresence(channel, stranger, []);
      await announcePresence(channel, skewed, [], skewed.host, 10 * 60_000);
      await channel.close();

      const result = await waitFor('doctor to see all three', async () => {
        const r = await alpha.cli(['doctor']);
        return ['trust', 'clock', 'trusted back'].every((check) => failure(r.stdout, check)) ? r : undefined;
      });
      expect(result.code).toBe(1);
      expect(failure(result.stdout, 'trust')).toMatch(
        new RegExp(
          `${stranger.host} announces itself .* but is not trusted here.*\\n +fix: agentbridge trust add ${stranger.host} `,
        ),
      );
      expect(failure(result.stdout, 'clock')).toMatch(
        new RegExp(
          `${skewed.host}'s announcements are stamped off this host's clock .*: stamped 600 s in the future.*\\n +fix: synchronise both clocks`,
        ),
      );
      expect(failure(result.stdout, 'trusted back')).toMatch(
        new RegExp(
          `${beta.hostId} refused this host's messages: it does not trust ${alpha.hostId}'s key\\n +fix: on ${beta.hostId}: agentbridge trust add ${alpha.hostId} ${alpha.publicKey.replace(/[+/]/g, '\\$&')}`,
        ),
      );
    });
  });
});
