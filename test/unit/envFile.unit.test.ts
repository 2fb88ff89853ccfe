import { describe, expect, it } from 'vitest';
import { envFileText, sourceAndRun } from '../../src/spawn/envFile.js';

describe("a spawned agent's env file and the line that runs it", () => {
  const file = { dir: "/tmp/bridge-env-a'b", path: "/tmp/bridge-env-a'b/env", remove: () => {} };

  it('names only the file: no value of the environment is in the command line', () => {
    const env = { BRIDGE_TOKEN: 'brt_secret', BRIDGE_NAME: 'rev' };
    const line = sourceAndRun(file, 'claude --resume');
    expect(envFileText(env)).toContain("export BRIDGE_TOKEN='brt_secret'");
    expect(line).not.toContain('brt_secret');
    expect(line).toBe(
      ". '/tmp/bridge-env-a'\\''b/env' && rm -f '/tmp/bridge-env-a'\\''b/env' && rmdir '/tmp/bridge-env-a'\\''b'" +
        " && exec sh -c 'claude --resume'",
    );
  });

  it('refuses a variable name no shell takes', () => {
    expect(() => envFileText({ 'A-B': 'x' })).toThrow(/"A-B" is not a shell variable name/);
    expect(() => envFileText({ A: 'x\0y' })).toThrow(/NUL byte/);
  });
});
