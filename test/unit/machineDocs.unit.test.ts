import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { registryGraphs, vizFiles } from '../../src/viz/vizFiles.js';

/**
 * docs/machines holds the diagrams of every machine, drawn by `agentbridge viz` (SPEC §10): they
 * must be what the current definitions draw, byte for byte, so a machine changed without its
 * diagram fails here.
 */
const docs = resolve(import.meta.dirname, '..', '..', 'docs', 'machines');
const regenerate = 'regenerate them with `npm run docs:machines` and commit docs/machines';
const expected = vizFiles(registryGraphs());

describe('docs/machines', () => {
  it.each(expected.map((file) => [file.name, file.content] as const))('%s is up to date', (name, content) => {
    const path = join(docs, name);
    expect(existsSync(path), `docs/machines/${name} is missing: ${regenerate}`).toBe(true);
    expect(readFileSync(path, 'utf8'), `docs/machines/${name} is stale: ${regenerate}`).toBe(content);
  });

  it('holds no diagram of a machine that is gone from the registry', () => {
    const names = new Set(expected.map((file) => file.name));
    const extra = readdirSync(docs).filter((name) => !names.has(name));
    expect(extra, `docs/machines has files viz no longer makes: delete them and ${regenerate}`).toEqual([]);
  });

  it('draws the same bytes every time (no dates, no unstable order)', () => {
    expect(vizFiles(registryGraphs())).toEqual(expected);
  });
});
