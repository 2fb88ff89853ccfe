import { accessSync, constants, existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { delimiter, join, resolve } from 'node:path';
import { loadConfig } from '../config/loadConfig.js';
import { agentDirs, type Config, redactUri } from '../config/schema.js';
import { allLedgers, disconnectCommand } from '../connect/ledger.js';
import { BridgeError } from '../errors.js';
import { describeBrokerError } from '../federation/describeBrokerError.js';
import { probeSharedTopology } from '../federation/sharedTopology.js';
import { adminRoutes, adminSocketPath } from '../interfaces/adminProtocol.js';
import { loadKeys } from '../security/keys.js';
import { openEntries } from '../security/privateHome.js';
import type { DeadLetterView } from '../wire/deadLetterView.js';
import { PresenceRefusal } from '../wire/presence.js';
import { callAdmin } from './adminClient.js';
import type { CliValues } from './cliOptions.js';
import { printResult } from './output.js';

/**
 * `agentbridge doctor`: what a new install needs, checked one by one, each failure with what to
 * do about it; exits 1 when anything failed. It reads and probes, and changes nothing.
 */

export interface Finding {
  check: string;
  ok: boolean;
  /** What was found. */
  detail: string;
  /** What to do, for a failure. */
  fix?: string;
}

const pass = (check: string, detail: string): Finding => ({ check, ok: true, detail });
const fail = (check: string, detail: string, fix: string): Finding => ({ check, ok: false, detail, fix });

interface RunningStatus {
  host: string;
  mcpUrl?: string;
  broker: {
    state: string;
    lastError?: string | null;
    ignoredPeers?: Array<{ host: string; reason: string; detail: string; count: number }>;
  } | null;
  signing: { mode: string; trustedHosts: string[] } | null;
}

export async function runDoctor(values: CliValues): Promise<number> {
  const { config } = loadConfig({ file: values.config });
  const findings: Finding[] = [checkTmux(), ...checkHome(config)];
  const status = await runningStatus(config);
  findings.push(
    status
      ? pass('gateway', `running as ${status.host} (${status.mcpUrl ?? 'MCP endpoint unknown'})`)
      : await checkPort(config),
  );
  findings.push(...(await checkBroker(config)));
  if (status) findings.push(...(await checkPeers(config, status)));
  findings.push(...checkConnections(config, status?.mcpUrl));
  const failed = findings.filter((f) => !f.ok).length;
  printResult(values, { ok: failed === 0, findings }, () =>
    [
      ...findings.map(
        (f) => `${f.ok ? 'ok  ' : 'FAIL'} ${f.check}: ${f.detail}${f.fix ? `\n     fix: ${f.fix}` : ''}`,
      ),
      failed === 0 ? 'all checks passed' : `${failed} check${failed === 1 ? '' : 's'} failed`,
    ].join('\n'),
  );
  return failed === 0 ? 0 : 1;
}

function checkTmux(): Finding {
  const found = (process.env.PATH ?? '').split(delimiter).some((dir) => {
    try {
      accessSync(join(dir, 'tmux'), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
  return found
    ? pass('tmux', 'on PATH')
    : fail(
        'tmux',
        'not found on PATH: workers in tmux panes cannot be typed into',
        'install tmux (Debian: apt-get install tmux)',
      );
}

/** The home and what is in it: private to its owner, as the gateway makes it at start. */
function checkHome(config: Config): Finding[] {
  const home = resolve(config.home);
  if (!existsSync(home))
    return [pass('home', `${home} does not exist yet; \`agentbridge start\` makes it (0700)`)];
  const open = openEntries(home, { agentDirs: agentDirs(config) });
  if (open.length === 0) return [pass('home', `${home}, private to its owner`)];
  const listed = open.slice(0, 5).map((e) => `${join(home, e.path)} (${e.mode})`);
  return [
    fail(
      'home',
      `readable by others: ${listed.join(', ')}${open.length > 5 ? ` and ${open.length - 5} more` : ''}`,
      `chmod -R go= ${home}   (the gateway also makes them private at its next start)`,
    ),
  ];
}

async function runningStatus(config: Config): Promise<RunningStatus | undefined> {
  try {
    return (await callAdmin(adminSocketPath(config), adminRoutes.status)) as RunningStatus;
  } catch {
    return undefined;
  }
}

/** No gateway runs here: can one start on its port? */
function checkPort(config: Config): Promise<Finding> {
  const { host, port } = config.mcp;
  return new Promise((done) => {
    const server = createServer();
    server.once('error', (err: NodeJS.ErrnoException) =>
      done(
        fail(
          'port',
          `no gateway runs here, and ${host}:${port} is taken (${err.code ?? err.message})`,
          `stop what listens there (ss -ltnp 'sport = :${port}'), or give the gateway another port: BRIDGE_MCP_PORT or mcp.port`,
        ),
      ),
    );
    server.listen(port, host, () =>
      server.close(() =>
        done(pass('port', `no gateway runs here; ${host}:${port} is free for one (agentbridge start)`)),
      ),
    );
  });
}

async function checkBroker(config: Config): Promise<Finding[]> {
  const { uris } = config.broker;
  if (uris.length === 0) return [pass('broker', 'none configured: single-host')];
  const findings: Finding[] = [];
  for (const uri of uris) {
    try {
      await probeSharedTopology({
        uri,
        tls: config.broker.tls,
        connectTimeoutMs: Math.min(config.broker.connectTimeoutMs, 5_000),
      });
      findings.push(pass('broker', `${redactUri(uri)} answers and has the shared topology`));
    } catch (err) {
      if (err instanceof BridgeError) {
        findings.push(
          fail(
            'broker setup',
            `${redactUri(uri)}: ${err.message.split(': run')[0]}`,
            'run `agentbridge broker setup` once as the broker operator, with the operator login in BRIDGE_BROKER_URI',
          ),
        );
      } else {
        const { message } = describeBrokerError(err);
        findings.push(
          fail(
            'broker',
            `${redactUri(uri)} does not answer: ${message}`,
            'start RabbitMQ there (rabbitmq-server -detached), or fix BRIDGE_BROKER_URI / broker.uri (host, port, login, vhost)',
          ),
        );
      }
    }
  }
  return findings;
}

/** Peers: heard but not believed (not trusted here, a clock off), and refusing this host's messages. */
async function checkPeers(config: Config, status: RunningStatus): Promise<Finding[]> {
  if (!status.broker || !status.signing) return [];
  const findings: Finding[] = [];
  let key = '<this host’s public keys: agentbridge keys show>';
  try {
    key = loadKeys(resolve(config.home)).trustString;
  } catch {
    // Not made yet: the fix names the command that shows it.
  }
  const maxSkew = config.security.maxClockSkewMs;
  for (const peer of status.broker.ignoredPeers ?? []) {
    if (peer.reason === 'bad-signature') {
      findings.push(
        fail(
          'trust',
          `${peer.host} announces itself (${peer.count}×) but is not trusted here: ${peer.detail}`,
          `agentbridge trust add ${peer.host} <its keys, from \`agentbridge keys show\` on ${peer.host}>`,
        ),
      );
    } else if (peer.reason === PresenceRefusal.clockSkew || peer.reason === PresenceRefusal.stale) {
      findings.push(
        fail(
          'clock',
          `${peer.host}'s announcements are stamped off this host's clock by more than security.maxClockSkewMs (${maxSkew} ms): ${peer.detail}`,
          `synchronise both clocks (NTP: timedatectl set-ntp true), on this host and on ${peer.host}`,
        ),
      );
    }
  }
  // This host's messages that a peer refused for their signature: the peer does not trust it back.
  const letters = (await callAdmin(adminSocketPath(config), adminRoutes.dlqList, { max: 1000 }).catch(
    () => [],
  )) as DeadLetterView[];
  const refusers = new Set(
    letters
      .filter((l) => l.reason === 'bad-signature' && l.detail.startsWith(`signed by ${status.host},`))
      .map((l) => l.host),
  );
  for (const peer of refusers) {
    findings.push(
      fail(
        'trusted back',
        `${peer} refused this host's messages: it does not trust ${status.host}'s key`,
        `on ${peer}: agentbridge trust add ${status.host} ${key}`,
      ),
    );
  }
  if (findings.length === 0) {
    findings.push(
      pass('peers', `${status.signing.trustedHosts.length} trusted; none refused, none refusing this host`),
    );
  }
  return findings;
}

/** What `agentbridge connect` wrote: still there, and naming this gateway's endpoint. */
function checkConnections(config: Config, mcpUrl: string | undefined): Finding[] {
  return allLedgers(resolve(config.home)).flatMap((ledger) => {
    const check = `${ledger.agent} config`;
    const undo = `${disconnectCommand(ledger)}, then connect it again`;
    return ledger.files.map((file) => {
      if (!existsSync(file.path))
        return fail(check, `${file.path} is gone (connected as ${ledger.name})`, undo);
      if (
        mcpUrl !== undefined &&
        file.after.includes('/mcp') &&
        !readFileSync(file.path, 'utf8').includes(mcpUrl)
      ) {
        return fail(check, `${file.path} does not name this gateway's endpoint ${mcpUrl}`, undo);
      }
      return pass(check, `${file.path} (as ${ledger.name})`);
    });
  });
}
