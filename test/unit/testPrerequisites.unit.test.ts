import { describe, expect, it } from 'vitest';
import {
  aptInstallCommand,
  brokerAddress,
  cacheHome,
  chromiumCandidates,
  missingPackages,
  testPackageCache,
} from '../../tools/testPrerequisites.js';

/** The decisions of tools/prepareTests.ts, which `npm test` runs first on a machine. */
describe('what npm test prepares on a machine', () => {
  const all = { tmux: true, openssl: true, chromium: true, rabbitmqServer: true, brokerUp: true };

  it('a fresh machine without chromium gets chromium installed, and nothing when all is there', () => {
    expect(missingPackages({ ...all, chromium: false })).toEqual(['chromium']);
    expect(missingPackages(all)).toEqual([]);
    expect(
      missingPackages({
        tmux: false,
        openssl: false,
        chromium: false,
        rabbitmqServer: false,
        brokerUp: false,
      }),
    ).toEqual(['tmux', 'openssl', 'chromium', 'rabbitmq-server']);
    expect(aptInstallCommand(['tmux', 'chromium'])).toBe(
      'apt-get install -y --no-install-recommends tmux chromium',
    );
  });

  it('RabbitMQ is installed only when the broker is down and not installed', () => {
    expect(missingPackages({ ...all, rabbitmqServer: false, brokerUp: true })).toEqual([]);
    expect(missingPackages({ ...all, rabbitmqServer: true, brokerUp: false })).toEqual([]);
    expect(missingPackages({ ...all, rabbitmqServer: false, brokerUp: false })).toEqual(['rabbitmq-server']);
  });

  it('a test-only package is cached once per lock file, under XDG_CACHE_HOME or ~/.cache', () => {
    const hash = 'ab'.repeat(32);
    expect(testPackageCache(cacheHome({}, '/home/me'), 'agents', hash)).toBe(
      '/home/me/.cache/bridge/test-packages/agents-abababababababab',
    );
    expect(
      testPackageCache(cacheHome({ XDG_CACHE_HOME: '/var/cache/me' }, '/home/me'), 'conformance', hash),
    ).toBe('/var/cache/me/bridge/test-packages/conformance-abababababababab');
    expect(cacheHome({ XDG_CACHE_HOME: '' }, '/home/me')).toBe('/home/me/.cache');
  });

  it('the test broker is found where the tests look for it, started only when it is local', () => {
    expect(brokerAddress('amqp://guest:guest@127.0.0.1:5672')).toEqual({
      host: '127.0.0.1',
      port: 5672,
      local: true,
    });
    expect(brokerAddress('amqp://u:p@localhost')).toEqual({ host: 'localhost', port: 5672, local: true });
    expect(brokerAddress('amqps://u:p@mq.example.com')).toEqual({
      host: 'mq.example.com',
      port: 5671,
      local: false,
    });
  });

  it('Chromium is looked for at CHROMIUM_PATH first, then where Debian puts it', () => {
    expect(chromiumCandidates({ CHROMIUM_PATH: '/opt/chrome/chrome' })).toEqual([
      '/opt/chrome/chrome',
      '/usr/bin/chromium',
      '/usr/bin/chromium-browser',
    ]);
    expect(chromiumCandidates({ CHROMIUM_PATH: '' })).toEqual([
      '/usr/bin/chromium',
      '/usr/bin/chromium-browser',
    ]);
  });
});
