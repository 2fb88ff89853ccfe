import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { FileEdit } from './agentConfigs.js';

/** A file's text, or undefined when there is none. */
export function readText(path: string): string | undefined {
  return existsSync(path) ? readFileSync(path, 'utf8') : undefined;
}

/** Writes `text` with `mode`, making the directory (0700) when it is missing. */
export function writeText(path: string, text: string, mode: number): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  writeFileSync(path, text, { mode });
  chmodSync(path, mode);
}

/** Makes `edit` on the file as it is now: a file holding the token is 0600, another keeps its mode. */
export function applyEdit(edit: FileEdit): void {
  const before = readText(edit.path);
  const mode = edit.secret ? 0o600 : before === undefined ? 0o644 : modeOf(edit.path);
  writeText(edit.path, edit.apply(before), mode);
}

export function modeOf(path: string): number {
  return statSync(path).mode & 0o777;
}
