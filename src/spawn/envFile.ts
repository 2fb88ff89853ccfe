import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { shellQuote } from '../text/shellQuote.js';

// A spawned agent's environment carries BRIDGE_TOKEN. Neither on the command line (argv is
// readable by every local user in `ps`) nor typed where the screen shows it: in a 0600 file
// the pane's shell sources and deletes before it runs the agent.

const SHELL_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** The env file's text: one `export KEY='value'` line per variable. Throws on a name no shell takes. */
export function envFileText(env: Readonly<Record<string, string>>): string {
  return Object.entries(env)
    .map(([key, value]) => {
      if (!SHELL_NAME.test(key)) throw new Error(`${JSON.stringify(key)} is not a shell variable name`);
      if (value.includes('\0')) throw new Error(`the value of ${key} contains a NUL byte`);
      return `export ${key}=${shellQuote(value)}\n`;
    })
    .join('');
}

/**
 * The shell command that sources the env file, removes it and its directory, then `exec`s
 * `command` through `sh -c` (which takes a whole shell command: `a && b`, `VAR=x cmd`). Only
 * the file's path is in it, nothing secret.
 */
export function sourceAndRun(file: EnvFile, command: string): string {
  return (
    `. ${shellQuote(file.path)} && rm -f ${shellQuote(file.path)} && rmdir ${shellQuote(file.dir)}` +
    ` && exec sh -c ${shellQuote(command)}`
  );
}

export interface EnvFile {
  readonly dir: string;
  readonly path: string;
  /** Removes it, when the launch failed and no shell will. */
  remove(): void;
}

/**
 * Writes `text` (from `envFileText`) to `<tmpdir>/<prefix>XXXXXX/env`: mkdtemp makes the
 * directory 0700, and the file is 0600 from its creation on.
 */
export function writeEnvFile(text: string, prefix: string): EnvFile {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const path = join(dir, 'env');
  try {
    writeFileSync(path, text, { mode: 0o600, flag: 'wx' });
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return { dir, path, remove: () => rmSync(dir, { recursive: true, force: true }) };
}
