import { describe, expect, it } from 'vitest';
import { parseAuthority } from '../../src/config/authority.js';
import { configSchema } from '../../src/config/schema.js';
import { checkHostAndOrigin, createHostAllowList } from '../../src/interfaces/checkHostAndOrigin.js';

const port = 7433;
const loopbackOnly = createHostAllowList({ bindHost: '127.0.0.1', port, allowedHosts: [] });

function refusedHeader(headers: { host?: string; origin?: string }, list = loopbackOnly): string | undefined {
  const verdict = checkHostAndOrigin(list, headers);
  return verdict.ok ? undefined : verdict.header;
}

describe('DNS rebinding: Host must be a name the gateway answers to, at its port', () => {
  it('passes the loopback names at the gateway port', () => {
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`, `LOCALHOST:${port}`]) {
      expect(checkHostAndOrigin(loopbackOnly, { host })).toEqual({ ok: true });
    }
  });

  it('refuses a rebound name with a reason that says what to do', () => {
    const verdict = checkHostAndOrigin(loopbackOnly, { host: `evil.example:${port}` });
    expect(verdict).toMatchObject({ ok: false, header: 'host', value: `evil.example:${port}` });
    expect(verdict.ok || verdict.reason).toMatch(/not a name this gateway answers to.*mcp\.allowedHosts/);
    expect(refusedHeader({ host: 'evil.example' })).toBe('host');
  });

  it('refuses loopback at another port, a missing Host and Host shapes a URL parser would bend', () => {
    expect(refusedHeader({ host: `127.0.0.1:${port + 1}` })).toBe('host');
    expect(refusedHeader({ host: 'localhost' })).toBe('host'); // port 80 or 443 is not 7433
    expect(refusedHeader({})).toBe('host');
    expect(refusedHeader({ host: '' })).toBe('host');
    expect(refusedHeader({ host: `evil.example@127.0.0.1:${port}` })).toBe('host');
    expect(refusedHeader({ host: `127.0.0.1:${port}/x` })).toBe('host');
    expect(refusedHeader({ host: `127.0.0.1:${port}:1` })).toBe('host');
    expect(refusedHeader({ host: `localhost.:${port}` })).toBe('host');
  });

  it('passes the bind address, but a wildcard bind names no host', () => {
    const lan = createHostAllowList({ bindHost: '10.200.0.2', port, allowedHosts: [] });
    expect(refusedHeader({ host: `10.200.0.2:${port}` }, lan)).toBeUndefined();
    const v6 = createHostAllowList({ bindHost: 'fd00::2', port, allowedHosts: [] });
    expect(refusedHeader({ host: `[fd00::2]:${port}` }, v6)).toBeUndefined();
    for (const bindHost of ['0.0.0.0', '::']) {
      const any = createHostAllowList({ bindHost, port, allowedHosts: [] });
      expect(refusedHeader({ host: `0.0.0.0:${port}` }, any)).toBe('host');
      expect(refusedHeader({ host: `[::]:${port}` }, any)).toBe('host');
      expect(refusedHeader({ host: `localhost:${port}` }, any)).toBeUndefined();
    }
  });

  it('passes configured names: without a port at the gateway port, with one at that port', () => {
    const list = createHostAllowList({
      bindHost: '0.0.0.0',
      port,
      allowedHosts: [parseAuthority('bridge.lan')!, parseAuthority('proxy.lan:443')!],
    });
    expect(refusedHeader({ host: `bridge.lan:${port}` }, list)).toBeUndefined();
    expect(refusedHeader({ host: 'bridge.lan:8080' }, list)).toBe('host');
    expect(refusedHeader({ host: 'proxy.lan:443' }, list)).toBeUndefined();
    expect(refusedHeader({ host: 'proxy.lan' }, list)).toBeUndefined(); // https default port
    expect(refusedHeader({ host: `proxy.lan:${port}` }, list)).toBe('host');
  });
});

describe('DNS rebinding: Origin, when sent, must be a page on an allowed name', () => {
  const host = `127.0.0.1:${port}`;

  it('passes no Origin (non-browser clients) and same-origin pages', () => {
    expect(refusedHeader({ host })).toBeUndefined();
    expect(refusedHeader({ host, origin: `http://127.0.0.1:${port}` })).toBeUndefined();
    expect(refusedHeader({ host, origin: `http://localhost:${port}` })).toBeUndefined();
    expect(refusedHeader({ host, origin: `http://[::1]:${port}` })).toBeUndefined();
  });

  it('refuses a foreign page even when Host is loopback', () => {
    const verdict = checkHostAndOrigin(loopbackOnly, { host, origin: 'http://evil.example' });
    expect(verdict).toMatchObject({ ok: false, header: 'origin', value: 'http://evil.example' });
    expect(verdict.ok || verdict.reason).toMatch(/Origin "http:\/\/evil\.example" is not a page/);
    expect(refusedHeader({ host, origin: `http://evil.example:${port}` })).toBe('origin');
  });

  it('refuses opaque and odd origins: null, file:, another loopback port, a path', () => {
    expect(refusedHeader({ host, origin: 'null' })).toBe('origin');
    expect(refusedHeader({ host, origin: 'file://' })).toBe('origin');
    expect(refusedHeader({ host, origin: `http://localhost:${port + 1}` })).toBe('origin');
    expect(refusedHeader({ host, origin: 'http://localhost' })).toBe('origin');
    expect(refusedHeader({ host, origin: `http://localhost:${port}/page` })).toBe('origin');
    expect(refusedHeader({ host, origin: `http://u@localhost:${port}` })).toBe('origin');
  });

  it('passes an https page on a configured name at its default port', () => {
    const list = createHostAllowList({
      bindHost: '127.0.0.1',
      port,
      allowedHosts: [parseAuthority('proxy.lan:443')!],
    });
    expect(refusedHeader({ host: 'proxy.lan', origin: 'https://proxy.lan' }, list)).toBeUndefined();
    expect(refusedHeader({ host: 'proxy.lan', origin: 'http://proxy.lan' }, list)).toBe('origin');
  });
});

describe('DNS rebinding: mcp.allowedHosts is parsed at the edge', () => {
  it('reads host and host:port entries', () => {
    const config = configSchema.parse({
      mcp: { allowedHosts: ['Bridge.LAN', 'proxy.lan:8443', '[fd00::2]'] },
    });
    expect(config.mcp.allowedHosts).toEqual([
      { hostname: 'bridge.lan', port: undefined },
      { hostname: 'proxy.lan', port: 8443 },
      { hostname: '[fd00::2]', port: undefined },
    ]);
  });

  it('refuses a URL, a wildcard or a bad port, naming the entry and the form', () => {
    for (const entry of ['http://bridge.lan', '*', 'bridge.lan:0', 'bridge.lan:99999', 'a b', '']) {
      const result = configSchema.safeParse({ mcp: { allowedHosts: [entry] } });
      expect(result.success, entry).toBe(false);
      expect(result.error?.issues[0]?.path).toEqual(['mcp', 'allowedHosts', 0]);
      expect(result.error?.issues[0]?.message).toContain('is not host or host:port');
    }
  });
});
