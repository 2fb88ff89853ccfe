import { join } from 'node:path';

/**
 * What the test suite needs on the machine besides `npm ci`, as pure decisions over what
 * tools/prepareTests.ts finds; that script does the probing and the installing.
 */

/** Where the viz test looks for Chromium (test/e2e/vizChromium.e2e.test.ts), in order. */
export function chromiumCandidates(env: NodeJS.ProcessEnv): string[] {
  return [env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'].filter(
    (path): path is string => path !== undefined && path !== '',
  );
}

/** What the probes found: a command on PATH (or Chromium where the viz test looks). */
export interface Found {
  tmux: boolean;
  openssl: boolean;
  chromium: boolean;
  /** `rabbitmq-server` on PATH or in /usr/sbin. */
  rabbitmqServer: boolean;
  /** Whether the test broker answers on its port. */
  brokerUp: boolean;
}

/**
 * The Debian packages to install, in a stable order: the tmux tests drive real panes, the TLS
 * tests make certificates with openssl, the viz test renders in Chromium, and RabbitMQ only
 * when the broker is down and not installed (a broker elsewhere is used as it is).
 */
export function missingPackages(found: Found): string[] {
  const wanted: Array<[boolean, string]> = [
    [found.tmux, 'tmux'],
    [found.openssl, 'openssl'],
    [found.chromium, 'chromium'],
    [found.brokerUp || found.rabbitmqServer, 'rabbitmq-server'],
  ];
  return wanted.filter(([present]) => !present).map(([, name]) => name);
}

/** The apt-get command line that installs `packages` (what a non-root user is told to run). */
export function aptInstallCommand(packages: string[]): string {
  return `apt-get install -y --no-install-recommends ${packages.join(' ')}`;
}

/**
 * Where a test-only package folder (test/conformance, test/agents) is installed: in the
 * machine's cache, one folder per lock file, so that a fresh clone (every CI run) links an
 * install made before instead of downloading it again (the agent TUIs are ~750 MB).
 */
export function testPackageCache(cacheHome: string, name: string, lockHash: string): string {
  return join(cacheHome, 'bridge', 'test-packages', `${name}-${lockHash.slice(0, 16)}`);
}

/**
 * Where better-sqlite3's compiled binary is kept for the next install (prebuild-install's
 * local-prebuilds folder, named to it by npm_config_better_sqlite3_local_prebuilds).
 */
export function sqlitePrebuilds(cacheHome: string): string {
  return join(cacheHome, 'bridge', 'prebuilds');
}

/** The cache folder a machine's environment names (XDG_CACHE_HOME, else ~/.cache). */
export function cacheHome(env: NodeJS.ProcessEnv, home: string): string {
  return env.XDG_CACHE_HOME !== undefined && env.XDG_CACHE_HOME !== ''
    ? env.XDG_CACHE_HOME
    : join(home, '.cache');
}

/** The test broker's address from its URI (test/support/federation.ts's BRIDGE_TEST_BROKER_URI). */
export function brokerAddress(uri: string): { host: string; port: number; local: boolean } {
  const url = new URL(uri);
  const host = url.hostname;
  const port = url.port === '' ? (url.protocol === 'amqps:' ? 5671 : 5672) : Number(url.port);
  return { host, port, local: host === '127.0.0.1' || host === 'localhost' || host === '[::1]' };
}
