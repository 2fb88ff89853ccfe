import { agentDirs, type Config } from '../config/schema.js';
import { Gateway } from '../gateway/Gateway.js';
import { adminSocketPath } from '../interfaces/adminProtocol.js';
import { startAdminServer } from '../interfaces/adminServer.js';
import { ConsoleSessions } from '../interfaces/ConsoleSessions.js';
import { startHttpServer } from '../interfaces/httpServer.js';
import { type Clock, systemClock } from '../kernel/clock.js';
import type { Logger } from '../log/logger.js';
import { createInjectorFactory, paneChecker, submissionTiming } from '../panes/createInjector.js';
import { makeHomePrivate } from '../security/privateHome.js';

export interface Daemon {
  readonly gateway: Gateway;
  readonly mcpUrl: string;
  readonly adminSocket: string;
  stop(): Promise<void>;
}

export interface DaemonOptions {
  config: Config;
  logger: Logger;
  clock?: Clock;
  onFatal?: (err: unknown) => void;
  /**
   * The agentbridge CLI as a command line (Node, its entry point): how a spawned worker on an
   * agent's own protocol gets its agent host. Without it, such a profile fails to launch.
   */
  agentHostCommand?: readonly string[];
}

/**
 * Starts a gateway with its interfaces: its home made private, the event log, then MCP and the
 * admin socket.
 */
export async function startDaemon(options: DaemonOptions): Promise<Daemon> {
  const { config, logger } = options;
  const clock = options.clock ?? systemClock;
  const opened = makeHomePrivate(config.home, { agentDirs: agentDirs(config) });
  if (opened.length > 0) {
    logger.warn(
      {
        home: config.home,
        count: opened.length,
        opened: opened.slice(0, 100).map((e) => `${e.path} ${e.mode}`),
      },
      'made the home private: these were open to group or others, who may have read them',
    );
  }
  const gateway = new Gateway({
    config,
    logger,
    clock,
    createInjector: createInjectorFactory({
      herdrSocketPath: config.herdr.socketPath,
      logger,
      timing: submissionTiming(config.delivery),
      clock,
      busy: config.delivery.busy,
    }),
    checkPane: paneChecker(config.herdr.socketPath),
    ...(options.agentHostCommand ? { agentHostCommand: options.agentHostCommand } : {}),
    ...(options.onFatal ? { onFatal: options.onFatal } : {}),
  });
  // The operator console's logins: minted over the admin socket, spent on the HTTP server.
  const consoleSessions = new ConsoleSessions(gateway.clock);
  let consoleUrl: string | undefined;
  const admin = await startAdminServer(gateway, adminSocketPath(config), {
    console: { sessions: consoleSessions, baseUrl: () => consoleUrl },
  });
  try {
    await gateway.start();
  } catch (err) {
    await admin.close();
    // The start's failure is what the caller needs; one in stopping after it is only logged.
    await gateway
      .stop()
      .catch((stopErr: unknown) =>
        logger.warn({ err: stopErr }, 'could not stop the gateway after its start failed'),
      );
    throw err;
  }
  let http: Awaited<ReturnType<typeof startHttpServer>>;
  try {
    http = await startHttpServer(gateway, { consoleSessions });
  } catch (err) {
    await admin.close();
    await gateway.stop();
    throw err;
  }
  gateway.setMcpUrl(`${http.url}/mcp`);
  consoleUrl = http.url;
  return {
    gateway,
    mcpUrl: `${http.url}/mcp`,
    adminSocket: admin.socketPath,
    async stop() {
      await http.close();
      await admin.close();
      await gateway.stop();
    },
  };
}
