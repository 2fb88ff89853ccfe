import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/loadConfig.js';
import { hostIdSchema } from '../../src/config/schema.js';
import { BridgeError, ErrorCode } from '../../src/errors.js';

let root: string;
let counter = 0;

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'bridge-config-unit-'));
});

afterAll(() => {
  if (root) rmSync(root, { recursive: true, force: true });
});

/** A fresh, empty BRIDGE_HOME. */
function newHome(): string {
  const home = join(root, `home-${++counter}`);
  mkdirSync(home);
  return home;
}

/** Writes `content` (an object as JSON, or raw text) to a file of its own. */
function configFile(content: unknown, name = 'config.json', dir = newHome()): string {
  const file = join(dir, name);
  writeFileSync(file, typeof content === 'string' ? content : JSON.stringify(content));
  return file;
}

/** Runs `fn`, expecting a BAD_CONFIG BridgeError whose message matches every pattern. */
function expectBadConfig(fn: () => unknown, ...patterns: Array<string | RegExp>): BridgeError {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(BridgeError);
  const error = caught as BridgeError;
  expect(error.code).toBe(ErrorCode.badConfig);
  expect(error.code).toBe('BAD_CONFIG');
  for (const pattern of patterns) expect(error.message).toMatch(pattern);
  return error;
}

describe('loadConfig: defaults', () => {
  it('with no file at all, every key has its default', () => {
    const home = newHome();
    const { config, file } = loadConfig({ env: { BRIDGE_HOME: home } });
    expect(file).toBeUndefined();
    expect(config.home).toBe(resolve(home));
    expect(hostIdSchema.safeParse(config.hostId).success).toBe(true);
    expect(config.broker.uris).toEqual([]);
    expect(config.mcp).toEqual({
      host: '127.0.0.1',
      port: 7433,
      allowedHosts: [],
      maxSessionsPerEntity: 16,
      maxConnections: 768,
      responses: 'json',
      sessionIdleMs: 30 * 60_000,
    });
    expect(config.limits).toEqual({
      maxTextBytes: 65_536,
      inboxMaxBytes: 16 * 1024 * 1024,
      maxWaitMs: 600_000,
      maxDrain: 100,
      maxParkedPerEntity: 64,
      maxParked: 512,
      senderInboxShare: 0.25,
      maxPresenceEntries: 10_000,
    });
    expect(config.delivery).toEqual({
      ttlMs: 86_400_000,
      maxAttempts: 5,
      retryBaseMs: 500,
      captureLines: 500,
      paneRecheckMs: 1_000,
      showTimeoutMs: 2_000,
      submitTimeoutMs: 1_500,
      proofTimeoutMs: 5_000,
      pollMs: 25,
      enterPauseMs: 0,
      enterAttempts: 3,
      programSettleMs: 1_500,
      receiptWaitMs: 120_000,
      busy: 'steer',
    });
    expect(config.store).toEqual({ synchronous: 'FULL' });
    expect(config.log).toEqual({ level: 'info', repeatWindowMs: 600_000 });
    expect(config.herdr.socketPath).toBeUndefined();
  });

  it('an empty object in the file also gives the defaults', () => {
    const home = newHome();
    const file = configFile({}, 'config.json', home);
    const { config, file: read } = loadConfig({ env: { BRIDGE_HOME: home } });
    expect(read).toBe(file);
    expect(config.mcp.port).toBe(7433);
    expect(config.delivery.maxAttempts).toBe(5);
  });
});

describe('loadConfig: where the file comes from', () => {
  it('reads $BRIDGE_HOME/config.json when it exists', () => {
    const home = newHome();
    const file = configFile({ hostId: 'from-home', mcp: { port: 9001 } }, 'config.json', home);
    const loaded = loadConfig({ env: { BRIDGE_HOME: home } });
    expect(loaded.file).toBe(file);
    expect(loaded.config.hostId).toBe('from-home');
    expect(loaded.config.mcp.port).toBe(9001);
  });

  it('BRIDGE_CONFIG names the file', () => {
    const file = configFile({ log: { level: 'debug' } }, 'elsewhere.json');
    const loaded = loadConfig({ env: { BRIDGE_HOME: newHome(), BRIDGE_CONFIG: file } });
    expect(loaded.file).toBe(file);
    expect(loaded.config.log.level).toBe('debug');
  });

  it('an explicit file wins over BRIDGE_CONFIG', () => {
    const explicit = configFile({ hostId: 'explicit' });
    const fromEnv = configFile({ hostId: 'from-env' });
    const loaded = loadConfig({ file: explicit, env: { BRIDGE_HOME: newHome(), BRIDGE_CONFIG: fromEnv } });
    expect(loaded.file).toBe(explicit);
    expect(loaded.config.hostId).toBe('explicit');
  });
});

