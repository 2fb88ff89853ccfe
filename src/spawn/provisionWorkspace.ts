import { execFile } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { BridgeError, ErrorCode } from '../errors.js';

const cloneTimeoutMs = 5 * 60_000;

/**
 * The working directory of a spawned agent whose profile names a repository: a clone of its
 * own under `root/<name>`, at `ref` when given. A clone already there (a relaunch after a
 * crash) is used as it is.
 */
export async function provisionWorkspace(
  repo: { url: string; ref?: string | undefined },
  root: string,
  name: string,
): Promise<string> {
  const dir = join(root, name);
  if (existsSync(join(dir, '.git'))) return dir;
  mkdirSync(dirname(dir), { recursive: true, mode: 0o700 });
  const args = [
    'clone',
    '--quiet',
    ...(repo.ref === undefined ? [] : ['--branch', repo.ref]),
    '--',
    repo.url,
    dir,
  ];
  await new Promise<void>((resolve, reject) => {
    execFile(
      'git',
      args,
      { timeout: cloneTimeoutMs, env: { ...process.env, GIT_TERMINAL_PROMPT: '0' } },
      (error, _stdout, stderr) => {
        if (!error) {
          resolve();
          return;
        }
        const said = String(stderr).trim() || error.message;
        reject(
          new BridgeError(
            ErrorCode.launchFailed,
            `could not clone ${repo.url}${repo.ref === undefined ? '' : ` at ${repo.ref}`} into ${dir}: ${said}`,
            { cause: error },
          ),
        );
      },
    );
  });
  return dir;
}
