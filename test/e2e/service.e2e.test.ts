import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli } from '../support/GatewayProcess.js';

/** `agentbridge service install`: a systemd user unit that systemd itself accepts. */
describe('agentbridge service install and uninstall', () => {
  const home = mkdtempSync(join(tmpdir(), 'bridge-service-'));
  const bridgeHome = join(home, 'gateway');
  const unit = join(home, '.config', 'systemd', 'user', 'agentbridge.service');
  const env = {
    HOME: home,
    XDG_CONFIG_HOME: '',
    BRIDGE_HOME: bridgeHome,
    BRIDGE_CONFIG: '',
    BRIDGE_MCP_PORT: '7555',
    BRIDGE_HOST_ID: 'svc-host',
    BRIDGE_BROKER_URI: 'amqp://bridge-svc:s3cr%40t@broker.example:5672/team-a',
  };

  afterAll(() => rmSync(home, { recursive: true, force: true }));

  it('--print writes nothing; install writes the unit with this home and settings, the broker password only in a 0600 file; uninstall removes both', async () => {
    const printed = await runCli(['service', 'install', '--print'], env);
    expect(printed.code, printed.stderr || printed.stdout).toBe(0);
    expect(printed.stdout).toContain(`Environment="BRIDGE_HOME=${bridgeHome}"`);
    expect(existsSync(unit)).toBe(false);

    const installed = await runCli(['service', 'install'], env);
    expect(installed.code, installed.stderr || installed.stdout).toBe(0);
    expect(installed.stdout).toContain(
      'systemctl --user daemon-reload && systemctl --user enable --now agentbridge',
    );
    const text = readFileSync(unit, 'utf8');
    expect(text).toMatch(/^ExecStart="[^"]*node[^"]*" "[^"]*dist\/cli\/main\.js" "start"$/m);
    expect(text).toContain('Environment="BRIDGE_MCP_PORT=7555"');
    expect(text).toContain('Environment="BRIDGE_HOST_ID=svc-host"');
    expect(text).toContain('KillSignal=SIGTERM');
    expect(text).not.toContain('s3cr');
    const envFile = join(bridgeHome, 'service.env');
    expect(text).toContain(`EnvironmentFile=${envFile}`);
    expect(readFileSync(envFile, 'utf8')).toBe(`BRIDGE_BROKER_URI="${env.BRIDGE_BROKER_URI}"\n`);
    expect(statSync(envFile).mode & 0o777).toBe(0o600);

    // systemd's own reading of the unit: no unknown key, no bad value.
    const verified = (() => {
      try {
        return execFileSync('systemd-analyze', ['verify', unit], {
          encoding: 'utf8',
          stdio: ['ignore', 'pipe', 'pipe'],
        });
      } catch (err) {
        const e = err as { code?: string; stderr?: string; stdout?: string };
        // No systemd-analyze on this machine: nothing more to ask.
        return e.code === 'ENOENT' ? '' : `${e.stdout ?? ''}${e.stderr ?? ''}`;
      }
    })();
    expect(verified).toBe('');

    const removed = await runCli(['service', 'uninstall'], env);
    expect(removed.code, removed.stderr || removed.stdout).toBe(0);
    expect(existsSync(unit)).toBe(false);
    expect(existsSync(envFile)).toBe(false);
  });
});
