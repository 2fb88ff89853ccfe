import { loadConfig } from '../config/loadConfig.js';
import { redactUri } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import { describeBrokerError } from '../federation/describeBrokerError.js';
import { type SetupReport, setupSharedTopology } from '../federation/sharedTopology.js';
import { legacyControlExchange } from '../federation/topology.js';
import type { CliValues } from './cliOptions.js';
import { printResult, writeHuman } from './output.js';

// `agentbridge broker setup`: the operator declares the shared topology once per broker (the
// exchanges, bridge.dlq bound to bridge.dlx). Gateway logins may not configure shared names;
// gateways check that it is there and refuse to start otherwise.

const setupUsage =
  'usage: agentbridge broker setup [--delete-legacy]  (the broker URI comes from BRIDGE_BROKER_URI or broker.uri / broker.uris)';

export async function runBrokerSetup(values: CliValues, args: string[]): Promise<number> {
  if (args.length > 0) throw new BridgeError(ErrorCode.badRequest, setupUsage);
  const { config } = loadConfig({ file: values.config });
  const { uris } = config.broker;
  if (uris.length === 0) {
    // Not a flag: a URI on the command line, with its password, is readable by anyone in `ps`.
    throw new BridgeError(
      ErrorCode.badConfig,
      "agentbridge broker setup needs the operator's broker login: set BRIDGE_BROKER_URI (or broker.uri " +
        'in the config file) to amqps://ADMIN:PASSWORD@BROKER/VHOST',
    );
  }
  const report = await onFirstNodeThatAnswers(uris, (uri) =>
    setupSharedTopology({
      uri,
      tls: config.broker.tls,
      connectTimeoutMs: config.broker.connectTimeoutMs,
      deleteLegacy: values['delete-legacy'] ?? false,
      queueMode: config.broker.queueMode,
    }),
  );
  return printResult(values, report, () => human(report));
}

/**
 * The topology is the cluster's, so any node will do: one that cannot be reached is passed
 * over (said on stderr) for the next; what a reached node refuses is the operator's to fix.
 */
async function onFirstNodeThatAnswers<T>(
  uris: readonly string[],
  run: (uri: string) => Promise<T>,
): Promise<T> {
  for (const [index, uri] of uris.entries()) {
    try {
      return await run(uri);
    } catch (err) {
      if (err instanceof BridgeError || index === uris.length - 1) throw err;
      const { message } = describeBrokerError(err);
      writeHuman(
        process.stderr,
        `agentbridge: ${redactUri(uri)} did not answer (${message}); trying the next node`,
      );
    }
  }
  throw new BridgeError(ErrorCode.badConfig, 'no broker node is configured');
}

function human(report: SetupReport): string {
  const lines = [
    '# Shared topology declared (idempotent; gateways check it on every connect):',
    ...report.exchanges.map((e) => `  exchange ${e.name} (${e.type}, durable)`),
    `  queue ${report.queue} (durable, ${report.queueType}) bound to bridge.dlx`,
  ];
  if (report.legacyControl === 'present') {
    lines.push(
      '',
      `# The direct exchange ${legacyControlExchange} of earlier releases is still there. Gateways of this`,
      '# release use bridge.control.topic; once every gateway is upgraded, remove the old one with',
      '#   agentbridge broker setup --delete-legacy',
    );
  } else if (report.legacyControl === 'deleted') {
    lines.push('', `# Deleted the legacy exchange ${legacyControlExchange}.`);
  }
  return lines.join('\n');
}
