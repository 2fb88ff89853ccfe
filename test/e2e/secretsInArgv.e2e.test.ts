import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uniqueHostId } from '../support/broker.js';
import { waitFor } from '../support/federation.js';
import { GatewayProcess, runCli } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';
import { startTmuxServer, type TmuxTestServer } from '../support/tmux.js';

// Secrets in argv: a process's arguments are readable by every local user (`ps`,
// /proc/<pid>/cmdline) while it runs. A spawned agent's BRIDGE_TOKEN and the broker password
// `provision --apply` sets must never be one.

/** Every process's argv now, NULs as spaces. */
function allCommandLines(): string[] {
  const lines: string[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      lines.push(readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' '));
    } catch {
      // The process ended between readdir and read.
    }
  }
  return lines;
}

/** A directory to put first on PATH, holding `name`: a script that logs its argv and stdin to `log`. */
function recorder(name: string, body: string): { dir: string; log: string } {
  const dir = mkdtempSync(join(tmpdir(), 'bridge-argv-'));
  const log = join(dir, 'log');
  writeFileSync(log, '');
  const script = join(dir, name);
  writeFileSync(
    script,
    [
      '#!/bin/sh',
      `LOG=${JSON.stringify(log)}`,
      `{ printf 'argv:'; for a in "$@"; do printf ' %s' "$a"; done; printf '\\n'; } >> "$LOG"`,
      body,
      '',
    ].join('\n'),
  );
  chmodSync(script, 0o755);
  return { dir, log };
}

describe("secrets in argv: a spawned tmux agent's BRIDGE_TOKEN", () => {
  let tmux: TmuxTestServer;
  let gateway: GatewayProcess;
  let mcp: Client;
  let wrapper: { dir: string; log: string };
  const session = `argv-${Math.random().toString(36).slice(2, 7)}`;

  beforeAll(async () => {
    tmux = await startTmuxServer();
    // The gateway's tmux is a wrapper that logs every argv it is run with, then runs tmux:
    // a `tmux new-window -e BRIDGE_TOKEN=…` lasts milliseconds, too short to catch in /proc.
    const realTmux = execFileSync('sh', ['-c', 'command -v tmux'], { encoding: 'utf8' }).trim();
    wrapper = recorder('tmux', `exec ${realTmux} "$@"`);
    gateway = new GatewayProcess({
      hostId: uniqueHostId('argv'),
      config: {
        spawn: { tmuxSocket: tmux.socket, tmuxSession: session },
        profiles: { agent: { command: 'test -n "$BRIDGE_TOKEN" && echo "token set: yes"; exec sleep 600' } },
      },
      env: { PATH: `${wrapper.dir}${delimiter}${process.env.PATH ?? ''}` },
    });
    await gateway.start();
    const result = await gateway.cli(['register', '--kind', 'main', '--name', 'lead', '--json']);
    expect(result.code, result.stderr || result.stdout).toBe(0);
    mcp = await connectMcp(gateway.mcpUrl, (JSON.parse(result.stdout) as { token: string }).token);
  });

  afterAll(async () => {
    await mcp?.close().catch(() => {});
    await gateway?.dispose();
    await tmux?.kill();
    if (wrapper) rmSync(wrapper.dir, { recursive: true, force: true });
  });

  it("is in no process's argv while the agent is launched and while it runs; its env file is gone", async () => {
    // Sample every process's argv for as long as the launch takes.
    const seen = new Set<string>();
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        for (const line of allCommandLines()) seen.add(line);
        await new Promise((resolve) => setImmediate(resolve));
      }
    })();
    const spawned = await callTool(mcp, 'bridge_spawn', {
      host: gateway.hostId,
      profile: 'agent',
      brief: 'hello',
      name: 'argv-agent',
      wait_ms: 30_000,
    });
    sampling = false;
    await sampler;
    expect(spawned.isError, JSON.stringify(spawned.content)).toBeFalsy();
    expect(spawned.structuredContent).toMatchObject({ status: 'running' });

    const [pane, pid, startCommand] = (
      await tmux.run(
        'list-panes',
        '-t',
        `=${session}:argv-agent`,
        '-F',
        '#{pane_id}\t#{pane_pid}\t#{pane_start_command}',
      )
    )
      .trim()
      .split('\t') as [string, string, string];
    await waitFor('the agent sees its token', async () =>
      (await tmux.capture(pane)).includes('token set: yes') ? true : undefined,
    );
    // The agent has the token in its environment…
    const environ = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
    const token = environ.find((v) => v.startsWith('BRIDGE_TOKEN='))?.slice('BRIDGE_TOKEN='.length) ?? '';
    expect(token).toMatch(/^.{20,}$/);
    // …and in no argv: not the tmux commands the gateway ran, not any process seen during the
    // launch, not any process now that the agent runs.
    const tmuxRuns = readFileSync(wrapper.log, 'utf8');
    expect(tmuxRuns).toContain('new-session');
    expect(tmuxRuns).not.toContain(token);
    expect([...seen].filter((line) => line.includes(token))).toEqual([]);
    expect(allCommandLines().filter((line) => line.includes(token))).toEqual([]);
    // The window's command names only the env file, which the shell has read and removed.
    const envFile = /\. '([^']+\/env)'/.exec(startCommand)?.[1];
    expect(envFile, startCommand).toBeDefined();
    expect(existsSync(envFile as string)).toBe(false);
  });
});