describe('loadConfig: environment overrides', () => {
  const fileValues = {
    hostId: 'from-file',
    home: '/from/file',
    broker: { uri: 'amqp://file-broker:5672' },
    mcp: { host: '127.0.0.2', port: 9000 },
  };

  it('BRIDGE_HOME, BRIDGE_HOST_ID, BRIDGE_BROKER_URI and BRIDGE_MCP_PORT override the file', () => {
    const file = configFile(fileValues);
    const home = newHome();
    const { config } = loadConfig({
      file,
      env: {
        BRIDGE_HOME: home,
        BRIDGE_HOST_ID: 'env-host',
        BRIDGE_BROKER_URI: 'amqps://user:pw@env-broker:5671/vhost',
        BRIDGE_MCP_PORT: '7999',
      },
    });
    expect(config.home).toBe(resolve(home));
    expect(config.hostId).toBe('env-host');
    expect(config.broker.uris).toEqual(['amqps://user:pw@env-broker:5671/vhost']);
    expect(config.mcp.port).toBe(7999);
    // An override replaces one key, not its whole section.
    expect(config.mcp.host).toBe('127.0.0.2');
  });

  it('broker nodes: broker.uris, or a comma-separated broker.uri / BRIDGE_BROKER_URI, which replaces the file', () => {
    const nodes = ['amqp://n1:5701', 'amqp://n2:5702', 'amqp://n3:5703'];
    const fromList = loadConfig({ file: configFile({ broker: { uris: nodes } }), env: {} });
    expect(fromList.config.broker.uris).toEqual(nodes);
    const fromShorthand = loadConfig({ file: configFile({ broker: { uri: nodes.join(' , ') } }), env: {} });
    expect(fromShorthand.config.broker.uris).toEqual(nodes);
    const fromEnv = loadConfig({
      file: configFile({ broker: { uris: ['amqp://file:5672'] } }),
      env: { BRIDGE_BROKER_URI: `${nodes[0]},${nodes[1]}` },
    });
    expect(fromEnv.config.broker.uris).toEqual(nodes.slice(0, 2));
  });

  it('overrides apply without a file, too', () => {
    const { config, file } = loadConfig({
      env: { BRIDGE_HOME: newHome(), BRIDGE_HOST_ID: 'solo', BRIDGE_MCP_PORT: '0' },
    });
    expect(file).toBeUndefined();
    expect(config.hostId).toBe('solo');
    expect(config.mcp.port).toBe(0);
  });

  it('an empty variable is ignored and the file value stays', () => {
    const { config } = loadConfig({
      file: configFile(fileValues),
      env: { BRIDGE_HOME: '', BRIDGE_HOST_ID: '', BRIDGE_BROKER_URI: '', BRIDGE_MCP_PORT: '' },
    });
    expect(config.hostId).toBe('from-file');
    expect(config.home).toBe(resolve('/from/file'));
    expect(config.broker.uris).toEqual(['amqp://file-broker:5672']);
    expect(config.mcp.port).toBe(9000);
  });
});

