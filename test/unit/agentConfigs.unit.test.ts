import { describe, expect, it } from 'vitest';
import { type ConnectTarget, connectEdits } from '../../src/connect/agentConfigs.js';

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
});
