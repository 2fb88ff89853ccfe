import { describe, expect, it } from 'vitest';
import { type ConnectTarget, connectEdits, spawnConnection } from '../../src/connect/agentConfigs.js';

const target = (agent: ConnectTarget['agent'], scope: ConnectTarget['scope'] = 'user'): ConnectTarget => ({
  agent,
  scope,
  home: '/home/me',
  cwd: '/src/app',
  url: 'http://127.0.0.1:7433/mcp',
  token: 'brt_secret',
});

/** What `agentbridge connect` writes into each agent's files, and takes out again (pure). */
describe('agent configs written by connect', () => {
  it('every edit comes out again: applied then removed gives the text back, with or without a file before', () => {
    const befores: Record<string, string | undefined> = {
      '/home/me/.claude.json': '{\n  "mcpServers": {\n    "other": {\n      "command": "x"\n    }\n  }\n}\n',
      '/home/me/.claude/settings.json':
        '{\n  "permissions": {\n    "allow": [\n      "Bash(ls)"\n    ]\n  }\n}\n',
      '/home/me/.codex/config.toml': 'model = "o3"\n',
      '/home/me/.gemini/settings.json': undefined,
    };
    for (const agent of ['claude', 'codex', 'gemini'] as const) {
      for (const edit of connectEdits(target(agent))) {
        const before = befores[edit.path];
        const after = edit.apply(before);
        expect(after).not.toBe(before);
        expect(edit.remove(after)).toBe(before ?? (edit.path.endsWith('.toml') ? '' : '{}\n'));
      }
    }
  });

  it('a project file holds no token: Codex names BRIDGE_TOKEN, Gemini expands it; Claude keeps the project in the user file', () => {
    const [claudeServers, claudeSettings] = connectEdits(target('claude', 'project'));
    expect(claudeServers?.path).toBe('/home/me/.claude.json');
    expect(JSON.parse(claudeServers?.apply(undefined) ?? '')).toMatchObject({
      projects: {
        '/src/app': { mcpServers: { bridge: { headers: { Authorization: 'Bearer brt_secret' } } } },
      },
    });
    expect(claudeSettings?.path).toBe('/src/app/.claude/settings.local.json');
    for (const agent of ['codex', 'gemini'] as const) {
      const [edit] = connectEdits(target(agent, 'project'));
      expect(edit?.path.startsWith('/src/app/')).toBe(true);
      expect(edit?.secret).toBe(false);
      expect(edit?.apply(undefined)).not.toContain('brt_secret');
      expect(edit?.apply(undefined)).toContain('BRIDGE_TOKEN');
    }
  });

  it("Codex's own tables, written inside bridge's block while it ran, stay when bridge's part comes out", () => {
    const [codex] = connectEdits(target('codex'));
    const connected = codex?.apply('model = "o3"\n') ?? '';
    // Codex appends a table after the last one, which is bridge's (before the end marker).
    const rewritten = connected.replace(
      '# end of agentbridge connect',
      '\n[tui]\nscreen_reader_detection_done = true\n\n[mcp_servers.bridge.tools.bridge_send]\napproval_mode = "approve"\n# end of agentbridge connect',
    );
    expect(codex?.remove(rewritten)).toBe('model = "o3"\n[tui]\nscreen_reader_detection_done = true\n\n');
    // A server named bridge that connect did not write is not connect's to take out.
    const own = '[mcp_servers.bridge]\nurl = "http://elsewhere"\n';
    expect(codex?.remove(own)).toBe(own);
  });

  it('refuses what it cannot edit safely, and says what to do', () => {
    const [codex] = connectEdits(target('codex'));
    expect(() => codex?.apply('[mcp_servers.bridge]\nurl = "http://elsewhere"\n')).toThrow(
      /already has an MCP server named "bridge" that agentbridge did not write: remove it \(codex mcp remove bridge\)/,
    );
    // Its own block, written before, is replaced rather than doubled.
    const once = codex?.apply(undefined) ?? '';
    expect(codex?.apply(once)).toBe(once);
    const [gemini] = connectEdits(target('gemini'));
    expect(() => gemini?.apply('{ "mcpServers": ')).toThrow(
      /settings\.json is not valid JSON .*fix or move it/,
    );
    expect(() => gemini?.apply('{ "mcpServers": [] }')).toThrow(/"mcpServers" is not an object/);
  });

  it('a spawned agent is connected by its command line (Claude, Codex) or its working directory (Gemini), the token only named', () => {
    const url = 'http://127.0.0.1:7433/mcp';
    const claude = spawnConnection('claude', url, '/w/a').command('claude --model x');
    expect(claude).toBe(
      `claude --model x '--mcp-config' '{"mcpServers":{"bridge":{"type":"http","url":"${url}","headers":{"Authorization":"Bearer \${BRIDGE_TOKEN}"}}}}' '--allowedTools' 'mcp__bridge'`,
    );
    expect(spawnConnection('claude', url, '/w/a').edit).toBeUndefined();
    const codex = spawnConnection('codex', url, '/w/a').command('codex');
    expect(codex).toBe(
      `codex '-c' 'mcp_servers.bridge.url="${url}"' '-c' 'mcp_servers.bridge.http_headers={}' '-c' 'mcp_servers.bridge.bearer_token_env_var="BRIDGE_TOKEN"' '-c' 'mcp_servers.bridge.default_tools_approval_mode="approve"'`,
    );
    const gemini = spawnConnection('gemini', url, '/w/a');
    expect(gemini.command('gemini')).toBe('gemini');
    expect(gemini.edit?.path).toBe('/w/a/.gemini/settings.json');
    expect(JSON.parse(gemini.edit?.apply('{"ui":{"theme":"dark"}}') ?? '')).toEqual({
      ui: { theme: 'dark' },
      mcpServers: {
        bridge: { httpUrl: url, headers: { Authorization: `Bearer \${BRIDGE_TOKEN}` }, trust: true },
      },
    });
    // A URL with a quote stays one shell word.
    expect(spawnConnection('codex', "http://h/it's", '/w').command('codex')).toContain(`'\\''`);
  });
});