describe('loadConfig: errors are BAD_CONFIG and say what is wrong', () => {
  it('an unknown top-level key is named', () => {
    const file = configFile({ brokr: { uri: 'amqp://x' } });
    expectBadConfig(() => loadConfig({ file, env: {} }), /unknown key brokr/, file);
  });

  it('an unknown nested key is named with its section', () => {
    const file = configFile({ mcp: { prot: 7433 } });
    expectBadConfig(() => loadConfig({ file, env: {} }), /unknown key prot in mcp/);
  });

  it('a value of the wrong type names its key', () => {
    const file = configFile({ mcp: { port: '7433' } });
    expectBadConfig(() => loadConfig({ file, env: {} }), /mcp\.port: /, file);
  });

  it('an out-of-range value names its key', () => {
    const file = configFile({ delivery: { maxAttempts: 0 } });
    expectBadConfig(() => loadConfig({ file, env: {} }), /delivery\.maxAttempts: /);
  });

  it('a section of the wrong type names the section', () => {
    const file = configFile({ limits: 5 });
    expectBadConfig(() => loadConfig({ file, env: {} }), /limits: /);
  });

  it('a file that is not JSON', () => {
    const file = configFile('{ "hostId": "a", }');
    expectBadConfig(() => loadConfig({ file, env: {} }), /is not valid JSON/, file);
  });

  it('a JSON file that is not an object', () => {
    const file = configFile('["hostId"]');
    expectBadConfig(() => loadConfig({ file, env: {} }), /must hold a JSON object/, file);
  });

  it('a file that does not exist', () => {
    const file = join(root, 'no-such-dir', 'config.json');
    expectBadConfig(() => loadConfig({ file, env: {} }), /cannot read config file/, file);
  });

  it('BRIDGE_CONFIG naming a missing file', () => {
    const file = join(root, 'missing.json');
    expectBadConfig(() => loadConfig({ env: { BRIDGE_CONFIG: file } }), /cannot read config file/, file);
  });

  it.each(['abc', '12.5', '80O'])('BRIDGE_MCP_PORT=%s is not a whole number', (value) => {
    expectBadConfig(
      () => loadConfig({ env: { BRIDGE_HOME: newHome(), BRIDGE_MCP_PORT: value } }),
      `BRIDGE_MCP_PORT=${value} is not a whole number`,
    );
  });

  it('BRIDGE_MCP_PORT out of range names mcp.port', () => {
    expectBadConfig(
      () => loadConfig({ env: { BRIDGE_HOME: newHome(), BRIDGE_MCP_PORT: '70000' } }),
      /mcp\.port: /,
      /BRIDGE_\* environment/,
    );
  });

  // Regression (was a bug in src/config/loadConfig.ts, the number override: `Number(value)`): Number('  ') is 0,
  // so a blank-but-not-empty BRIDGE_MCP_PORT silently binds the MCP server to a random port
  // instead of being rejected (or ignored like an empty value).
  it('BRIDGE_MCP_PORT of only spaces does not become port 0', () => {
    let port: number | undefined;
    try {
      port = loadConfig({ env: { BRIDGE_HOME: newHome(), BRIDGE_MCP_PORT: '  ' } }).config.mcp.port;
    } catch (err) {
      expect(err).toBeInstanceOf(BridgeError);
      return;
    }
    expect(port).toBe(7433);
  });

  it('a bad BRIDGE_HOST_ID names hostId', () => {
    expectBadConfig(
      () => loadConfig({ env: { BRIDGE_HOME: newHome(), BRIDGE_HOST_ID: 'bad host!' } }),
      /hostId: /,
    );
  });

  it('a bad BRIDGE_BROKER_URI names broker.uri', () => {
    expectBadConfig(
      () => loadConfig({ env: { BRIDGE_HOME: newHome(), BRIDGE_BROKER_URI: 'http://broker:5672' } }),
      /broker\.uri: /,
    );
  });

  it('a bad node in a BRIDGE_BROKER_URI list is named, without its password', () => {
    const error = expectBadConfig(
      () =>
        loadConfig({
          env: { BRIDGE_HOME: newHome(), BRIDGE_BROKER_URI: 'amqp://a:5672, http://u:secret@b:5672' },
        }),
      /broker\.uri: "http:\/\/u:\*\*\*@b:5672" is no broker URI/,
    );
    expect(error.message).not.toContain('secret');
  });

  it('broker.uri and broker.uris together: keep one', () => {
    const file = configFile({ broker: { uri: 'amqp://a:5672', uris: ['amqp://b:5672'] } });
    expectBadConfig(
      () => loadConfig({ file, env: {} }),
      /broker\.uris: and broker\.uri are both set; keep one/,
    );
  });

  it('an empty broker.uris is refused (single-host leaves it out)', () => {
    const file = configFile({ broker: { uris: [] } });
    expectBadConfig(() => loadConfig({ file, env: {} }), /broker\.uris: lists at least one broker node/);
  });

  it('broker.tls with a plain amqp:// node in broker.uris', () => {
    const file = configFile({ broker: { uris: ['amqps://a:5671', 'amqp://b:5672'], tls: {} } });
    expectBadConfig(
      () => loadConfig({ file, env: {} }),
      /broker\.tls: is set but broker\.uris has a plain amqp:\/\/ URI/,
    );
  });

  it('a bad value from the file blamed on the file even when overrides are set', () => {
    const file = configFile({ log: { level: 'loud' } });
    expectBadConfig(
      () => loadConfig({ file, env: { BRIDGE_HOST_ID: 'ok-host' } }),
      /log\.level: /,
      `config file ${file}`,
    );
  });
});
