import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cacheHome, sqlitePrebuilds } from '../../tools/testPrerequisites.js';
import { repoRoot } from '../support/GatewayProcess.js';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
  ms: number;
}

function run(
  command: string,
  args: string[],
  options: { cwd: string; env: NodeJS.ProcessEnv },
): Promise<Run> {
  const started = Date.now();
  return new Promise((resolve) => {
    execFile(
      command,
      args,
      { ...options, timeout: 240_000, maxBuffer: 16 * 1024 * 1024 },
      (err, stdout, stderr) =>
        resolve({
          code: err ? (typeof err.code === 'number' ? err.code : 1) : 0,
          stdout,
          stderr: `${stderr}${err && typeof err.code !== 'number' ? `\n[${err.message}]` : ''}`,
          ms: Date.now() - started,
        }),
    );
  });
}

/** The ```sh blocks of one `## heading` section of README.md, in order. */
function readmeBlocks(readme: string, heading: string): string[] {
  const start = readme.indexOf(`\n## ${heading}\n`);
  if (start < 0) throw new Error(`README.md has no section "## ${heading}"`);
  const end = readme.indexOf('\n## ', start + 1);
  const section = readme.slice(start, end < 0 ? undefined : end);
  return [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1] as string);
}

/**
 * A new user on a fresh machine: the packed tarball installed globally (the README's user
 * path), a clean HOME, the system's sbin directories first on PATH (where iproute2's own
 * `bridge` lives), and then the README's "Try it" and "Cross-host walkthrough" lines, taken from
 * README.md as they are written, run by bash: they run the project's command and succeed.
 */
describe('the README on a fresh machine', { timeout: 300_000 }, () => {
  const root = mkdtempSync(join(tmpdir(), 'bridge-fresh-'));
  const prefix = join(root, 'prefix');
  const home = join(root, 'home');
  const work = join(root, 'work');
  const readme = readFileSync(join(repoRoot, 'README.md'), 'utf8');
  let userEnv: NodeJS.ProcessEnv;

  beforeAll(async () => {
    for (const dir of [home, work, join(root, 'tmux')]) mkdirSync(dir, { recursive: true });
    // dist/ is built already (npm test builds it first): pack it as it is, without prepack's
    // rebuild under the feet of the tests running beside this one.
    const packed = await run('npm', ['pack', '--ignore-scripts', '--pack-destination', root], {
      cwd: repoRoot,
      env: process.env,
    });
    expect(packed.code, packed.stderr || packed.stdout).toBe(0);
    const tarball = join(root, packed.stdout.trim().split('\n').at(-1) as string);
    // The machine's npm cache and the prebuilt better-sqlite3 test:prepare keeps (compiled otherwise).
    const installed = await run(
      'npm',
      [
        'install',
        '-g',
        '--prefix',
        prefix,
        '--allow-scripts=better-sqlite3',
        '--no-audit',
        '--no-fund',
        tarball,
      ],
      {
        cwd: root,
        env: {
          ...process.env,
          npm_config_better_sqlite3_local_prebuilds: sqlitePrebuilds(cacheHome(process.env, homedir())),
        },
      },
    );
    expect(installed.code, installed.stderr || installed.stdout).toBe(0);
    const size = await run('du', ['-sm', prefix], { cwd: root, env: process.env });
    console.log(
      `[freshMachine] npm install -g of the tarball: ${(installed.ms / 1000).toFixed(1)} s, ${size.stdout.split('\t')[0]} MB`,
    );
    // Nothing of the developer's environment: no BRIDGE_* settings, no tmux server of theirs.
    const clean = Object.fromEntries(
      Object.entries(process.env).filter(([name]) => !/^(BRIDGE_|TMUX)/.test(name)),
    );
    userEnv = {
      ...clean,
      HOME: home,
      PATH: ['/usr/sbin', '/sbin', join(prefix, 'bin'), '/usr/bin', '/bin'].join(':'),
      TMUX_TMPDIR: join(root, 'tmux'),
    };
  });

  afterAll(async () => {
    // Whatever a failed script left running: only processes of this install.
    await run('pkill', ['-f', `${prefix}/`], { cwd: root, env: process.env });
    await run('tmux', ['kill-server'], {
      cwd: root,
      env: { ...process.env, TMUX_TMPDIR: join(root, 'tmux') },
    });
    rmSync(root, { recursive: true, force: true });
  });

  it('the installed command is the one on PATH, not iproute2’s bridge', async () => {
    const found = await run('bash', ['-c', 'command -v agentbridge && agentbridge --help | head -1'], {
      cwd: work,
      env: userEnv,
    });
    expect(found.code, found.stderr || found.stdout).toBe(0);
    expect(found.stdout).toBe(
      `${join(prefix, 'bin', 'agentbridge')}\nagentbridge — cross-host messaging for AI coding agents\n`,
    );
  });

  /** A README section's ```sh blocks (the commands, then the stop), run by bash as written. */
  const runSection = async (heading: string): Promise<string> => {
    const blocks = readmeBlocks(readme, heading);
    expect(blocks).toHaveLength(2);
    const ran = await run('bash', ['-c', `set -euo pipefail\n${blocks.join('\n')}`], {
      cwd: work,
      env: userEnv,
    });
    expect(ran.code, `${ran.stdout}\n${ran.stderr}`).toBe(0);
    return ran.stdout;
  };

  it('"Try it", as written', async () => {
    expect(await runSection('Try it')).toMatch(
      /^\[bridge SEND from me@\S+ msg [0-9a-f-]{36}\] hello, pane$/m,
    );
  });

  it('the cross-host walkthrough with its clean-up, as written', async () => {
    const walked = await runSection('Cross-host walkthrough');
    expect(walked).toMatch(/^\[bridge SEND from lead@alpha msg [0-9a-f-]{36}\] rebase onto main$/m);
    expect(walked).toContain('coder@beta');
  });
});
