import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chownSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import amqp from 'amqplib';
import { setupSharedTopology } from '../../src/federation/sharedTopology.js';
import { freePort } from './GatewayProcess.js';

/** A certificate and its private key, as PEM file paths. */
export interface KeyPair {
  cert: string;
  key: string;
}

export interface TlsBrokerFiles {
  /** The CA that signed the broker's and the client's certificates. */
  ca: KeyPair;
  /** The broker's certificate: CN localhost, SANs DNS:localhost and IP:127.0.0.1. */
  server: KeyPair;
  /** A client certificate signed by `ca` (the broker accepts it). */
  client: KeyPair;
  /** A second CA with nothing to do with this broker ("the wrong CA"). */
  otherCa: KeyPair;
  /** A client certificate signed by `otherCa` (the broker refuses it). */
  otherClient: KeyPair;
}

export interface TlsBroker {
  /** `bridge-tls-<random>@localhost`; manage it with `rabbitmqctl -n <nodeName>`. */
  readonly nodeName: string;
  /** Temp dir holding certificates, config, data and logs; removed by stop(). */
  readonly dir: string;
  readonly tcpPort: number;
  readonly tlsPort: number;
  readonly files: TlsBrokerFiles;
  /** How long the node took from spawn to accepting AMQP connections. */
  readonly startupMs: number;
  /** Plain AMQP as guest over loopback, for test setup. */
  readonly amqpUri: string;
  /** `amqps://user:password@127.0.0.1:<tlsPort>` (guest by default; guest may log in over loopback). */
  amqpsUri(user?: string, password?: string): string;
  /** Runs `rabbitmqctl -n <nodeName> ...args` and returns its stdout. */
  rabbitmqctl(...args: string[]): Promise<string>;
  /** Everything the node printed, for post-mortems. */
  output(): string;
  /** Stops the node and removes its directory. Safe to call twice. */
  stop(): Promise<void>;
}

/**
 * A private RabbitMQ node with a TLS listener, separate from the shared one on 5672 (which is
 * never touched): own node name, data and log dirs, config file, free ports for AMQP, AMQPS and
 * Erlang distribution, and a CA plus server and client certificates made with openssl.
 * TLS verifies clients that present a certificate (`verify_peer`) but does not require one.
 *
 * The shared topology is set up (as `agentbridge broker setup` would) unless `setup: false`.
 *
 * Startup takes about 5 s here (RabbitMQ 3.10.8, Erlang 25); stop about 1.5 s.
 *
 * On Debian, `rabbitmq-server`/`rabbitmqctl` run as root switch to the rabbitmq user (and its
 * Erlang cookie), so the directory is handed to that user.
 */