describe('secrets in argv: the broker password of provision --apply', () => {
  let home: string;
  let fake: { dir: string; log: string };
  const hostId = uniqueHostId('argvprov');

  // A rabbitmqctl that logs its argv and, for the password commands, what it reads on stdin
  // (for at most 5 s: a caller that leaves stdin open must not hang it).
  const fakeRabbitmqctl = [
    'case " $* " in',
    `  *" list_users "*) printf '%s\\n' "$FAKE_USERS" ;;`,
    `  *" add_user "*|*" change_password "*) { printf 'stdin:'; timeout 5 cat; } >> "$LOG" ;;`,
    'esac',
    'exit 0',
  ].join('\n');

  const provision = async (users: string, extra: string[] = []) => {
    writeFileSync(fake.log, '');
    const result = await runCli(['broker', 'provision', hostId, '--apply', '--json', ...extra], {
      BRIDGE_HOME: home,
      BRIDGE_HOST_ID: hostId,
      PATH: `${fake.dir}${delimiter}${process.env.PATH ?? ''}`,
      FAKE_USERS: users,
    });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    return {
      json: JSON.parse(result.stdout) as { password: string | null },
      log: readFileSync(fake.log, 'utf8'),
    };
  };

  beforeAll(() => {
    home = mkdtempSync(join(tmpdir(), 'bridge-argvprov-'));
    fake = recorder('rabbitmqctl', fakeRabbitmqctl);
  });

  afterAll(() => {
    rmSync(home, { recursive: true, force: true });
    if (fake) rmSync(fake.dir, { recursive: true, force: true });
  });

  it('goes to rabbitmqctl add_user on stdin, never as an argument', async () => {
    const { json, log } = await provision('[]');
    const password = json.password ?? '';
    expect(password).toMatch(/^[A-Za-z0-9_-]{32}$/);
    const argv = log.split('\n').filter((line) => line.startsWith('argv:'));
    expect(argv.some((line) => line.includes(`add_user bridge-${hostId}`))).toBe(true);
    expect(argv.filter((line) => line.includes(password))).toEqual([]);
    expect(log).toContain(`stdin:${password}\n`);
  });

  it('goes to rabbitmqctl change_password on stdin, any character included', async () => {
    // Off argv, the password no longer passes through the Debian wrapper's `sh -c` either.
    const file = join(home, 'password');
    const password = 'pa$$ `w` "o" \\rd';
    writeFileSync(file, `${password}\n`, { mode: 0o600 });
    const { json, log } = await provision(JSON.stringify([{ user: `bridge-${hostId}` }]), [
      '--password-file',
      file,
    ]);
    expect(json.password).toBe(password);
    const argv = log.split('\n').filter((line) => line.startsWith('argv:'));
    expect(argv.some((line) => line.includes(`change_password bridge-${hostId}`))).toBe(true);
    expect(argv.filter((line) => line.includes(password))).toEqual([]);
    expect(log).toContain(`stdin:${password}\n`);
  });
});
