import type { Config } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { Logger } from '../log/logger.js';
import { type GatewayKeys, initKeys, loadKeys } from './keys.js';
import { createNoSigner, createSigner, type Signer } from './messageSigning.js';
import { TrustStore } from './TrustStore.js';

/**
 * A federated gateway's signer: its key (created on first federated start, like an SSH host key,
 * with a loud line saying how peers trust it) and the trust store of its peers' keys.
 */
export function createGatewaySigner(
  config: Pick<Config, 'hostId' | 'home' | 'security'>,
  logger: Logger,
): Signer {
  if (config.security.signing === 'off') {
    logger.warn(
      'security.signing is off: messages are neither signed nor verified (invariant 6 does not hold)',
    );
    return createNoSigner(config.hostId);
  }
  let keys: GatewayKeys;
  try {
    keys = loadKeys(config.home);
  } catch (err) {
    if (!(err instanceof BridgeError) || err.code !== ErrorCode.keyMissing) throw err;
    keys = initKeys(config.home);
    logger.warn(
      { publicKey: keys.publicKeyString, path: keys.privateKeyPath },
      `created this gateway's signing key; on every peer run: agentbridge trust add ${config.hostId} ${keys.publicKeyString}`,
    );
  }
  const trust = new TrustStore(config.home, {
    onError: (err) =>
      logger.error({ err }, 'the trust store cannot be read; trusting no peer until it is fixed'),
  });
  return createSigner({
    host: config.hostId,
    privateKey: keys.privateKey,
    publicKey: keys.publicKeyString,
    trust,
  });
}
