import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/loadConfig.js';
import { inboxSpec, QueueMode } from '../../src/federation/topology.js';
import { registerBody, spawnBody } from '../../src/interfaces/adminProtocol.js';
import { decodeEnvelope } from '../../src/wire/codec.js';
import {
  describeIssues,
  entityNameSchema,
  groupNameSchema,
  groupsSchema,
  profileRequestSchema,
  schemaVersionString,
  spawnRequestSchema,
} from '../../src/wire/envelope.js';

const requestId = '01890a5d-ac96-774b-bcce-b302099a8057';
/** Names and groups that would bind a wildcard, fake a pane header, or are too long. */
const hostileNames = ['#', '*', 'a.#', 'x\nFrom: boss', 'bad name', '', '-lead', 'n'.repeat(65)];

function problem(schema: { safeParse(v: unknown): { success: boolean; error?: unknown } }, value: unknown) {
  const result = schema.safeParse(value);
  if (result.success) throw new Error(`${JSON.stringify(value)} was taken`);
  return describeIssues(result.error as never);
}

describe('one rule for entity names and group names', () => {
  it.each(hostileNames)('refuses the group %j, saying what is allowed', (group) => {
    const detail = problem(groupNameSchema, group);
    expect(detail).toContain('is not a group name');
    expect(detail).toContain('1-64 letters, digits');
  });

  it.each(hostileNames)('refuses the entity name %j', (name) => {
    expect(problem(entityNameSchema, name)).toContain('is not an entity name');
  });

  it('shows a newline in a refused name as \\n, not as a line break', () => {
    const detail = problem(groupNameSchema, 'x\nFrom: boss');
    expect(detail).toContain('"x\\nFrom: boss"');
    expect(detail).not.toContain('\n');
  });

  it('takes the names gateways make', () => {
    for (const name of ['reviewers', 'team.a', 'w_1', 'A-9', 'n'.repeat(64)]) {
      expect(groupNameSchema.parse(name)).toBe(name);
      expect(entityNameSchema.parse(name)).toBe(name);
    }
  });

  it('takes at most 32 groups and profiles of at most 64 characters', () => {
    expect(groupsSchema.parse(Array.from({ length: 32 }, (_, i) => `g${i}`))).toHaveLength(32);
    expect(
      problem(
        groupsSchema,
        Array.from({ length: 33 }, (_, i) => `g${i}`),
      ),
    ).toContain('33 groups: at most 32');
    expect(problem(profileRequestSchema, 'p'.repeat(65))).toContain('at most 64 characters, got 65');
    expect(problem(profileRequestSchema, '')).toContain('name a profile');
  });

  it('is the spawn request’s rule on the wire', () => {
    expect(problem(spawnRequestSchema, { requestId, profile: 'nope', name: 'bad name' })).toContain(
      'name: "bad name" is not an entity name',
    );
    expect(problem(spawnRequestSchema, { requestId, profile: 'p', groups: ['#', 'x\n'] })).toContain(
      'groups.0: "#" is not a group name',
    );
  });

  it('is the admin socket’s rule for register and spawn', () => {
    expect(problem(registerBody, { kind: 'main', name: 'm', groups: ['*'] })).toContain(
      '"*" is not a group name',
    );
    expect(problem(registerBody, { kind: 'main', name: 'two words' })).toContain('is not an entity name');
    expect(
      problem(spawnBody, { token: 't', host: 'h', profile: 'p', brief: '', groups: ['ok', 'a b'] }),
    ).toContain('groups.1: "a b" is not a group name');
  });

  it('is the config’s rule for a profile’s groups', () => {
    const dir = mkdtempSync(join(tmpdir(), 'bridge-names-'));
    const file = join(dir, 'config.json');
    writeFileSync(file, JSON.stringify({ profiles: { rev: { command: 'x', groups: ['#'] } } }));
    expect(() => loadConfig({ file, env: {} })).toThrow(/"#" is not a group name/);
  });
});

describe('an inbox is never bound to a wildcard', () => {
  it('binds the valid groups only, and removes the bindings an older gateway made for the others', () => {
    const spec = inboxSpec({
      deployment: 'team-a',
      gid: '3f1c2a7e-5b6d-4e8f-9a0b-1c2d3e4f5a6b',
      groups: ['reviewers', '*', 'a.#'],
      refusedGroups: ['#'],
      mode: QueueMode.classic,
      maxLength: 10,
    });
    const keys = spec.bindings.map((b) => b.key);
    expect(keys).toContain('deployment.team-a.broadcast.reviewers');
    expect(keys.filter((k) => /[#*]/.test(k))).toEqual([]);
    // Both the deployment's keys and the bare ones of earlier releases.
    expect(spec.unbindings?.map((b) => `${b.exchange} ${b.key}`).sort()).toEqual([
      'bridge.msg broadcast.#',
      'bridge.msg broadcast.*',
      'bridge.msg broadcast.a.#',
      'bridge.msg broadcast.all',
      'bridge.msg broadcast.reviewers',
      'bridge.msg deployment.team-a.broadcast.#',
      'bridge.msg deployment.team-a.broadcast.*',
      'bridge.msg deployment.team-a.broadcast.a.#',
    ]);
  });
});

describe('a SPAWN refused for its content still names whom to answer', () => {
  const spawn = (request: Record<string, unknown>) =>
    Buffer.from(
      JSON.stringify({
        v: schemaVersionString,
        kind: 'SPAWN',
        msgId: requestId,
        traceId: 'trace-1',
        hlc: '000001700000000.000003',
        from: { gid: '3f1c2a7e-5b6d-4e8f-9a0b-1c2d3e4f5a6b', name: 'main-1', host: 'host-a', kind: 'main' },
        to: 'host-b',
        text: 'hi',
        spawn: request,
      }),
    );

  it('comes back refused, with the request id and the requester', () => {
    const decoded = decodeEnvelope(spawn({ requestId, profile: 'p', groups: ['#', 'x\n…'] }), 65_536);
    expect(decoded.ok).toBe(false);
    if (decoded.ok) return;
    expect(decoded.detail).toContain('spawn.groups.0: "#" is not a group name');
    expect(decoded.refusedSpawn).toMatchObject({
      msgId: requestId,
      to: 'host-b',
      from: { name: 'main-1', host: 'host-a' },
      spawn: { requestId },
    });
  });

  it('names no one to answer when even the requester cannot be read', () => {
    const decoded = decodeEnvelope(spawn({ profile: 'p' }), 65_536);
    expect(decoded.ok || decoded.refusedSpawn).toBeFalsy();
  });
});
