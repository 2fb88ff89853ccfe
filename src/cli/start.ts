import { resolve } from 'node:path';
import { loadConfig } from '../config/loadConfig.js';
import { redactUri } from '../config/schema.js';
import { startDaemon } from '../daemon/startDaemon.js';
import { createLogger } from '../log/logger.js';
import type { CliValues } from './cliOptions.js';
import { writeHuman } from './output.js';
import { selfCli } from './selfCommand.js';

/** `agentbridge start`: runs the gateway in the foreground until SIGINT/SIGTERM. */
export async function runStart(values: CliValues): Promise<number> {
  const { config, file } = loadConfig({ file: values.config });
  const logger = createLogger({ level: config.log.level, host: config.hostId });
  const daemon = await startDaemon({
    config,
    logger,
    agentHostCommand: [process.execPath, selfCli],
    onFatal: (err) => {
      writeHuman(process.stderr, `agentbridge: fatal: ${err instanceof Error ? err.message : String(err)}`);
      logger.flush();
      process.exit(70);
    },
  });
  const { uris } = config.broker;
  const mode =
    uris.length === 0
      ? 'single-host mode, no broker'
      : `federated via ${uris.map(redactUri).join(', ')}${uris.length > 1 ? ' (one node at a time)' : ''}`;
  writeHuman(
    process.stderr,
    [
      `bridge gateway "${config.hostId}" is up (${mode})`,
      `  MCP endpoint:  ${daemon.mcpUrl}  (Streamable HTTP; header "Authorization: Bearer <token>")`,
      `  admin socket:  ${daemon.adminSocket}`,
      `  event log:     ${daemon.gateway.store.file}`,
      `  config:        ${file ?? 'built-in defaults'}`,
      // The CLI finds this gateway by its home: from another directory, or after a --config
      // that moved it, a bare `agentbridge register` would look in ./.bridge.
      'Connect an agent (from any directory):',
      `  BRIDGE_HOME=${resolve(config.home)} agentbridge register --kind main --name me   # prints a gid and a token`,
      `  BRIDGE_HOME=${resolve(config.home)} agentbridge connect claude --as main me   # or codex, gemini: writes its MCP config`,
    ].join('\n'),
  );
  await new Promise<void>((resolve) => {
    const shutdown = (signal: string) => {
      logger.info({ signal }, 'stopping');
      resolve();
    };
    process.once('SIGINT', () => shutdown('SIGINT'));
    process.once('SIGTERM', () => shutdown('SIGTERM'));
  });
  await daemon.stop();
  logger.info('stopped');
  logger.flush();
  return 0;
}
