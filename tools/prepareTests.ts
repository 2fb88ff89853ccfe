/**
 * Makes this machine ready for `npm test`, which runs it first (so does .ci/run, through
 * `npm test`); a no-op of about a second when everything is there:
 *
 *   1. tmux, openssl and chromium (and rabbitmq-server if the broker is down and not installed)
 *      from Debian with apt-get when run as root; otherwise it names the command to run and
 *      exits 1;
 *   2. the test-only packages: test/conformance (the MCP conformance suite and its Node 22) and
 *      test/agents (the real agent TUIs), each `npm ci`-installed once per lock file into the
 *      machine's cache (~/.cache/bridge/test-packages) and linked as its node_modules, so a
 *      fresh clone links them in a moment;
 *   3. RabbitMQ started (`rabbitmq-server -detached`) when the test broker does not answer on
 *      127.0.0.1:5672 (or BRIDGE_TEST_BROKER_URI's host, which is only waited for if not local);
 *   4. this checkout's better-sqlite3 binary kept in the machine's cache (~/.cache/bridge/prebuilds),
 *      where the next install finds it (npm_config_better_sqlite3_local_prebuilds): the
 *      fresh-machine test's global install of the packed tarball, and .ci/run's next `npm ci`,
 *      link it instead of compiling it (about 90 s of one core).
 *
 *   npx tsx tools/prepareTests.ts      (npm run test:prepare)
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  accessSync,
  constants,
  cpSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  symlinkSync,
} from 'node:fs';
import { connect } from 'node:net';
import { homedir } from 'node:os';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { brokerUri } from '../test/support/federation.js';
import {
  aptInstallCommand,
  brokerAddress,
  cacheHome,
  chromiumCandidates,
  missingPackages,
  sqlitePrebuilds,
  testPackageCache,
} from './testPrerequisites.js';

const repoRoot = join(import.meta.dirname, '..');
/** The test-only package folders under test/, each with its own package.json and lock file. */
const testPackages = ['conformance', 'agents'];
const brokerWaitMs = 90_000;

const say = (line: string): void => console.log(`prepareTests: ${line}`);

