import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BridgeError, ErrorCode } from '../../src/errors.js';
import { envFileText } from '../../src/spawn/envFile.js';
import { createHerdrLauncher } from '../../src/spawn/herdrLauncher.js';
import type { LaunchRequest } from '../../src/spawn/launcher.js';
import { shellQuote } from '../../src/text/shellQuote.js';
import type { PaneTarget } from '../../src/wire/paneTarget.js';
import { type FakeHerdr, startFakeHerdr } from '../support/fakeHerdr.js';

const run = promisify(execFile);

const WORKSPACE = 'w64e95948145ed1';
const TOKEN = 'tok-s3cr3t-NOT-ON-SCREEN';

function request(name: string, extra: Partial<LaunchRequest> = {}): LaunchRequest {
  return {
    name,
    command: 'claude --print "hi"',
    cwd: '/srv/work',
    env: { BRIDGE_TOKEN: TOKEN, BRIDGE_NAME: name, TRICKY: `it's "quoted" $HOME \`x\`\nline two` },
    ...extra,
  };
}

function herdrPane(pane: PaneTarget | undefined): string {
  expect(pane?.type).toBe('herdr');
  return pane?.type === 'herdr' ? pane.paneId : '';
}

async function rejection(promise: Promise<unknown>): Promise<BridgeError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(BridgeError);
  return err as BridgeError;
}

/** The env file a typed launch line sources: the first single-quoted word after `. `. */
function sourcedFile(line: string): string {
  const match = /^ \. '([^']+)' && /.exec(line);
  expect(match, `launch line ${JSON.stringify(line)}`).not.toBeNull();
  return match?.[1] ?? '';
}

