import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliResult, GatewayProcess, repoRoot, runCli } from '../support/GatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';

/** The real agents' own CLIs (test/agents), asked what they make of the config connect wrote. */
const agentBin = (name: string) => join(repoRoot, 'test', 'agents', 'node_modules', '.bin', name);

function agentCli(name: string, args: string[], env: NodeJS.ProcessEnv, cwd: string): Promise<string> {
  return new Promise((resolve) => {
    execFile(agentBin(name), args, { cwd, env, timeout: 90_000 }, (_err, stdout, stderr) =>
      resolve(`${stdout}${stderr}`),
    );
  });
}

const modeOf = (path: string) => statSync(path).mode & 0o777;

/**
 * `agentbridge connect` writes each agent's own MCP configuration, the token only in files of
 * mode 0600 and bridge's tools allowed; the real Claude Code, Codex CLI and Gemini CLI read it
 * and reach the gateway; `disconnect` leaves every file as it was.
 */
describe('agentbridge connect and disconnect, read by the real agents', () => {
  let gateway: GatewayProcess;
  let home: string;
  let project: string;
  /** The agents' processes: this HOME, nothing of the machine's own agent configs. */
  let agentEnv: NodeJS.ProcessEnv;

  // The CLI's own config names another port than the gateway's (which came from the gateway's
  // environment): connect writes the endpoint the running gateway reports.
  const cli = (args: string[], extra: NodeJS.ProcessEnv = {}, cwd = project): Promise<CliResult> =>
    runCli(args, gateway.cliEnv({ HOME: home, CODEX_HOME: '', BRIDGE_MCP_PORT: '7433', ...extra }), cwd);

  beforeAll(async () => {
    gateway = new GatewayProcess();
    await gateway.start();
    home = mkdtempSync(join(tmpdir(), 'bridge-connect-home-'));
    project = mkdtempSync(join(tmpdir(), 'bridge-connect-project-'));
    agentEnv = {
      PATH: process.env.PATH,
      HOME: home,
      // Gemini CLI loads MCP servers only in a folder it trusts (connect says so).
      GEMINI_CLI_TRUST_WORKSPACE: 'true',
      GEMINI_API_KEY: 'dummy',
    };
  });

  afterAll(async () => {
    await gateway?.dispose();
    for (const dir of [home, project]) if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('Claude Code: --print writes nothing; connect as a main, Claude reaches the gateway with bridge allowed; disconnect restores both files byte for byte', async () => {
    const before = '{\n    "numStartups": 3,\n    "theme": "dark"\n}\n'; // its own indentation, kept on undo
    writeFileSync(join(home, '.claude.json'), before, { mode: 0o644 });

    const printed = await cli(['connect', 'claude', '--as', 'main', 'lead', '--print']);
    expect(printed.code, printed.stderr || printed.stdout).toBe(0);
    expect(printed.stdout).toContain('<the token of lead>');
    expect(readFileSync(join(home, '.claude.json'), 'utf8')).toBe(before);
    expect(existsSync(join(home, '.claude', 'settings.json'))).toBe(false);
    expect(await gateway.roster()).not.toContainEqual(expect.objectContaining({ name: 'lead' }));

    // Connected and undone untouched: both files as they were, byte for byte (mode too).
    const first = await cli(['connect', 'claude', '--as', 'main', 'lead']);
    expect(first.code, first.stderr || first.stdout).toBe(0);
    expect(modeOf(join(home, '.claude.json'))).toBe(0o600);
    expect((await cli(['disconnect', 'claude'])).code).toBe(0);
    expect(readFileSync(join(home, '.claude.json'), 'utf8')).toBe(before);
    expect(modeOf(join(home, '.claude.json'))).toBe(0o644);
    expect(existsSync(join(home, '.claude', 'settings.json'))).toBe(false);

    const connected = await cli(['connect', 'claude', '--as', 'main', 'lead']);
    expect(connected.code, connected.stderr || connected.stdout).toBe(0);
    expect(connected.stdout).toContain('connected claude as lead (main, registered now)');
    expect(connected.stderr + connected.stdout).not.toMatch(/brt_/); // the token is never printed
    const config = JSON.parse(readFileSync(join(home, '.claude.json'), 'utf8'));
    expect(config).toMatchObject({ numStartups: 3, theme: 'dark' });
    expect(config.mcpServers.bridge).toEqual({
      type: 'http',
      url: gateway.mcpUrl,
      headers: { Authorization: expect.stringMatching(/^Bearer brt_/) },
    });
    expect(modeOf(join(home, '.claude.json'))).toBe(0o600);
    expect(JSON.parse(readFileSync(join(home, '.claude', 'settings.json'), 'utf8'))).toEqual({
      permissions: { allow: ['mcp__bridge'] },
    });
    // The token connect wrote is lead's.
    const token = (config.mcpServers.bridge.headers.Authorization as string).slice('Bearer '.length);
    const client = await connectMcp(gateway.mcpUrl, token);
    const roster = await callTool(client, 'bridge_roster', {});
    expect(roster.isError).toBeFalsy();
    await client.close();

    // Claude Code itself: the server is there and answers with the token.
    expect(await agentCli('claude', ['mcp', 'list'], agentEnv, project)).toMatch(
      new RegExp(`bridge: ${gateway.mcpUrl.replaceAll('.', '\\.')} \\(HTTP\\) - ✔ Connected`),
    );

    // Connected twice is refused: one connection per agent and scope.
    const again = await cli(['connect', 'claude', '--as', 'main', 'lead2']);
    expect(again.code).toBe(2); // a request refused: exit 2
    expect(again.stderr).toMatch(/claude is already connected here .*: agentbridge disconnect claude first/);

    // Claude Code rewrote its ~/.claude.json meanwhile (it does at every start): disconnect
    // takes bridge's server out and keeps what Claude added.
    const rewritten = JSON.parse(readFileSync(join(home, '.claude.json'), 'utf8'));
    const undone = await cli(['disconnect', 'claude']);
    expect(undone.code, undone.stderr || undone.stdout).toBe(0);
    const { mcpServers: _ours, ...rest } = rewritten;
    expect(JSON.parse(readFileSync(join(home, '.claude.json'), 'utf8'))).toEqual(rest);
    expect(existsSync(join(home, '.claude', 'settings.json'))).toBe(false);
    expect(await gateway.roster()).not.toContainEqual(expect.objectContaining({ name: 'lead' }));
  });

  it('Codex CLI: its TOML gets one block (token in a 0600 file, the server approved), Codex reads it; a line the user added since is kept on disconnect', async () => {
    mkdirSync(join(home, '.codex'), { recursive: true });
    const before = 'model = "gpt-5"\n\n[projects."/srv/app"]\ntrust_level = "trusted"\n';
    writeFileSync(join(home, '.codex', 'config.toml'), before);

    const connected = await cli(['connect', 'codex', '--as', 'orchestrator', 'conductor']);
    expect(connected.code, connected.stderr || connected.stdout).toBe(0);
    const toml = readFileSync(join(home, '.codex', 'config.toml'), 'utf8');
    expect(toml.startsWith(before)).toBe(true);
    expect(toml).toContain(
      `[mcp_servers.bridge]\nurl = "${gateway.mcpUrl}"\nhttp_headers = { Authorization = "Bearer brt_`,
    );
    expect(toml).toContain('default_tools_approval_mode = "approve"');
    expect(modeOf(join(home, '.codex', 'config.toml'))).toBe(0o600);
    const listed = await agentCli('codex', ['mcp', 'list'], agentEnv, project);
    expect(listed).toMatch(/bridge\s+http:\/\/127\.0\.0\.1:\d+\/mcp\s+-\s+enabled\s+Bearer token/);

    // Edited since connect: disconnect takes out its block only.
    writeFileSync(join(home, '.codex', 'config.toml'), `${toml}model_reasoning_effort = "high"\n`);
    const undone = await cli(['disconnect', 'codex']);
    expect(undone.code, undone.stderr || undone.stdout).toBe(0);
    expect(undone.stdout).toContain('it changed since connect');
    expect(readFileSync(join(home, '.codex', 'config.toml'), 'utf8')).toBe(
      `${before}model_reasoning_effort = "high"\n`,
    );
  });

  it('Gemini CLI: a trusted server in its settings (0600), Gemini connects; the project scope names BRIDGE_TOKEN, never the token', async () => {
    const connected = await cli(['connect', 'gemini', '--as', 'main', 'gem']);
    expect(connected.code, connected.stderr || connected.stdout).toBe(0);
    expect(connected.stdout).toContain('Gemini CLI loads MCP servers only in a folder it trusts');
    const settings = join(home, '.gemini', 'settings.json');
    expect(JSON.parse(readFileSync(settings, 'utf8')).mcpServers.bridge).toEqual({
      httpUrl: gateway.mcpUrl,
      headers: { Authorization: expect.stringMatching(/^Bearer brt_/) },
      trust: true,
    });
    expect(modeOf(settings)).toBe(0o600);
    expect(await agentCli('gemini', ['mcp', 'list'], agentEnv, project)).toMatch(/✓ bridge: .* - Connected/);
    expect((await cli(['disconnect', 'gemini'])).code).toBe(0);
    expect(existsSync(settings)).toBe(false);

    // Project scope: a file that may be committed holds no token.
    const scoped = await cli(['connect', 'gemini', '--as', 'main', 'gem-project', '--scope', 'project']);
    expect(scoped.code, scoped.stderr || scoped.stdout).toBe(0);
    const projectSettings = readFileSync(join(project, '.gemini', 'settings.json'), 'utf8');
    // Gemini expands `${NAME}` in its settings at load.
    expect(projectSettings).toContain(`"Authorization": "Bearer \${BRIDGE_TOKEN}"`);
    expect(projectSettings).not.toContain('brt_');
    expect((await cli(['disconnect', 'gemini', '--scope', 'project'])).code).toBe(0);
    expect(existsSync(join(project, '.gemini', 'settings.json'))).toBe(false);
  });

  it('says what to do: a worker without its pane, a name taken without its token, an agent it does not know, nothing to disconnect', async () => {
    const noPane = await cli(['connect', 'claude', '--as', 'worker', 'w1'], {
      TMUX_PANE: '',
      HERDR_PANE_ID: '',
    });
    expect(noPane.code).toBe(2);
    expect(noPane.stderr).toMatch(/a worker is typed into its pane: pass --tmux TARGET or --herdr-pane ID/);

    expect((await gateway.cli(['register', '--kind', 'main', '--name', 'taken'])).code).toBe(0);
    const taken = await cli(['connect', 'claude', '--as', 'main', 'taken'], { BRIDGE_TOKEN: '' });
    expect(taken.code).toBe(1);
    expect(taken.stderr).toMatch(/NAME_TAKEN: taken is registered already: .*set BRIDGE_TOKEN to its token/);

    const unknown = await cli(['connect', 'cursor', '--as', 'main', 'x']);
    expect(unknown.stderr).toMatch(/connect needs the agent: agentbridge connect claude\|codex\|gemini/);
    const nothing = await cli(['disconnect', 'codex']);
    expect(nothing.code).toBe(2);
    expect(nothing.stderr).toMatch(/codex is not connected here/);
  });
});
