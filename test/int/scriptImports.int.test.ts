import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * The benchmarks and tools are plain ESM over the built `dist/`, which no compiler checks: a
 * module moved or an export renamed in src/ breaks them only when they run (`npm run bench`).
 * Every named import they take from dist/ must exist there (the int project runs after the build).
 */
const repo = resolve(dirname(new URL(import.meta.url).pathname), '../..');
const folders = ['bench', 'bench/lib', 'bench/scenarios', 'tools'];
const importPattern = /import\s*\{([^}]*)\}\s*from\s*'([^']*\/dist\/[^']*)'/g;

describe('scripts over dist/', () => {
  it('every named import of bench/ and tools/ from dist/ is exported there', async () => {
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
          const module = (await import(resolve(dirname(file), spec ?? ''))) as Record<string, unknown>;
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
