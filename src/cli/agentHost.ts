import { resolve } from 'node:path';
import { createAgentHost } from '../agents/agentHost.js';
import { BridgeError, ErrorCode } from '../errors.js';
import { DeliveryPath, type NativePath } from '../wire/agentHost.js';
import type { CliValues } from './cliOptions.js';

/**
 * `agentbridge agent-host --socket PATH [--protocol acp|claude-stream|codex-app-server] [--cwd DIR]
 * -- AGENT [ARG]...`: runs AGENT (over ACP: `gemini --acp`, `opencode acp`; over Claude Code's
 * stream-json: `claude`, the flags that path needs added; over Codex's app-server: `codex
 * app-server`) in the foreground, mirrors its session on this terminal, and
 * takes the messages a gateway hands it on PATH until it is stopped (Ctrl-C) or the agent exits.
 */
export async function runAgentHost(values: CliValues, rest: string[]): Promise<number> {
  const [command, ...args] = rest;
  if (!values.socket || command === undefined) {
    throw new BridgeError(
      ErrorCode.badRequest,
      'agent-host needs --socket PATH and the agent after --, e.g. `agentbridge agent-host --socket ./gemini.sock -- gemini --acp`',
    );
  }
  const paths: readonly NativePath[] = [
    DeliveryPath.acp,
    DeliveryPath.claudeStream,
    DeliveryPath.codexAppServer,
  ];
  const protocol = paths.find((path) => path === (values.protocol ?? DeliveryPath.acp));
  if (protocol === undefined) {
    throw new BridgeError(
      ErrorCode.badRequest,
      `--protocol: one of ${paths.join(', ')}, not "${values.protocol}"`,
    );
  }
  const socketPath = resolve(values.socket);
  const host = createAgentHost({
    socketPath,
    protocol,
    command,
    args,
    cwd: resolve(values.cwd ?? process.cwd()),
    mirror: (line) => process.stdout.write(`${line}\n`),
  });
  await host.start();
  process.stdout.write(
    `register it: agentbridge register --kind worker --name NAME --agent-socket ${socketPath}\n`,
  );
  await new Promise<void>((done) => {
    for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.once(signal, () => done());
  });
  await host.stop();
  return 0;
}