function fail(lines: string[]): never {
  for (const line of lines) console.error(`prepareTests: ${line}`);
  process.exit(1);
}

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Whether `command` is on PATH, or in `extraDirs` (sbin is not on a non-root user's PATH). */
function onPath(command: string, extraDirs: string[] = []): boolean {
  const dirs = [...(process.env.PATH ?? '').split(delimiter), ...extraDirs].filter((d) => d !== '');
  return dirs.some((dir) => executable(join(dir, command)));
}

function answers(host: string, port: number, timeoutMs = 1_000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (up: boolean) => {
      socket.destroy();
      resolve(up);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/**
 * Runs a command with its errors shown (its output too unless `quiet`); fails the
 * preparation with `what` if it fails.
 */
function run(
  what: string,
  command: string,
  args: string[],
  options: { env?: NodeJS.ProcessEnv; quiet?: boolean } = {},
): void {
  const result = spawnSync(command, args, {
    stdio: ['ignore', options.quiet ? 'ignore' : 'inherit', 'inherit'],
    env: options.env ?? process.env,
  });
  if (result.status !== 0)
    fail([
      `${what} failed (${command} ${args.join(' ')}: ${result.error?.message ?? `exit ${result.status}`})`,
    ]);
}

function installPackages(packages: string[]): void {
  if (packages.length === 0) return;
  const root = process.getuid?.() === 0;
  if (!root || !onPath('apt-get')) {
    fail([
      `the tests need ${packages.join(', ')}, which this machine lacks.`,
      root
        ? `install them with your package manager (on Debian: ${aptInstallCommand(packages)})`
        : `install them as root: sudo ${aptInstallCommand(packages)}  (then run npm test again)`,
    ]);
  }
  say(`installing ${packages.join(' ')} with apt-get`);
  run('apt-get update', 'apt-get', ['update', '-qq'], { quiet: true });
  run('apt-get install', 'apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...packages], {
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    quiet: true,
  });
}

/**
 * Links test/<name>/node_modules to the install of its lock file in the machine's cache, making
 * that install first if there is none. An install goes into a folder of its own and is renamed
 * into place when complete, so a run that dies half-way, or two runs at once, leave no partial one.
 */
function prepareTestPackage(name: string): void {
  const dir = join(repoRoot, 'test', name);
  const lock = readFileSync(join(dir, 'package-lock.json'));
  const cached = testPackageCache(
    cacheHome(process.env, homedir()),
    name,
    createHash('sha256').update(lock).digest('hex'),
  );
  if (!existsSync(cached)) {
    say(`installing test/${name} (npm ci) into ${cached}`);
    const staging = `${cached}.${process.pid}`;
    rmSync(staging, { recursive: true, force: true });
    mkdirSync(staging, { recursive: true });
    for (const file of ['package.json', 'package-lock.json']) cpSync(join(dir, file), join(staging, file));
    run(`the test/${name} install`, 'npm', ['ci', '--prefix', staging, '--no-audit', '--no-fund']);
    try {
      renameSync(staging, cached);
    } catch {
      rmSync(staging, { recursive: true, force: true }); // another run put one there meanwhile
    }
  }
  const link = join(dir, 'node_modules');
  const target = join(cached, 'node_modules');
  if (linkTarget(link) === target) return;
  rmSync(link, { recursive: true, force: true });
  symlinkSync(target, link, 'dir');
}

function linkTarget(path: string): string | undefined {
  try {
    return readlinkSync(path);
  } catch {
    return undefined; // absent, or a folder (an install made in place)
  }
}

async function prepareBroker(): Promise<void> {
  const { host, port, local } = brokerAddress(brokerUri);
  if (await answers(host, port)) return;
  if (local) {
    say(`RabbitMQ does not answer on ${host}:${port}: starting it (rabbitmq-server -detached)`);
    // Exits non-zero when a node is already starting; the wait below is what counts.
    spawnSync('rabbitmq-server', ['-detached'], { stdio: 'inherit', env: sbinPath() });
  } else {
    say(`waiting for the test broker at ${host}:${port} (BRIDGE_TEST_BROKER_URI)`);
  }
  const deadline = Date.now() + brokerWaitMs;
  while (!(await answers(host, port)) && Date.now() < deadline) await sleep(1_000);
  if (!(await answers(host, port))) {
    fail([
      `the test broker does not answer on ${host}:${port} after ${brokerWaitMs / 1000} s.`,
      local
        ? 'start RabbitMQ (as root: rabbitmq-server -detached) with its default guest/guest login, or set BRIDGE_TEST_BROKER_URI'
        : 'check BRIDGE_TEST_BROKER_URI',
    ]);
  }
  // The port opens before the node has booted its apps; await_startup waits for those.
  if (local) spawnSync('rabbitmqctl', ['await_startup'], { stdio: 'ignore', env: sbinPath() });
}

/**
 * Keeps node_modules/better-sqlite3's compiled binary as a prebuild-install archive (named by the
 * package version, Node's ABI, platform and arch) in the machine's cache, once.
 */
function keepSqlitePrebuild(): void {
  const dir = join(repoRoot, 'node_modules', 'better-sqlite3');
  const binary = join('build', 'Release', 'better_sqlite3.node');
  if (!existsSync(join(dir, binary))) return;
  const { version } = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version: string };
  const archive = join(
    sqlitePrebuilds(cacheHome(process.env, homedir())),
    `better-sqlite3-v${version}-node-v${process.versions.modules}-${process.platform}-${process.arch}.tar.gz`,
  );
  if (existsSync(archive)) return;
  mkdirSync(join(archive, '..'), { recursive: true });
  const staging = `${archive}.${process.pid}`;
  run("keeping better-sqlite3's binary", 'tar', ['-C', dir, '-czf', staging, binary]);
  renameSync(staging, archive);
}

function sbinPath(): NodeJS.ProcessEnv {
  return { ...process.env, PATH: `${process.env.PATH ?? ''}${delimiter}/usr/sbin${delimiter}/sbin` };
}

async function main(): Promise<void> {
  const started = Date.now();
  const { host, port } = brokerAddress(brokerUri);
  installPackages(
    missingPackages({
      tmux: onPath('tmux'),
      openssl: onPath('openssl'),
      chromium: chromiumCandidates(process.env).some(executable),
      rabbitmqServer: onPath('rabbitmq-server', ['/usr/sbin', '/sbin']),
      brokerUp: await answers(host, port),
    }),
  );
  for (const name of testPackages) prepareTestPackage(name);
  await prepareBroker();
  keepSqlitePrebuild();
  say(
    `ready in ${((Date.now() - started) / 1000).toFixed(1)} s (tmux, openssl, chromium, conformance suite, agent TUIs, RabbitMQ)`,
  );
}

await main();
