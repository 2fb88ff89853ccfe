import { parseArgs } from 'node:util';

/**
 * The flags of every command, apart from main.ts so that a command can name what it reads
 * without importing the entry point (which imports every command).
 */
const options = {
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  config: { type: 'string' },
  kind: { type: 'string' },
  name: { type: 'string' },
  tmux: { type: 'string' },
  'tmux-socket': { type: 'string' },
  'herdr-pane': { type: 'string' },
  'agent-socket': { type: 'string' },
  socket: { type: 'string' },
  protocol: { type: 'string' },
  request: { type: 'string' },
  cwd: { type: 'string' },
  group: { type: 'string', multiple: true },
  token: { type: 'string' },
  'reply-to': { type: 'string' },
  wait: { type: 'string' },
  'wait-for': { type: 'string' },
  'idempotency-key': { type: 'string' },
  busy: { type: 'string' },
  max: { type: 'string' },
  all: { type: 'boolean' },
  force: { type: 'boolean' },
  apply: { type: 'boolean' },
  vhost: { type: 'string' },
  'password-file': { type: 'string' },
  node: { type: 'string' },
  'read-dlq': { type: 'boolean' },
  'delete-legacy': { type: 'boolean' },
  brief: { type: 'string' },
  trace: { type: 'string' },
  db: { type: 'string', multiple: true },
  out: { type: 'string' },
  mermaid: { type: 'boolean' },
  'no-check': { type: 'boolean' },
  progress: { type: 'boolean' },
  quiet: { type: 'boolean' },
  as: { type: 'string' },
  scope: { type: 'string' },
  print: { type: 'boolean' },
} as const;

export type CliValues = ReturnType<typeof parseCli>['values'];

export function parseCli(argv: string[]) {
  return parseArgs({ args: argv, options, allowPositionals: true, strict: true });
}
