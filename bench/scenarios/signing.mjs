import { generateKeyPairSync } from 'node:crypto';
import { newPrivateKey, publicKeyString, sealingKeyId, sealingKeyString } from '#bridge/security/publicKey';
import { open, SealingSessions, seal } from '#bridge/security/sealing';
import { sign, verify } from '#bridge/security/signature';
import { wireSizedBody } from '../lib/floors.mjs';
import { measure, round } from '../lib/measure.mjs';
import { crosshostScenarios } from './crosshost.mjs';

/**
 * (d) The cost of signing (invariant 6): cross-host scenarios run with `security.signing` =
 * `required` (the default: A signs every message it publishes, B verifies it against its trust
 * store) as the gateway figure, beside the very same scenario with signing `off` on both
 * gateways as the baseline, so the ratio is signing-on msgs/s ÷ signing-off msgs/s. Sealing is
 * off on both sides (signing off turns it off), so the pair differs in signing alone. Same
 * message count, concurrency and text size; the runner writes each side's config (`config`,
 * merged over BENCH_GATEWAY_CONFIG). Both sides make the gateways trust each other's keys; only
 * the setting differs.
 */
export const signingModes = {
  on: { security: { signing: 'required', encryption: 'off' } },
  off: { security: { signing: 'off', encryption: 'off' } },
};

/**
 * (d') The cost of sealing (issue 34): the same cross-host scenarios with `security.encryption`
 * = `required` (the default: A seals each message's text to B, B opens it) beside
 * `encryption: off` on both, signing on in both.
 */
export const sealingModes = {
  on: { security: { signing: 'required', encryption: 'required' } },
  off: { security: { signing: 'required', encryption: 'off' } },
};

/** The cross-host scenarios compared with signing on and off: admin sockets, then in process. */
export function signingScenarios(options) {
  return comparedScenarios(options, {
    id: 'signing',
    modes: signingModes,
    label: 'signing on',
    measures: 'security.signing = required on both gateways (A signs each message, B verifies it)',
    baseline: 'signing off',
    baselineMeasures: 'security.signing = off on both gateways (nothing signed, nothing verified)',
  });
}

/** The cross-host scenarios compared with sealing on and off (signing on in both). */
export function sealingScenarios(options) {
  return comparedScenarios(options, {
    id: 'sealing',
    modes: sealingModes,
    label: 'sealing on',
    measures:
      'security.encryption = required on both gateways (A seals each text to B: AES-256-GCM, X25519 + HKDF; B opens it), signing on',
    baseline: 'sealing off',
    baselineMeasures: 'security.encryption = off on both gateways (text in clear), signing on',
  });
}

/**
 * The admin-socket and in-process cross-host scenarios with one security setting on (the
 * gateway figure) and off (the baseline, run just before it): same count, concurrency, text size.
 */
function comparedScenarios({ count, concurrency, drainWaitMs }, compared) {
  const crosshost = new Map(
    crosshostScenarios({ count, concurrency, drainWaitMs }).map((scenario) => [scenario.name, scenario]),
  );
  return ['admin', 'inproc'].map((via) => {
    // crosshostScenarios has both of these.
    const scenario = /** @type {ReturnType<typeof crosshostScenarios>[number]} */ (
      crosshost.get(`crosshost-${via}`)
    );
    return {
      ...scenario,
      name: `${compared.id}-${via}`,
      label: scenario.label.replace(/^crosshost: /, `${compared.label}: `),
      measures: `${scenario.measures}; ${compared.measures}`,
      config: compared.modes.on,
      baselines: [
        {
          id: `${compared.id}-off`,
          label: compared.baseline,
          measures:
            'the same cross-host scenario with the same message count, concurrency and text size, run just before ' +
            `it with ${compared.baselineMeasures}`,
          config: compared.modes.off,
          open: scenario.open,
        },
      ],
    };
  });
}

/**
 * The per-message primitives: src/security/signature.ts `sign` and `verify` (node:crypto's
 * native Ed25519, base64url signature, cached public key) on a real wire envelope of `bytes`
 * bytes, one at a time through `measure`. Returns one row per primitive.
 */
export async function signingPrimitives({ count, warmup, bytes = 600 }) {
  const envelope = envelopeOfSize(bytes);
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const trusted = [publicKeyString(publicKey)];
  const signature = sign(envelope, privateKey);
  const primitives = [
    {
      id: 'sign',
      label: 'Ed25519 sign (node:crypto, signature.ts sign)',
      op: () => {
        sign(envelope, privateKey);
      },
    },
    {
      id: 'verify',
      label: 'Ed25519 verify (node:crypto, signature.ts verify)',
      op: () => {
        if (!verify(envelope, signature, trusted)) throw new Error('a valid signature did not verify');
      },
    },
    ...sealingPrimitives(envelope),
  ];
  const rows = [];
  for (const { id, label, op } of primitives) {
    const result = await measure({ count, concurrency: 1, warmup, op });
    rows.push({
      id,
      label,
      bytes: envelope.length,
      usPerOp: round((result.seconds * 1e6) / count, 1),
      result,
    });
  }
  return rows;
}

/**
 * Sealing one message's content to one host and opening it there, as a gateway does: within a
 * session (`SealingSessions`: the key agreement kept between messages), so what is measured is
 * the content key, the nonces and the two AES-256-GCM passes of each message.
 */
function sealingPrimitives(content) {
  const privateKey = newPrivateKey('x25519');
  const key = sealingKeyString(privateKey);
  const keys = {
    current: { keyId: sealingKeyId(key), privateKey, publicKeyString: key, path: '' },
    byId: new Map([
      [sealingKeyId(key), { keyId: sealingKeyId(key), privateKey, publicKeyString: key, path: '' }],
    ]),
  };
  const aad = Buffer.from('SEND|msg|host-a|host-b');
  const recipients = [{ host: 'host-b', key }];
  const sending = new SealingSessions();
  const opening = new SealingSessions();
  const sealed = seal(content, recipients, aad, sending);
  return [
    {
      id: 'seal',
      label: 'seal to one host (sealing.ts seal, in a session)',
      op: () => {
        seal(content, recipients, aad, sending);
      },
    },
    {
      id: 'open',
      label: 'open on that host (sealing.ts open, in a session)',
      op: () => {
        if (!open(sealed, 'host-b', keys, aad, opening).ok) throw new Error('a sealed message did not open');
      },
    },
  ];
}

/** A real encoded SEND envelope of exactly `bytes` bytes (its text padded or trimmed to fit). */
function envelopeOfSize(bytes) {
  const probeText = 256;
  const probe = wireSizedBody(probeText, 60_000);
  const envelope = wireSizedBody(probeText + bytes - probe.length, 60_000);
  if (envelope.length !== bytes) throw new Error(`wanted a ${bytes}-byte envelope, built ${envelope.length}`);
  return envelope;
}
