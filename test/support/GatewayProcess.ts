import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { callAdmin } from '../../src/cli/adminClient.js';
import type { RosterEntry } from '../../src/gateway/GatewayStatus.js';
import { adminRoutes } from '../../src/interfaces/adminProtocol.js';
import { initKeys, loadKeys } from '../../src/security/keys.js';
import { addTrust } from '../../src/security/TrustStore.js';
import { uniqueHostId } from './broker.js';
import { brokerEnv, testDeployment } from './federation.js';
import { waitFor } from './waitFor.js';

/** Federated gateways of this test process that trust each other. */
const circle = new Set<GatewayProcess>();

export const repoRoot = resolve(import.meta.dirname, '..', '..');
export const cliPath = join(repoRoot, 'dist', 'cli', 'main.js');

/** A free TCP port on loopback (asked of the kernel, then released). */
export async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolvePort(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the `bridge` CLI as its own process. */
export function runCli(args: string[], env: NodeJS.ProcessEnv = {}, cwd = repoRoot): Promise<CliResult> {
  return new Promise((resolveRun) => {
    execFile(
      process.execPath,
      [cliPath, ...args],
      // Beyond execFile's 1 MiB default: `dlq list --max 10000` lists the shared broker's DLQ,
      // which holds the letters of every test running beside this one.
      { cwd, env: { ...process.env, ...env }, timeout: 60_000, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
        // Not an exit of its own (killed at the timeout, or not started): say which, or a
        // failed assertion on the code shows an empty stderr and nothing else.
        const why =
          err && typeof err.code !== 'number'
            ? `\n[runCli: ${err.killed ? `killed by ${err.signal} at the 60 s timeout` : err.message}]`
            : '';
        resolveRun({ code, stdout, stderr: `${stderr}${why}` });
      },
    );
  });
}

export interface GatewayProcessOptions {
  hostId?: string;
  /**
   * Federated gateways of one test process trust each other by default (each gets a key and
   * every other one's public key in its trust store), as the hosts of one deployment would.
   * False leaves this one outside: no key made for it, no one trusting it.
   */
  trustCircle?: boolean;
  /** Extra config written to $BRIDGE_HOME/config.json. */
  config?: Record<string, unknown>;
  env?: NodeJS.ProcessEnv;
  /**
   * A command the daemon is started under, e.g. `['ip', 'netns', 'exec', ns]` to run it in a
   * network namespace (it must exec the daemon, so `pid`, `stop` and `kill9` reach it).
   */
  wrap?: string[];
  /** Where MCP listens (`mcp.host`, set through BRIDGE_MCP_HOST) and the test reaches it; default 127.0.0.1. */
  mcpHost?: string;
}

/**
 * A gateway daemon as a separate OS process (`agentbridge start`), with its own home and port.
 * It can be SIGKILLed and started again on the same home, as after a crash.
 */
export class GatewayProcess {
  readonly home: string;
  readonly hostId: string;
  port = 0;
  private child: ChildProcess | undefined;
  private output = '';
  private readonly env: NodeJS.ProcessEnv;
  private readonly wrap: string[];
  readonly mcpHost: string;

  private readonly inCircle: boolean;

  constructor(options: GatewayProcessOptions = {}) {
    this.home = mkdtempSync(join(tmpdir(), 'bridge-gw-'));
    this.inCircle = (options.trustCircle ?? true) && Boolean(options.env?.BRIDGE_BROKER_URI);
    this.hostId = options.hostId ?? `host-${Math.random().toString(36).slice(2, 8)}`;
    this.wrap = options.wrap ?? [];
    this.mcpHost = options.mcpHost ?? '127.0.0.1';
    if (options.config) writeFileSync(join(this.home, 'config.json'), JSON.stringify(options.config));
    this.env = {
      BRIDGE_HOME: this.home,
      BRIDGE_HOST_ID: this.hostId,
      BRIDGE_LOG_LEVEL: 'info',
      // This file's deployment, whatever broker URI the test gives (a netns address, a cluster).
      BRIDGE_DEPLOYMENT: testDeployment,
      ...(options.mcpHost ? { BRIDGE_MCP_HOST: options.mcpHost } : {}),
      ...options.env,
    };
  }

  get mcpUrl(): string {
    return `http://${this.mcpHost}:${this.port}/mcp`;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Everything the daemon printed (logs and banner), for assertions and post-mortems. */
  get log(): string {
    return this.output;
  }

  cliEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
    return { ...this.env, BRIDGE_MCP_PORT: String(this.port), ...extra };
  }

  cli(args: string[], extra: NodeJS.ProcessEnv = {}): Promise<CliResult> {
    return runCli(args, this.cliEnv(extra));
  }

  /**
   * This gateway's roster, as `agentbridge roster --json` prints it, read from the admin socket
   * without starting a CLI process (a poll loop of CLI processes costs a core on a busy machine).
   */
  async roster(): Promise<RosterEntry[]> {
    return (await this.admin(adminRoutes.roster)) as RosterEntry[];
  }

  /** This gateway's status, as `agentbridge status --json` prints it, from the admin socket. */
  status(): Promise<unknown> {
    return this.admin(adminRoutes.status);
  }

  /** Waits until this gateway's roster lists `name` on `host` (another gateway's, by presence). */
  async waitForInRoster(name: string, host: string, timeoutMs?: number): Promise<void> {
    await waitFor(
      `${name}@${host} in ${this.hostId}'s roster`,
      async () => {
        const roster = await this.roster();
        return roster.some((e) => e.name === name && e.host === host) ? true : undefined;
      },
      timeoutMs,
    );
  }

  /** This gateway's public keys as a peer's `trust add` takes them (signing, sealing), made on first use. */
  get publicKey(): string {
    try {
      return loadKeys(this.home).trustString;
    } catch {
      return initKeys(this.home).trustString;
    }
  }

  /** Trusts `other`'s key (as `agentbridge trust add` would). */
  trust(other: GatewayProcess): void {
    addTrust(this.home, other.hostId, other.publicKey);
  }

  async start(): Promise<void> {
    if (this.inCircle && !circle.has(this)) {
      for (const member of circle) {
        this.trust(member);
        member.trust(this);
      }
      circle.add(this);
    }
    if (this.port === 0) this.port = await freePort();
    const [command, ...prefix] = [...this.wrap, process.execPath];
    const child = spawn(command as string, [...prefix, cliPath, 'start'], {
      cwd: this.home,
      env: { ...process.env, ...this.cliEnv() },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child = child;
    child.stdout?.on('data', (chunk: Buffer) => {
      this.output += chunk.toString();
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      this.output += chunk.toString();
    });
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      if (exited(child))
        throw new Error(`gateway exited with ${child.exitCode ?? child.signalCode}:\n${this.output}`);
      if (await this.healthy()) return;
      await sleep(50);
    }
    throw new Error(`gateway did not become healthy:\n${this.output}`);
  }

  async healthy(): Promise<boolean> {
    try {
      const res = await fetch(`http://${this.mcpHost}:${this.port}/healthz`);
      return res.ok && existsSync(join(this.home, 'admin.sock'));
    } catch {
      return false;
    }
  }

  /** `agentbridge register --kind KIND --name NAME … --json` on this gateway; throws when it fails. */
  async register(
    kind: string,
    name: string,
    extra: string[] = [],
  ): Promise<{ gid: string; token: string; name: string; host: string }> {
    const result = await this.cli(['register', '--kind', kind, '--name', name, ...extra, '--json']);
    if (result.code !== 0)
      throw new Error(`register ${name} on ${this.hostId}: ${result.stderr || result.stdout}`);
    return JSON.parse(result.stdout);
  }

  /** A call to the daemon's admin socket (as the CLI makes it), without starting a CLI process. */
  admin(route: string, body?: unknown): Promise<unknown> {
    return callAdmin(join(this.home, 'admin.sock'), route, body);
  }

  /** Resolves to the exit code (or signal) once the daemon has exited; rejects after `timeoutMs`. */
  async exited(timeoutMs: number): Promise<number | string> {
    const child = this.child;
    if (!child) throw new Error('never started');
    if (!exited(child)) {
      await new Promise<void>((resolveExit, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`gateway still running after ${timeoutMs} ms:\n${this.output}`)),
          timeoutMs,
        );
        child.once('exit', () => {
          clearTimeout(timer);
          resolveExit();
        });
      });
    }
    return child.exitCode ?? (child.signalCode as string);
  }

  /** SIGKILL: no shutdown code runs, as in a crash or an OOM kill. */
  async kill9(): Promise<void> {
    const child = this.child;
    if (!child || exited(child)) return;
    const done = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await done;
  }

  /** SIGTERM and wait for a clean exit. */
  async stop(): Promise<number | null> {
    const child = this.child;
    if (!child || exited(child)) return child?.exitCode ?? null;
    const done = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    const code = await done;
    clearTimeout(timer);
    return code;
  }

  async dispose(): Promise<void> {
    circle.delete(this);
    await this.stop();
    rmSync(this.home, { recursive: true, force: true });
  }
}

/** Whether a child process has ended, by exit code or by signal (a SIGKILLed child has no code). */
function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

/**
 * A gateway process on the test broker, under a host id of its own that starts with `prefix`,
 * with a short presence heartbeat (peers see each other within a second).
 */
export function federatedGateway(prefix: string, config: Record<string, unknown> = {}): GatewayProcess {
  return new GatewayProcess({
    hostId: uniqueHostId(prefix),
    env: { ...brokerEnv },
    config: { broker: { heartbeatMs: 300 }, ...config },
  });
}
