import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, lstatSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { isPrivateKeyFile, loadKeys } from '../../src/security/keys.js';
import { uniqueHostId } from '../support/broker.js';
import { GatewayProcess } from '../support/GatewayProcess.js';

/**
 * Issue 29 item 8: a home that already existed kept its mode. Following the quorum
 * steps of docs/operating.md (`mkdir -p DIR`, umask 022) the home stayed 0755 and `events.db*` 0644, and another
 * local user read an undelivered body and the token hashes. The home and everything in it must
 * be private whatever existed before: 0700 directories, 0600 files (group and others cleared),
 * or the gateway refuses to start with HOME_INSECURE and the fix.
 */

/** The gateway started as an operator's shell would start it: umask 022. */
const underUmask022 = ['sh', '-c', 'umask 022 && exec "$@"', 'sh'];
const isRoot = process.getuid?.() === 0;
const secret = `private-home-${Math.random().toString(36).slice(2)}`;

/** Every path under `home` (itself included) whose mode lets group or others in: `path 0644`. */
function openToOthers(home: string): string[] {
  const found: string[] = [];
  const visit = (path: string) => {
    const stat = lstatSync(path);
    if (stat.isSymbolicLink()) return;
    if ((stat.mode & 0o077) !== 0)
      found.push(`${relative(home, path) || '.'} ${(stat.mode & 0o777).toString(8).padStart(4, '0')}`);
    if (stat.isDirectory()) for (const name of readdirSync(path)) visit(join(path, name));
  };
  visit(home);
  return found;
}

/** Opens everything under `home` to others, as `mkdir -p` and an earlier gateway under umask 022 left it. */
function openUp(home: string, except: (path: string) => boolean = () => false): void {
  const visit = (path: string) => {
    const stat = lstatSync(path);
    if (stat.isSymbolicLink() || except(path)) return;
    chmodSync(path, stat.isDirectory() ? 0o755 : 0o644);
    if (stat.isDirectory()) for (const name of readdirSync(path)) visit(join(path, name));
  };
  visit(home);
}

const modeOf = (path: string) => (statSync(path).mode & 0o777).toString(8).padStart(4, '0');

/** What another local account gets when it reads `path` (root can become `nobody`). */
function readAsNobody(path: string): { status: number | null; stderr: string } {
  const result = spawnSync('runuser', ['-u', 'nobody', '--', 'cat', path], { encoding: 'utf8' });
  return { status: result.status, stderr: result.stderr };
}

describe('the home is private whatever existed before', () => {
  let gateway: GatewayProcess | undefined;

  afterEach(async () => {
    await gateway?.dispose();
    gateway = undefined;
  });

  /** A gateway whose home was made with `mkdir -p` under umask 022 (0755), holding one body for `keep`. */
  async function gatewayHoldingASecret(): Promise<GatewayProcess> {
    const started = new GatewayProcess({
      hostId: uniqueHostId('privateHome'),
      wrap: underUmask022,
      config: {},
    });
    chmodSync(started.home, 0o755);
    chmodSync(join(started.home, 'config.json'), 0o644);
    const keys = await started.cli(['keys', 'init']);
    expect(keys.code, keys.stderr || keys.stdout).toBe(0);
    await started.start();
    const registered = await started.cli(['register', '--kind', 'main', '--name', 'keep', '--json']);
    expect(registered.code, registered.stderr || registered.stdout).toBe(0);
    const { token } = JSON.parse(registered.stdout) as { token: string };
    const sent = await started.cli(['send', 'keep', `undelivered ${secret}`], { BRIDGE_TOKEN: token });
    expect(sent.code, sent.stderr || sent.stdout).toBe(0);
    return started;
  }

  it('a home made with mkdir -p under umask 022: the gateway makes it 0700 and creates its files 0600', async () => {
    gateway = await gatewayHoldingASecret();
    const { home } = gateway;
    expect(openToOthers(home)).toEqual([]);
    expect(modeOf(home)).toBe('0700');
    for (const name of ['events.db', 'events.db-wal', 'events.db-shm', 'admin.sock', 'config.json'])
      expect(`${name} ${modeOf(join(home, name))}`).toBe(`${name} 0600`);
    if (isRoot) {
      // What the other user did: read the log. Not even the file's bytes now.
      const read = readAsNobody(join(home, 'events.db'));
      expect(read.status).not.toBe(0);
      expect(read.stderr).toMatch(/Permission denied/);
    }
  });

  it('files an earlier gateway left 0644 (and 0755 directories) are made private at start, and it says so', async () => {
    gateway = await gatewayHoldingASecret();
    const { home } = gateway;
    await gateway.kill9(); // leaves events.db-wal and -shm, as a crash does
    writeFileSync(join(home, 'events.db.bak'), 'an operator copy');
    openUp(home, (path) => isPrivateKeyFile(home, path));
    expect(openToOthers(home)).toContain('events.db 0644');
    expect(openToOthers(home)).toContain('events.db-wal 0644');
    expect(openToOthers(home)).toContain('. 0755');

    await gateway.start();
    expect(openToOthers(home)).toEqual([]);
    expect(gateway.log).toMatch(/made the home private/);
    expect(gateway.log).toContain('events.db-wal');
    if (isRoot) expect(readAsNobody(join(home, 'events.db')).stderr).toMatch(/Permission denied/);
    // The log still holds what it held: the gateway came back on it.
    const roster = await gateway.cli(['roster', '--json']);
    expect(roster.stdout).toContain('"keep"');
  });

  it.each(['signing', 'sealing'])(
    'a %s key others could read stops the start with KEY_INSECURE (it must be replaced, not only hidden)',
    async (which) => {
      gateway = await gatewayHoldingASecret();
      await gateway.stop();
      const keys = loadKeys(gateway.home);
      const key = which === 'signing' ? keys.privateKeyPath : keys.sealing!.current.path;
      chmodSync(key, 0o644);
      await expect(gateway.start()).rejects.toThrow(/gateway exited with 2/);
      expect(gateway.log).toMatch(/agentbridge: KEY_INSECURE: /);
      expect(gateway.log).toContain(`chmod 600 ${key}`);
      expect(gateway.log).toContain('agentbridge keys init --force');
    },
  );

  it.skipIf(!isRoot)(
    'a file in the home that belongs to another user stops the start with HOME_INSECURE and the fix',
    async () => {
      gateway = await gatewayHoldingASecret();
      await gateway.stop();
      const planted = join(gateway.home, 'events.db.bak');
      writeFileSync(planted, 'a copy another account owns');
      chownSync(planted, 65534, 65534); // nobody: it can read and chmod it, whatever the gateway does
      await expect(gateway.start()).rejects.toThrow(/gateway exited with 2/);
      expect(gateway.log).toMatch(/agentbridge: HOME_INSECURE: /);
      expect(gateway.log).toContain(planted);
      expect(gateway.log).toContain(`chown -R root ${gateway.home}`);
    },
  );
});
