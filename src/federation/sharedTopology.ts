import amqp, { type Channel, type ChannelModel } from 'amqplib';
import { readBrokerTls } from '../config/readBrokerTls.js';
import type { BrokerTlsConfig } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import { declareQueue } from './declareQueue.js';
import { describeQueueMismatch } from './describeQueueMismatch.js';
import { dlqSpec, dlqSpecOf, legacyControlExchange, QueueMode, sharedExchanges } from './topology.js';

/** Where to connect, for the operator's one-off commands (`agentbridge broker setup`). */
export interface OperatorConnectOptions {
  uri: string;
  tls?: BrokerTlsConfig | undefined;
  connectTimeoutMs?: number | undefined;
}

export interface SetupReport {
  exchanges: { name: string; type: string }[];
  queue: string;
  /** The type `queue` was declared as (broker.queueMode). */
  queueType: QueueMode;
  /** Whether the direct `bridge.control` of earlier releases is still on the broker. */
  legacyControl: 'present' | 'deleted' | 'absent';
}

/**
 * Declares the shared topology of SPEC §4 (the exchanges, `bridge.dlq` bound to `bridge.dlx`)
 * as the operator, once per broker (idempotent). Gateways only check it: their logins may not
 * configure shared names. An exchange that exists with another type is a 406 from the broker,
 * turned into an error that says what to do.
 */
export async function setupSharedTopology(
  options: OperatorConnectOptions & { deleteLegacy?: boolean; queueMode?: QueueMode },
): Promise<SetupReport> {
  const queueMode = options.queueMode ?? QueueMode.classic;
  const dlq = dlqSpecOf(queueMode);
  const model = await connectOperator(options, 'agentbridge broker setup');
  try {
    for (const exchange of sharedExchanges) {
      await onChannel(model, (channel) =>
        channel.assertExchange(exchange.name, exchange.type, { durable: exchange.durable }),
      ).catch((err: unknown) => {
        throw setupError(err, `declaring exchange ${exchange.name} (${exchange.type})`);
      });
    }
    await onChannel(model, (channel) => declareQueue(channel, dlq)).catch((err: unknown) => {
      throw setupError(
        err,
        `declaring ${dlq.name} (${queueMode}) bound to ${dlq.bindings[0]?.exchange}`,
        queueMode,
      );
    });
    const legacy = await onChannel(model, (channel) => channel.checkExchange(legacyControlExchange)).then(
      () => true,
      () => false,
    );
    if (legacy && options.deleteLegacy) {
      await onChannel(model, (channel) => channel.deleteExchange(legacyControlExchange)).catch(
        (err: unknown) => {
          throw setupError(err, `deleting the legacy exchange ${legacyControlExchange}`);
        },
      );
    }
    return {
      exchanges: sharedExchanges.map((e) => ({ name: e.name, type: e.type })),
      queue: dlq.name,
      queueType: queueMode,
      legacyControl: legacy ? (options.deleteLegacy ? 'deleted' : 'present') : 'absent',
    };
  } finally {
    await model.close().catch(() => {
      // Closed by the broker already (its error is what the caller gets).
    });
  }
}

/**
 * Checks passively that the shared topology is there (a passive declare needs no permission),
 * each on a channel of its own since a missing one closes the channel with 404. Missing is
 * an error that says to run `agentbridge broker setup`, retryable: the operator can fix it.
 */
export async function checkSharedTopology(model: ChannelModel): Promise<void> {
  const missing: string[] = [];
  for (const exchange of sharedExchanges) {
    await onChannel(model, (channel) => channel.checkExchange(exchange.name)).catch((err: unknown) => {
      if ((err as { code?: number }).code !== 404) throw err;
      missing.push(`exchange ${exchange.name}`);
    });
  }
  await onChannel(model, (channel) => channel.checkQueue(dlqSpec.name)).catch((err: unknown) => {
    if ((err as { code?: number }).code !== 404) throw err;
    missing.push(`queue ${dlqSpec.name}`);
  });
  if (missing.length > 0) {
    throw new BridgeError(
      ErrorCode.brokerNotSetUp,
      `the broker lacks the shared topology (${missing.join(', ')}): run \`agentbridge broker setup\` once as ` +
        'the broker operator (a login that may configure bridge.*), then start the gateway again',
      { retryable: true },
    );
  }
}

/** Connects as `options` says and checks the shared topology (`agentbridge doctor`). */
export async function probeSharedTopology(options: OperatorConnectOptions): Promise<void> {
  const model = await connectOperator(options, 'agentbridge doctor');
  try {
    await checkSharedTopology(model);
  } finally {
    await model.close().catch(() => {});
  }
}

/** An operator's connection, named for the broker's connection list. */
async function connectOperator(options: OperatorConnectOptions, name: string): Promise<ChannelModel> {
  const model = await amqp.connect(options.uri, {
    ...readBrokerTls(options.uri, options.tls),
    timeout: options.connectTimeoutMs ?? 10_000,
    clientProperties: { connection_name: name },
  });
  model.on('error', () => {
    // The failing operation rejects with the same error; nothing more to tell.
  });
  return model;
}

/** Runs `fn` on a fresh channel, closed afterwards (a failed operation has closed it already). */
async function onChannel<T>(model: ChannelModel, fn: (channel: Channel) => Promise<T>): Promise<T> {
  const channel = await model.createChannel();
  channel.on('error', () => {
    // The operation's promise rejects with this error; the caller handles it there.
  });
  try {
    return await fn(channel);
  } finally {
    await channel.close().catch(() => {
      // Already closed by the broker's error.
    });
  }
}

function setupError(err: unknown, what: string, declaredAs?: QueueMode): BridgeError {
  const code = (err as { code?: number }).code;
  const message = (err as Error).message;
  if (code === 406 && /inequivalent arg/.test(message)) {
    return new BridgeError(
      ErrorCode.brokerNotSetUp,
      `agentbridge broker setup failed ${what}: ${describeQueueMismatch(message, declaredAs)}`,
      { cause: err },
    );
  }
  const hint =
    code === 406
      ? '; it exists with other settings (another release or application made it): move what it holds and ' +
        'delete it, or give this deployment its own vhost'
      : code === 403
        ? '; this login may not configure bridge.* resources: run setup with the operator (administrator) login'
        : '';
  return new BridgeError(
    ErrorCode.brokerNotSetUp,
    `agentbridge broker setup failed ${what}: ${message}${hint}`,
    {
      cause: err,
    },
  );
}