describe('herdr launcher against a fake herdr', () => {
  let herdr: FakeHerdr;
  const envDirs: string[] = [];

  beforeEach(async () => {
    herdr = await startFakeHerdr({ activeWorkspace: WORKSPACE });
    // The user's own tab: launched tabs are never a workspace's last.
    herdr.addPane(`${WORKSPACE}-1`);
  });

  afterEach(async () => {
    await herdr.close();
    // The fake runs nothing, so the env files stay: remove them here.
    await Promise.all(envDirs.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
  });

  function launcher(extra: { workspace?: string } = {}) {
    return createHerdrLauncher({ socketPath: herdr.socketPath, ...extra });
  }

  /** The one line typed into `paneId`, checked to be a single submission; its env dir is cleaned up later. */
  function launchLine(paneId: string): string {
    const inputs = herdr.inputs(paneId);
    expect(inputs).toHaveLength(1);
    expect(inputs[0]?.method).toBe('pane.send_input');
    expect(inputs[0]?.keys).toEqual(['Enter']);
    const line = inputs[0]?.text ?? '';
    envDirs.push(dirname(sourcedFile(line)));
    return line;
  }

  it('opens a tab named after the agent and types one line that sources a private env file', async () => {
    const herdrLauncher = launcher();
    const pane = await herdrLauncher.launch(request('alice'));

    const paneId = herdrPane(pane);
    expect(pane).toEqual({ type: 'herdr', paneId, socketPath: herdr.socketPath });
    const tab = herdr.tabs().find((t) => t.panes.includes(paneId));
    expect(tab).toMatchObject({ workspaceId: WORKSPACE, label: 'alice', cwd: '/srv/work' });
    expect(herdr.methods()).toEqual(['tab.create', 'tab.rename', 'pane.list', 'pane.send_input']);

    const line = launchLine(paneId);
    expect(line).not.toContain(TOKEN);
    expect(line).not.toContain('\n');
    expect(line.startsWith(' ')).toBe(true);
    const file = sourcedFile(line);
    expect(line).toBe(
      ` . '${file}' && rm -f '${file}' && rmdir '${dirname(file)}' && exec sh -c 'claude --print "hi"'`,
    );
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    expect((await stat(dirname(file))).mode & 0o777).toBe(0o700);
    const text = await readFile(file, 'utf8');
    expect(text).toContain(`export BRIDGE_TOKEN='${TOKEN}'\n`);
    expect(text).toContain(`export BRIDGE_NAME='alice'\n`);
  });

  it('writes an env file a POSIX shell reads back exactly', async () => {
    const pane = await launcher().launch(request('bob'));
    const file = sourcedFile(launchLine(herdrPane(pane)));

    const { stdout } = await run('sh', ['-c', `. "$1" && printf '%s' "$TRICKY"`, 'sh', file]);
    expect(stdout).toBe(request('bob').env.TRICKY);
  });

  it('types a line a shell runs: env in, file and directory gone, then the command', async () => {
    const command = `printf '%s|%s' "$BRIDGE_TOKEN" "$BRIDGE_NAME"`;
    const pane = await launcher().launch(request('bea', { command }));
    const line = launchLine(herdrPane(pane));
    const file = sourcedFile(line);

    const { stdout } = await run('sh', ['-c', line], { env: { PATH: process.env.PATH } });
    expect(stdout).toBe(`${TOKEN}|bea`);
    await expect(stat(file)).rejects.toThrow();
    await expect(stat(dirname(file))).rejects.toThrow();
  });

  it('finds the tab by name, closes it, and then finds nothing', async () => {
    const herdrLauncher = launcher();
    const pane = await herdrLauncher.launch(request('carol'));
    launchLine(herdrPane(pane));

    expect(await herdrLauncher.find('carol')).toEqual(pane);
    expect(await herdrLauncher.find('dave')).toBeUndefined();

    await herdrLauncher.close(pane);
    expect(herdr.tabs().map((t) => t.label)).toEqual(['1']);
    expect(herdr.methods()).toContain('tab.close');
    expect(await herdrLauncher.find('carol')).toBeUndefined();
    // Closing again: the pane is gone, which is fine.
    await herdrLauncher.close(pane);
  });

  it('closes the pane when its tab is the last in its workspace, which herdr will not close', async () => {
    const herdrLauncher = launcher({ workspace: 'wlone0000001' });
    herdr.addPane('wlone0000001-9'); // makes the workspace exist, with a tab we then close
    await herdrLauncher.close({ type: 'herdr', paneId: 'wlone0000001-9' });
    expect(herdr.tabs().filter((t) => t.workspaceId === 'wlone0000001')).toEqual([]);
    expect(herdr.methods().slice(-3)).toEqual(['pane.list', 'tab.close', 'pane.close']);
  });

  it('puts tabs in the configured workspace and looks only there', async () => {
    herdr.addPane('wother000001-1');
    const other = launcher({ workspace: 'wother000001' });
    const pane = await other.launch(request('erin'));
    launchLine(herdrPane(pane));

    expect(herdr.tabs().find((t) => t.label === 'erin')?.workspaceId).toBe('wother000001');
    expect(await other.find('erin')).toEqual(pane);
    expect(await launcher({ workspace: WORKSPACE }).find('erin')).toBeUndefined();
  });

  it('uses the root pane a newer herdr returns from tab.create', async () => {
    await herdr.close();
    herdr = await startFakeHerdr({ activeWorkspace: WORKSPACE, tabCreateResult: 'tab_created' });
    herdr.addPane(`${WORKSPACE}-1`);

    const pane = await launcher().launch(request('frank'));
    launchLine(herdrPane(pane));
    expect(herdr.methods()).toEqual(['tab.create', 'tab.rename', 'pane.send_input']);
  });

  it('gives concurrent launches distinct tabs, one line each', async () => {
    const herdrLauncher = launcher();
    const names = ['g1', 'g2', 'g3', 'g4'];
    const panes = await Promise.all(names.map((name) => herdrLauncher.launch(request(name))));

    const ids = panes.map(herdrPane);
    expect(new Set(ids).size).toBe(names.length);
    for (const [i, name] of names.entries()) {
      const paneId = ids[i] ?? '';
      expect(herdr.tabs().find((t) => t.panes.includes(paneId))?.label).toBe(name);
      const file = sourcedFile(launchLine(paneId));
      expect(await readFile(file, 'utf8')).toContain(`export BRIDGE_NAME='${name}'\n`);
      expect(await herdrLauncher.find(name)).toEqual(panes[i]);
    }
  });

  it('fails clearly when herdr is not running', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'no-herdr-'));
    try {
      const missing = join(dir, 'herdr.sock');
      const herdrLauncher = createHerdrLauncher({ socketPath: missing });

      const err = await rejection(herdrLauncher.launch(request('gina')));
      expect(err.code).toBe(ErrorCode.launchFailed);
      expect(err.message).toContain('could not start gina in a new herdr tab');
      expect(err.message).toContain(`herdr socket ${missing} not found: is herdr running?`);
      expect(await herdrLauncher.find('gina')).toBeUndefined();
      await herdrLauncher.close({ type: 'herdr', paneId: `${WORKSPACE}-2` });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('says what herdr answered, and a later launch still works', async () => {
    const herdrLauncher = launcher({ workspace: 'wnothere0001' });
    const err = await rejection(herdrLauncher.launch(request('hank')));
    expect(err.code).toBe(ErrorCode.launchFailed);
    expect(err.message).toBe(
      `could not start hank in a new herdr tab via ${herdr.socketPath}: herdr at ${herdr.socketPath} refused tab.create: workspace_not_found: workspace wnothere0001 not found`,
    );

    const pane = await launcher().launch(request('hank'));
    launchLine(herdrPane(pane));
  });

  it('closes the tab and removes the env file when typing the line fails', async () => {
    const envDirsNow = async () =>
      (await readdir(tmpdir())).filter((entry) => entry.startsWith('bridge-herdr-'));
    const before = await envDirsNow();
    herdr.mute('pane.send_input');
    const herdrLauncher = createHerdrLauncher({ socketPath: herdr.socketPath, requestTimeoutMs: 300 });

    const err = await rejection(herdrLauncher.launch(request('ivy')));
    expect(err.code).toBe(ErrorCode.launchFailed);
    expect(err.message).toContain('herdr did not answer within 300 ms during pane.send_input');
    expect(herdr.tabs().map((t) => t.label)).toEqual(['1']);
    expect(await herdrLauncher.find('ivy')).toBeUndefined();
    expect(await envDirsNow()).toEqual(before);
  });

  it('refuses an environment variable name no shell takes, before opening a tab', async () => {
    const err = await rejection(launcher().launch(request('jack', { env: { 'BAD-NAME': 'x' } })));
    expect(err.code).toBe(ErrorCode.launchFailed);
    expect(err.message).toContain('"BAD-NAME" is not a shell variable name');
    expect(herdr.methods()).toEqual([]);
  });
});

describe('shell quoting', () => {
  it('quotes single quotes and leaves everything else literal', () => {
    expect(shellQuote("it's")).toBe(`'it'\\''s'`);
    expect(envFileText({ A: '$x', B: "'" })).toBe(`export A='$x'\nexport B=''\\'''\n`);
  });
});