export async function startTlsBroker(options: { setup?: boolean } = {}): Promise<TlsBroker> {
  const dir = mkdtempSync(join(tmpdir(), 'bridge-tls-broker-'));
  const nodeName = `bridge-tls-${randomBytes(4).toString('hex')}@localhost`;
  let child: ChildProcess | undefined;
  let output = '';
  let stopped = false;

  const ctl = (...args: string[]): Promise<string> =>
    new Promise((resolve, reject) => {
      execFile('rabbitmqctl', ['-n', nodeName, ...args], { timeout: 60_000 }, (err, stdout, stderr) => {
        if (err)
          reject(new Error(`rabbitmqctl -n ${nodeName} ${args.join(' ')} failed: ${stderr || err.message}`));
        else resolve(stdout);
      });
    });

  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    if (child && child.exitCode === null && child.signalCode === null) {
      // `shutdown` returns once the node's OS process is gone.
      await ctl('shutdown').catch(() => undefined);
      killNode(join(dir, 'node.pid'));
      const exited = new Promise((resolve) => child?.once('exit', resolve));
      child.kill('SIGTERM');
      await Promise.race([exited, sleep(5_000)]);
    }
    rmSync(dir, { recursive: true, force: true });
  };

  try {
    const files = makeCertificates(dir);
    const [tcpPort, tlsPort, distPort] = (await distinctFreePorts(3)) as [number, number, number];
    const mnesia = join(dir, 'mnesia');
    const logs = join(dir, 'log');
    mkdirSync(mnesia);
    mkdirSync(logs);
    writeFileSync(join(dir, 'enabled_plugins'), '[].\n');
    writeFileSync(
      join(dir, 'rabbitmq.conf'),
      [
        `listeners.tcp.default = 127.0.0.1:${tcpPort}`,
        `listeners.ssl.default = 127.0.0.1:${tlsPort}`,
        `ssl_options.cacertfile = ${files.ca.cert}`,
        `ssl_options.certfile = ${files.server.cert}`,
        `ssl_options.keyfile = ${files.server.key}`,
        'ssl_options.verify = verify_peer',
        'ssl_options.fail_if_no_peer_cert = false',
        '',
      ].join('\n'),
    );
    handToBrokerUser(dir);

    // Variable names as read by RabbitMQ 3.10's rabbit_env (RABBITMQ_* from the environment
    // win over /etc/rabbitmq/rabbitmq-env.conf). Any RABBITMQ_* of our own environment goes.
    const env: NodeJS.ProcessEnv = Object.fromEntries(
      Object.entries(process.env).filter(([name]) => !name.startsWith('RABBITMQ_')),
    );
    Object.assign(env, {
      RABBITMQ_NODENAME: nodeName,
      RABBITMQ_MNESIA_BASE: mnesia,
      RABBITMQ_LOG_BASE: logs,
      RABBITMQ_CONFIG_FILE: join(dir, 'rabbitmq.conf'),
      // Keep the system's conf.d, advanced.config and enabled plugins (a management listener
      // on a fixed port) out of this node.
      RABBITMQ_CONFIG_FILES: join(dir, 'conf.d', '*.conf'),
      RABBITMQ_ADVANCED_CONFIG_FILE: join(dir, 'advanced.config'),
      RABBITMQ_ENABLED_PLUGINS_FILE: join(dir, 'enabled_plugins'),
      RABBITMQ_PID_FILE: join(dir, 'node.pid'),
      RABBITMQ_NODE_PORT: String(tcpPort),
      RABBITMQ_DIST_PORT: String(distPort),
    });

    const started = Date.now();
    const proc = spawn('rabbitmq-server', [], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    child = proc;
    proc.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    proc.stderr?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    proc.on('error', (err) => {
      output += `\nspawn failed: ${err.message}`;
    });

    const amqpUri = `amqp://guest:guest@127.0.0.1:${tcpPort}`;
    const deadline = started + 90_000;
    for (;;) {
      if (proc.exitCode !== null || proc.signalCode !== null || output.includes('spawn failed')) {
        throw new Error(`the TLS test broker exited during startup:\n${output}\n${logTail(logs)}`);
      }
      if (Date.now() > deadline) {
        throw new Error(`the TLS test broker did not start within 90 s:\n${output}\n${logTail(logs)}`);
      }
      if ((await acceptsAmqp(amqpUri)) && (await acceptsTcp(tlsPort))) break;
      await sleep(100);
    }
    const startupMs = Date.now() - started;
    // What the operator does once per broker; a test of the setup itself asks for a bare node.
    if (options.setup ?? true) await setupSharedTopology({ uri: amqpUri });

    return {
      nodeName,
      dir,
      tcpPort,
      tlsPort,
      files,
      startupMs,
      amqpUri,
      amqpsUri: (user = 'guest', password = 'guest') =>
        `amqps://${encodeURIComponent(user)}:${encodeURIComponent(password)}@127.0.0.1:${tlsPort}`,
      rabbitmqctl: ctl,
      output: () => output,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

function openssl(dir: string, args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
}

function newKey(dir: string, name: string): string[] {
  return [
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-keyout',
    join(dir, `${name}.key`),
  ];
}

function makeCa(dir: string, name: string, cn: string): KeyPair {
  openssl(dir, [
    'req',
    '-x509',
    ...newKey(dir, name),
    '-out',
    join(dir, `${name}.pem`),
    '-days',
    '2',
    '-subj',
    `/CN=${cn}`,
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  ]);
  return { cert: join(dir, `${name}.pem`), key: join(dir, `${name}.key`) };
}

function issue(dir: string, ca: KeyPair, name: string, cn: string, extensions: string[]): KeyPair {
  const csr = join(dir, `${name}.csr`);
  const ext = join(dir, `${name}.ext`);
  openssl(dir, ['req', '-new', ...newKey(dir, name), '-out', csr, '-subj', `/CN=${cn}`]);
  writeFileSync(ext, `${['basicConstraints=CA:FALSE', ...extensions].join('\n')}\n`);
  openssl(dir, [
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    ca.cert,
    '-CAkey',
    ca.key,
    '-set_serial',
    `0x${randomBytes(8).toString('hex')}`,
    '-days',
    '2',
    '-out',
    join(dir, `${name}.pem`),
    '-extfile',
    ext,
  ]);
  return { cert: join(dir, `${name}.pem`), key: join(dir, `${name}.key`) };
}

/** A CA, the broker's certificate, a client certificate, and an unrelated CA with its own client. */
export function makeCertificates(dir: string): TlsBrokerFiles {
  const ca = makeCa(dir, 'ca', 'bridge test CA');
  const otherCa = makeCa(dir, 'other-ca', 'some other CA');
  return {
    ca,
    server: issue(dir, ca, 'server', 'localhost', [
      'subjectAltName=DNS:localhost,IP:127.0.0.1',
      'extendedKeyUsage=serverAuth',
    ]),
    client: issue(dir, ca, 'client', 'bridge-client', ['extendedKeyUsage=clientAuth']),
    otherCa,
    otherClient: issue(dir, otherCa, 'other-client', 'bridge-client', ['extendedKeyUsage=clientAuth']),
  };
}

/** Free loopback ports, distinct from each other. */
async function distinctFreePorts(count: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < count) ports.add(await freePort());
  return [...ports];
}

/** Run as root, Debian's wrappers start the node as the rabbitmq user: let it own the dir. */
function handToBrokerUser(dir: string): void {
  if (process.getuid?.() !== 0) return;
  let uid: number;
  let gid: number;
  try {
    uid = Number(execFileSync('id', ['-u', 'rabbitmq']).toString().trim());
    gid = Number(execFileSync('id', ['-g', 'rabbitmq']).toString().trim());
  } catch {
    return; // no rabbitmq user: the node runs as root
  }
  const walk = (path: string) => {
    chownSync(path, uid, gid);
    if (statSync(path).isDirectory()) for (const entry of readdirSync(path)) walk(join(path, entry));
  };
  walk(dir);
}

async function acceptsAmqp(uri: string): Promise<boolean> {
  try {
    const connection = await amqp.connect(uri, { timeout: 2_000 });
    await connection.close();
    return true;
  } catch {
    return false;
  }
}

function acceptsTcp(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = netConnect({ host: '127.0.0.1', port }, () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('error', () => resolve(false));
  });
}

/** Last resort when `rabbitmqctl shutdown` failed: kill the node's OS process. */
function killNode(pidFile: string): void {
  try {
    const pid = Number(readFileSync(pidFile, 'utf8').trim());
    if (pid > 0) process.kill(pid, 'SIGKILL');
  } catch {
    // already gone (the pid file is removed on a clean stop)
  }
}

function logTail(logs: string): string {
  try {
    return readdirSync(logs)
      .filter((name) => name.endsWith('.log'))
      .map(
        (name) => `--- ${name}\n${readFileSync(join(logs, name), 'utf8').split('\n').slice(-40).join('\n')}`,
      )
      .join('\n');
  } catch {
    return '';
  }
}
