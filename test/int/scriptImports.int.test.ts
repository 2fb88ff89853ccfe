import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * The benchmarks and tools are plain ESM that import the daemon's modules as `#bridge/…`
 * (package.json `imports`): `tsc -p tsconfig.scripts.json` checks them against src/, and Node
 * runs them over the built `dist/`. Every named import must resolve there at run time too (the
 * int project runs after the build).
 */
const repo = resolve(dirname(new URL(import.meta.url).pathname), '../..');
const folders = ['bench', 'bench/lib', 'bench/scenarios', 'tools'];
const importPattern = /import\s*\{([^}]*)\}\s*from\s*'(#bridge\/[^']*)'/g;

describe('scripts over dist/', () => {
  it('every named import of bench/ and tools/ from #bridge/ resolves to dist/ and is exported there', async () => {
    const missing: string[] = [];
    let checked = 0;
    for (const folder of folders) {
      for (const name of readdirSync(join(repo, folder)).filter((f) => f.endsWith('.mjs'))) {
        const file = join(repo, folder, name);
        for (const [, list, spec] of readFileSync(file, 'utf8').matchAll(importPattern)) {
          const names = (list ?? '')
            .split(',')
            .map((part) => part.trim().split(/\s+as\s+/)[0] ?? '')
            .filter((part) => part !== '');
          const module = (await import(spec ?? '')) as Record<string, unknown>;
          for (const imported of names) {
            checked++;
            if (!(imported in module)) missing.push(`${folder}/${name}: ${imported} from ${spec}`);
          }
        }
      }
    }
    expect(missing).toEqual([]);
    expect(checked).toBeGreaterThan(20);
  });
});
