import { existsSync } from 'node:fs';
import { chromiumCandidates } from '../../tools/testPrerequisites.js';

/**
 * The Chromium the browser tests run (Debian's `chromium`, which `npm test` installs through
 * tools/prepareTests.ts, or CHROMIUM_PATH). Fails rather than skips: a page nobody rendered is
 * not tested.
 */
export function findChromium(what: string): string {
  const found = chromiumCandidates(process.env).find((path) => existsSync(path));
  if (!found) {
    throw new Error(
      `no Chromium for ${what}: install it (apt-get install -y --no-install-recommends chromium, ` +
        'as `npm test` does through tools/prepareTests.ts) or set CHROMIUM_PATH',
    );
  }
  return found;
}
