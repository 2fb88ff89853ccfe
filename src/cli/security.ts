import { loadConfig } from '../config/loadConfig.js';
import type { Config } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import {
  type GatewayKeys,
  initKeys,
  loadKeys,
  retireSealingKeys,
  rotateSealingKey,
} from '../security/keys.js';
import { addTrust, listTrust, removeTrust, trustFilePath } from '../security/TrustStore.js';
import { presenceTtlMs } from '../wire/presence.js';
import type { CliValues } from './cliOptions.js';
import { printResult } from './output.js';

// `agentbridge keys` and `agentbridge trust` work on the files in BRIDGE_HOME; no running gateway needed.

function configOf(values: CliValues): Pick<Config, 'home' | 'hostId' | 'broker'> {
  return loadConfig({ file: values.config }).config;
}

function keysView(hostId: string, keys: GatewayKeys) {
  return {
    host: hostId,
    /** What a peer's `agentbridge trust add` takes: the signing key, then the sealing key. */
    publicKey: keys.trustString,
    signingKey: keys.publicKeyString,
    sealingKey: keys.sealing?.current.publicKeyString ?? null,
    sealingKeyId: keys.sealing?.current.keyId ?? null,
    privateKeyPath: keys.privateKeyPath,
    publicKeyPath: keys.publicKeyPath,
  };
}

export function runKeys(values: CliValues, rest: string[]): number {
  const [sub, ...others] = rest;
  // `keys retire` takes the id of the key to retire; the others take nothing more.
  const [id, ...extra] = sub === 'retire' ? others : [undefined, ...others];
  if (extra.length > 0)
    throw new BridgeError(ErrorCode.badRequest, `unexpected "${extra.join(' ')}" after keys ${sub}`);
  const { home, hostId, broker } = configOf(values);
  switch (sub) {
    case 'init': {
      const keys = initKeys(home, { force: values.force });
      const view = keysView(hostId, keys);
      return printResult(
        values,
        view,
        () =>
          (keys.created === 'both'
            ? `created the signing and sealing keys of gateway ${hostId}\n` +
              `private key: ${view.privateKeyPath} (mode 0600: keep it secret)\n`
            : `gateway ${hostId} keeps its signing key and has a sealing key now (peers need it to seal messages to it)\n`) +
          `public keys: ${view.publicKey}\n` +
          `On every peer gateway, run:  agentbridge trust add ${hostId} ${view.publicKey}`,
      );
    }
    case 'show': {
      const keys = loadKeys(home);
      const view = keysView(hostId, keys);
      return printResult(
        values,
        view,
        () =>
          `host:        ${hostId}\npublic keys: ${view.publicKey}\n` +
          (keys.sealing
            ? ''
            : 'no sealing key yet: `agentbridge keys init` (or the next federated start) makes one\n') +
          `Peers trust it with:  agentbridge trust add ${hostId} ${view.publicKey}`,
      );
    }
    case 'rotate': {
      const { keys, previous } = rotateSealingKey(home);
      const view = { ...keysView(hostId, keys), previousSealingKeyId: previous };
      return printResult(
        values,
        view,
        () =>
          `sealing key ${view.sealingKeyId} is current; ${previous} is kept to open what was sealed to it\n` +
          `A running gateway opens with both at once and announces the new key in its next PRESENCE: peers that\n` +
          `trust this host's signing key seal to it from then on (no trust add needed; new peers: ${view.publicKey}).\n` +
          `Once nothing sealed to ${previous} is waiting anywhere: agentbridge keys retire ${previous}`,
      );
    }
    case 'retire': {
      const result = retireSealingKeys(home, id, {
        overlapMs: presenceTtlMs(broker),
        force: values.force ?? false,
      });
      return printResult(
        values,
        { host: hostId, ...result },
        () =>
          (result.retired.length === 0
            ? 'no sealing key to retire: only the current one is kept\n'
            : `retired sealing key(s) ${result.retired.join(', ')}: what is still sealed to them no longer opens here\n`) +
          `current: ${result.current}`,
      );
    }
    default:
      throw new BridgeError(
        ErrorCode.badRequest,
        'keys needs a subcommand: agentbridge keys init [--force] | show | rotate | retire [KEY_ID] [--force]',
      );
  }
}

export function runTrust(values: CliValues, rest: string[]): number {
  const [sub, host, pubkey, ...extra] = rest;
  if (extra.length > 0)
    throw new BridgeError(ErrorCode.badRequest, `unexpected "${extra.join(' ')}" after trust ${sub}`);
  const { home } = configOf(values);
  switch (sub) {
    case 'add': {
      if (!host || !pubkey) {
        throw new BridgeError(
          ErrorCode.badRequest,
          'trust add needs HOST and its keys: agentbridge trust add HOST ed25519:…,x25519:… (what `agentbridge keys show` prints on HOST)',
        );
      }
      const { added, entry } = addTrust(home, host, pubkey);
      return printResult(values, { added, ...entry }, () =>
        added
          ? `trusting ${entry.host} with ${entry.keys.length} key${entry.keys.length > 1 ? 's' : ''}` +
            (entry.keys.length > 1
              ? '; remove the old one with `agentbridge trust remove HOST OLDKEY` once the rotation is done'
              : '')
          : `${entry.host} already has that key; nothing changed`,
      );
    }
    case 'remove': {
      if (!host) {
        throw new BridgeError(ErrorCode.badRequest, 'trust remove needs HOST (and optionally one PUBKEY)');
      }
      const { removed, entry } = removeTrust(home, host, pubkey);
      if (removed.length === 0) {
        throw new BridgeError(
          ErrorCode.badRequest,
          pubkey === undefined
            ? `host ${entry.host} is not in the trust store ${trustFilePath(home)}; see \`agentbridge trust list\``
            : `host ${entry.host} has no such key in the trust store; see \`agentbridge trust list\``,
        );
      }
      return printResult(values, { removed, ...entry }, () =>
        entry.keys.length === 0
          ? `no longer trusting ${entry.host}: its messages will be refused`
          : `removed ${removed.length} key of ${entry.host}; ${entry.keys.length} left`,
      );
    }
    case 'list': {
      if (host) throw new BridgeError(ErrorCode.badRequest, `unexpected "${host}" after trust list`);
      const hosts = listTrust(home);
      return printResult(values, { hosts }, () =>
        hosts.length === 0
          ? 'no peers trusted yet; add one with `agentbridge trust add HOST PUBKEY`'
          : hosts.flatMap((h) => h.keys.map((k) => `${h.host}\t${k}`)).join('\n'),
      );
    }
    default:
      throw new BridgeError(
        ErrorCode.badRequest,
        'trust needs a subcommand: agentbridge trust add HOST PUBKEY | remove HOST [PUBKEY] | list',
      );
  }
}
