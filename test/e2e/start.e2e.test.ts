import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { freePort, GatewayProcess, repoRoot, runCli } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';

describe('starting the gateway', () => {
  it('`npm start` gives a single-host gateway on the embedded default and says how to connect', async () => {
    const home = mkdtempSync(join(tmpdir(), 'bridge-npmstart-'));
    const port = await freePort();
    const child = spawn('npm', ['start'], {
      cwd: repoRoot,
      env: { ...process.env, BRIDGE_HOME: home, BRIDGE_MCP_PORT: String(port) },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let output = '';
    child.stdout.on('data', (c: Buffer) => {
      output += c.toString();
    });
    child.stderr.on('data', (c: Buffer) => {
      output += c.toString();
    });
    try {
      const deadline = Date.now() + 90_000;
      while (!output.includes('Connect an agent') && Date.now() < deadline && child.exitCode === null)
        await sleep(100);
      expect(output).toContain('(single-host mode, no broker)');
      expect(output).toContain(`MCP endpoint:  http://127.0.0.1:${port}/mcp`);
      expect(output).toContain(`BRIDGE_HOME=${home} agentbridge register --kind main --name me`);
      const health = await fetch(`http://127.0.0.1:${port}/healthz`);
      expect(await health.json()).toMatchObject({ ok: true });
      const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      expect(metrics).toContain('bridge_deliveries_total');
      expect(existsSync(join(home, 'events.db'))).toBe(true);
    } finally {
      if (child.pid !== undefined && child.exitCode === null) process.kill(-child.pid, 'SIGTERM');
      await new Promise((r) => child.once('exit', r));
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('with no BRIDGE_HOME keeps its data in ./.bridge of the directory it runs in', async () => {
    const cwd = mkdtempSync(join(tmpdir(), 'bridge-cwd-'));
    const port = await freePort();
    const { BRIDGE_HOME: _home, BRIDGE_CONFIG: _config, ...env } = process.env;
    const child = spawn(process.execPath, [join(repoRoot, 'dist', 'cli', 'main.js'), 'start'], {
      cwd,
      env: { ...env, BRIDGE_MCP_PORT: String(port) },
      stdio: 'ignore',
    });
    try {
      const elsewhere = mkdtempSync(join(tmpdir(), 'bridge-elsewhere-'));
      const none = await runCli(['status'], env, elsewhere);
      expect(none.code).toBe(1);
      expect(none.stderr).toMatch(
        /no gateway is running here \(no admin socket at .*\.bridge\/admin\.sock\): start one/,
      );
      rmSync(elsewhere, { recursive: true, force: true });

      const deadline = Date.now() + 20_000;
      while (!existsSync(join(cwd, '.bridge', 'admin.sock')) && Date.now() < deadline) await sleep(50);
      await sleep(200);
      expect(existsSync(join(cwd, '.bridge', 'events.db'))).toBe(true);
      const status = await runCli(['status', '--json'], env, cwd);
      expect(JSON.parse(status.stdout)).toMatchObject({
        mode: 'single-host',
        store: join(cwd, '.bridge', 'events.db'),
      });
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
      rmSync(cwd, { recursive: true, force: true });
    }
  });

  it('stops cleanly on SIGTERM and comes back with its entities, tokens and held messages', async () => {
    const gateway = new GatewayProcess();
    try {
      await gateway.start();
      const a = JSON.parse(
        (await gateway.cli(['register', '--kind', 'main', '--name', 'a', '--json'])).stdout,
      );
      const b = JSON.parse(
        (await gateway.cli(['register', '--kind', 'orchestrator', '--name', 'b', '--json'])).stdout,
      );
      const sent = await gateway.cli(['send', 'b', 'survive a restart'], { BRIDGE_TOKEN: a.token });
      expect(sent.code, sent.stderr || sent.stdout).toBe(0);
      // The text output names the trace too, for `agentbridge export --trace` and the console.
      expect(sent.stdout).toMatch(/^sent [0-9a-f-]{36} to b@\S+ \(queued\); trace [0-9a-f-]{36}$/m);
      // Single-host: no broker DLQ line; this gateway's own dead letters are said to be its own.
      const status = (await gateway.cli(['status'])).stdout;
      expect(status).toContain('dead-lettered here since start: none');
      expect(status).not.toContain('broker DLQ');
      expect(await gateway.stop()).toBe(0);
      await gateway.start();
      const client = await connectMcp(gateway.mcpUrl, b.token);
      const drained = await callTool(client, 'bridge_drain', {});
      expect((drained.structuredContent as { messages: Array<{ text: string }> }).messages).toEqual([
        expect.objectContaining({ text: 'survive a restart', from: expect.objectContaining({ name: 'a' }) }),
      ]);
      const roster = await gateway.cli(['roster', '--json']);
      expect(JSON.parse(roster.stdout)).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ name: 'a', kind: 'main', status: 'active.idle' }),
          expect.objectContaining({ name: 'b', kind: 'orchestrator', status: 'active.idle' }),
        ]),
      );
      await client.close();
    } finally {
      await gateway.dispose();
    }
  });
});
