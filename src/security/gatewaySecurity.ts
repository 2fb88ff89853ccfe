import type { Config } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { Logger } from '../log/logger.js';
import { addSealingKey, type GatewayKeys, initKeys, loadKeys } from './keys.js';
import { createNoSealer, createSealer, type Sealer } from './messageSealing.js';
import { createNoSigner, createSigner, type Signer } from './messageSigning.js';
import { SealingKeyring } from './SealingKeyring.js';
import { TrustStore } from './TrustStore.js';

/** How a federated gateway signs and seals what it publishes, and checks and opens what comes. */
export interface GatewaySecurity {
  signer: Signer;
  sealer: Sealer;
}

/**
 * A federated gateway's signer and sealer: its keys (created on first federated start, like an SSH host key,
 * with a loud line saying how peers trust them; a sealing key added to a home made before it) and
 * the trust store of its peers' keys.
 */
export function createGatewaySecurity(
  config: Pick<Config, 'hostId' | 'home' | 'security'>,
  logger: Logger,
): GatewaySecurity {
  if (config.security.signing === 'off') {
    logger.warn(
      'security.signing is off: messages are neither signed nor verified (invariant 6 does not hold), nor sealed',
    );
    return { signer: createNoSigner(config.hostId), sealer: createNoSealer() };
  }
  let keys: GatewayKeys;
  try {
    keys = loadKeys(config.home);
  } catch (err) {
    if (!(err instanceof BridgeError) || err.code !== ErrorCode.keyMissing) throw err;
    keys = initKeys(config.home);
    logger.warn(
      { publicKey: keys.trustString, path: keys.privateKeyPath },
      `created this gateway's signing and sealing keys; on every peer run: agentbridge trust add ${config.hostId} ${keys.trustString}`,
    );
  }
  if (!keys.sealing) {
    // A home from before sealing (issue 34): its signing key stays, a sealing key is added.
    keys = addSealingKey(config.home);
    logger.warn(
      { publicKey: keys.trustString },
      `created this gateway's sealing key beside its signing key; on every peer run again: agentbridge trust add ${config.hostId} ${keys.trustString}`,
    );
  }
  const trust = new TrustStore(config.home, {
    onError: (err) =>
      logger.error({ err }, 'the trust store cannot be read; trusting no peer until it is fixed'),
  });
  const sealing = keys.sealing;
  if (!sealing) throw new Error('a sealing key was added but does not load');
  const required = config.security.encryption === 'required';
  if (!required) {
    logger.warn(
      'security.encryption is off: message text is published unsealed, readable to the broker and its logins',
    );
  }
  return {
    signer: createSigner({
      host: config.hostId,
      privateKey: keys.privateKey,
      publicKey: keys.publicKeyString,
      trust,
    }),
    sealer: createSealer({
      host: config.hostId,
      keys: new SealingKeyring(config.home, sealing, {
        onError: (err) =>
          logger.error({ err }, 'the sealing keys changed and do not load; keeping the ones loaded before'),
      }),
      trust,
      required,
    }),
  };
}
