import { randomUUID, verify } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/loadConfig.js';
import { initKeys, type SealingKeys } from '../../src/security/keys.js';
import { createSealer } from '../../src/security/messageSealing.js';
import { createNoSigner, createSigner } from '../../src/security/messageSigning.js';
import { newPrivateKey, sealingKeyString } from '../../src/security/publicKey.js';
import { addTrust, TrustStore } from '../../src/security/TrustStore.js';
import {
  type Admission,
  type AdmissionLimits,
  type AdmissionTarget,
  admitInbound,
} from '../../src/wire/admitInbound.js';
import { DeadLetterReason } from '../../src/wire/deadLetterReason.js';
import type { Envelope } from '../../src/wire/envelope.js';
import { gatewayAddress } from '../../src/wire/gatewayAddress.js';
import { judgeSender } from '../../src/wire/judgeSender.js';
import type { Sealed } from '../../src/wire/sealed.js';
import {
  type Expectation,
  evil,
  expectationOf,
  type FuzzContext,
  type Input,
  materialize,
  peer,
  recipesArb,
  sender,
  signedHeaders,
  type Target,
} from '../support/receiveFuzz.js';
import { sendEnvelope } from '../support/sendEnvelope.js';
import { sealedBytes } from '../support/signedPeer.js';

/**
 * Issue 4's hostile-input fuzz over the pure admission (`admitInbound`, then the roster check
 * `judgeSender`), without a gateway or a broker: the oracle of test/support/receiveFuzz.ts says
 * what should be delivered, and the verdict must agree, for thousands of inputs. Executing the
 * verdict (the dead letter on the broker, the ack) is receiveFuzz.int.test.ts's part.
 */

const numRuns = Number(process.env.FUZZ_RUNS ?? 3_000);
const seed = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);

const home = mkdtempSync(join(tmpdir(), 'bridge-admit-'));
const hostId = 'admit-host';
const keys = initKeys(home);
addTrust(home, peer.host, peer.keys.publicKeyString);
const signer = createSigner({
  host: hostId,
  privateKey: keys.privateKey,
  publicKey: keys.publicKeyString,
  trust: new TrustStore(home),
});
const sealer = createSealer({
  host: hostId,
  keys: { current: keys.sealing as SealingKeys },
  trust: new TrustStore(home),
  required: true,
});
/** Opens what was sealed to this host (the cases here send their text unsealed, or seal it). */
const open = (sealed: Sealed, aad: Buffer) => sealer.open(sealed, aad);
const config = loadConfig({ env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: hostId } }).config;
const limits: AdmissionLimits = {
  signingRequired: true,
  sealingRequired: false,
  maxWireBytes: config.limits.maxTextBytes + 16 * 1024,
  maxTextBytes: config.limits.maxTextBytes,
  maxClockSkewMs: config.security.maxClockSkewMs,
  ttlMs: config.delivery.ttlMs,
};
const graceMs = config.security.unknownSenderGraceMs;

const recipients: Record<Target, { gid: string; name: string; groups: string[] }> = {
  worker: { gid: randomUUID(), name: 'worker', groups: [] },
  main: { gid: randomUUID(), name: 'main', groups: [] },
};
const context: FuzzContext = {
  hostId,
  recipientOf: (target) => recipients[target],
  ttlMs: limits.ttlMs,
  maxClockSkewMs: limits.maxClockSkewMs,
  maxTextBytes: limits.maxTextBytes,
  maxWireBytes: limits.maxWireBytes,
  // node:crypto directly, not the gateway's signature module: @noble/ed25519 (the int test's
  // independent verifier) takes ~7 ms a check, too slow for thousands of runs.
  verifiesAsPeer: (signature, content) => verify(null, content, peer.keys.publicKey, signature),
};

/** The roster as the int test's gateway sees it: the peer announced `sender`; this host has the two. */
function livesOn(gid: string, host: string): boolean {
  if (gid === gatewayAddress(host).gid) return true;
  if (host === hostId) return gid === recipients.worker.gid || gid === recipients.main.gid;
  return host === peer.host && gid === sender.gid;
}

type Outcome = Exclude<Admission, { verdict: 'admitted' }> | { verdict: 'deliver'; envelope: Envelope };

/** What the federation would do with `input` at `now`, the unknown-sender grace run out if it starts. */
function decide(input: Input, now: number): Outcome {
  const inbox: AdmissionTarget = { kind: 'inbox', ...recipients[input.target] };
  const signature = signer.verify(input.content, input.headers);
  const admission = admitInbound(
    { content: input.content, verify: () => signature, open, target: inbox, now },
    limits,
  );
  if (admission.verdict !== 'admitted') return admission;
  const check = {
    envelope: admission.envelope,
    signer: admission.signer,
    signingRequired: true,
    livesOn,
    graceMs,
  };
  let judgement = judgeSender({ ...check, now, graceUntil: undefined });
  if (judgement.verdict === 'wait') {
    const until = judgement.until;
    expect(until, 'the grace ends after it starts').toBeGreaterThan(now);
    judgement = judgeSender({ ...check, now: until, graceUntil: until });
    expect(judgement.verdict, 'the grace ends, one way or the other').not.toBe('wait');
  }
  if (judgement.verdict === 'refused')
    return { verdict: 'refused', reason: judgement.reason, detail: judgement.detail };
  return { verdict: 'deliver', envelope: admission.envelope };
}

const reasons = new Set<string>(Object.values(DeadLetterReason));

afterAll(() => {
  for (const dir of [home, peer.home, evil.home]) rmSync(dir, { recursive: true, force: true });
});

describe('admitInbound: property-based fuzz of the admission (hostile input)', () => {
  it(`never throws, admits exactly what the oracle admits, refuses the rest with a reason (${numRuns} runs, FUZZ_SEED to replay)`, () => {
    const started = Date.now();
    const stats = { runs: 0, inputs: 0, delivered: 0, refused: 0, byReason: {} as Record<string, number> };
    const property = fc.property(recipesArb, (recipes) => {
      const now = Date.now();
      const inputs = recipes.map((recipe) => materialize(recipe, context, now));
      const expectations = inputs.map((input) => expectationOf(input, context, now));
      fc.pre(expectations.every((e) => e !== 'ambiguous'));
      stats.runs++;
      inputs.forEach((input, i) => {
        stats.inputs++;
        const expectation = expectations[i] as Exclude<Expectation, 'ambiguous'>;
        const outcome = decide(input, now);
        const shown = { content: input.content.toString('utf8').slice(0, 300), headers: input.headers };
        if (expectation.deliver) {
          stats.delivered++;
          expect(outcome, `refused a valid message ${JSON.stringify(shown)}`).toEqual({
            verdict: 'deliver',
            envelope: expectation.envelope,
          });
          return;
        }
        stats.refused++;
        if (expectation.why === 'its own broadcast') {
          expect(outcome.verdict, 'its own broadcast is acked and dropped').toBe('own-copy');
          return;
        }
        expect(outcome.verdict, `${expectation.why}: ${JSON.stringify(shown)}`).toBe('refused');
        if (outcome.verdict !== 'refused') return;
        stats.byReason[outcome.reason] = (stats.byReason[outcome.reason] ?? 0) + 1;
        expect(reasons.has(outcome.reason), `a dead-letter reason: ${outcome.reason}`).toBe(true);
        expect(outcome.detail.length, 'a refusal says why').toBeGreaterThan(0);
        expect(outcome.answerSpawn, 'an inbox answers no spawn').toBeUndefined();
      });
    });
    try {
      fc.assert(property, { numRuns, seed });
    } catch (err) {
      const cause = (err as Error).cause;
      const why = cause instanceof Error ? `\n${cause.message}` : '';
      throw new Error(
        `admission fuzz failed; replay with FUZZ_SEED=${seed}\n${(err as Error).message}${why}`,
        {
          cause: err,
        },
      );
    }
    expect(stats.delivered, 'the generators reach delivery').toBeGreaterThan(numRuns / 20);
    expect(stats.refused, 'the generators reach refusals').toBeGreaterThan(numRuns / 8);
    console.info(`admission fuzz: seed ${seed}, ${JSON.stringify(stats)}, ${Date.now() - started} ms`);
  }, 120_000);
});

/** A valid envelope from the announced sender to the worker, signed by the peer, `now`. */
function envelopeOf(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    ...sendEnvelope({ ...sender, host: peer.host, kind: 'main' }, recipients.worker.gid),
    ...overrides,
  };
}

function admit(
  envelope: unknown,
  target: AdmissionTarget = { kind: 'inbox', ...recipients.worker },
  options: { by?: typeof peer; refusesReply?: (envelope: Envelope) => string | undefined } = {},
): Admission {
  const content = Buffer.from(JSON.stringify(envelope));
  const signature = signer.verify(content, signedHeaders(content, options.by ?? peer));
  return admitInbound(
    { content, verify: () => signature, open, target, now: Date.now(), refusesReply: options.refusesReply },
    limits,
  );
}

const control: AdmissionTarget = { kind: 'control', host: hostId };
const spawnFrom = (host: string, to = hostId) =>
  envelopeOf({
    kind: 'SPAWN',
    to,
    from: { gid: sender.gid, name: sender.name, host, kind: 'main' },
    spawn: { requestId: randomUUID() },
  });

describe('admitInbound: the cases the fuzz reaches rarely', () => {
  it('acks a copy of the recipient’s own broadcast instead of dead-lettering it', () => {
    const own = envelopeOf({
      kind: 'BROADCAST',
      to: 'broadcast.all',
      from: { gid: recipients.worker.gid, name: 'worker', host: peer.host, kind: 'worker' },
    });
    expect(admit(own)).toEqual({ verdict: 'own-copy' });
  });

  it('answers a SPAWN refused for its content only when its signer sent it, to this host', () => {
    // No profile: the spawn header parses, the envelope does not.
    const answered = admit(spawnFrom(peer.host), control);
    expect(answered).toMatchObject({ verdict: 'refused', reason: 'rejected' });
    expect(answered.verdict === 'refused' && answered.answerSpawn?.request.from.host).toBe(peer.host);
    expect(answered.verdict === 'refused' && answered.answerSpawn?.why).toMatch(/profile/);
    const forged = admit(spawnFrom(evil.host), control);
    expect(forged).toMatchObject({ verdict: 'refused', reason: 'rejected' });
    expect(forged.verdict === 'refused' && forged.answerSpawn).toBeUndefined();
    const elsewhere = admit(spawnFrom(peer.host, 'another-host'), control);
    expect(elsewhere.verdict === 'refused' && elsewhere.answerSpawn).toBeUndefined();
    const inInbox = admit(spawnFrom(peer.host), { kind: 'inbox', ...recipients.worker });
    expect(inInbox.verdict === 'refused' && inInbox.answerSpawn).toBeUndefined();
  });

  it('takes control kinds for this host in the control queue, and nothing else', () => {
    const stop = envelopeOf({
      kind: 'STOP',
      to: hostId,
      stop: { requestId: randomUUID(), gid: randomUUID() },
    });
    expect(admit(stop, control)).toMatchObject({ verdict: 'admitted' });
    expect(admit({ ...stop, to: 'another-host' }, control)).toMatchObject({
      verdict: 'refused',
      reason: 'rejected',
      detail: `addressed to host another-host, not to ${hostId}`,
    });
    expect(admit(envelopeOf({ to: hostId }), control)).toMatchObject({
      verdict: 'refused',
      detail: 'a SEND does not belong in a control queue',
    });
  });

  it('asks the reply rule of an inbox, and refuses with its reason', () => {
    const reply = envelopeOf({ kind: 'REPLY', inReplyTo: randomUUID() });
    const refusesReply = () => 'answers a message its sender never got';
    expect(admit(reply, undefined, { refusesReply })).toMatchObject({
      verdict: 'refused',
      reason: 'rejected',
      detail: 'answers a message its sender never got',
    });
    expect(admit(reply, undefined, { refusesReply: () => undefined })).toMatchObject({ verdict: 'admitted' });
  });

  it('refuses a broadcast for a group the recipient is not in, and takes one for its group', () => {
    const inbox: AdmissionTarget = { kind: 'inbox', ...recipients.worker, groups: ['ops'] };
    expect(admit(envelopeOf({ kind: 'BROADCAST', to: 'broadcast.dev' }), inbox)).toMatchObject({
      verdict: 'refused',
      detail: 'a broadcast for group dev, which worker is not in',
    });
    expect(admit(envelopeOf({ kind: 'BROADCAST', to: 'broadcast.ops' }), inbox)).toMatchObject({
      verdict: 'admitted',
    });
  });

  it('a SPAWN refused for its sealing (unsealed while required, or not opening here) is answered to its signer', () => {
    const request = spawnFrom(peer.host) as Envelope & { spawn: { requestId: string } };
    const spawn: Envelope = { ...request, spawn: { ...request.spawn, profile: 'worker' } };
    const admitBytes = (content: Buffer, sealingRequired: boolean) =>
      admitInbound(
        {
          content,
          verify: () => signer.verify(content, signedHeaders(content, peer)),
          open,
          target: control,
          now: Date.now(),
        },
        { ...limits, sealingRequired },
      );
    const unsealed = admitBytes(Buffer.from(JSON.stringify(spawn)), true);
    expect(unsealed).toMatchObject({ verdict: 'refused', reason: 'unsealed' });
    expect(unsealed.verdict === 'refused' && unsealed.answerSpawn?.why).toMatch(/send again/);
    const stranger = { host: hostId, key: sealingKeyString(newPrivateKey('x25519')) };
    const unopened = admitBytes(sealedBytes(spawn, [stranger]), true);
    expect(unopened).toMatchObject({ verdict: 'refused', reason: 'unknown-sealing-key' });
    expect(unopened.verdict === 'refused' && unopened.answerSpawn?.request.msgId).toBe(spawn.msgId);
    const mine = { host: hostId, key: (keys.sealing as SealingKeys).current.publicKeyString };
    expect(admitBytes(sealedBytes(spawn, [mine]), true)).toMatchObject({
      verdict: 'admitted',
      envelope: { text: spawn.text },
    });
  });

  it('regression: an expiresAt before Date’s range is refused, never thrown', () => {
    expect(admit(envelopeOf({ expiresAt: -8_640_000_000_000_001 })).verdict).toBe('refused');
  });

  it('with signing off, takes any sender on its word', () => {
    const content = Buffer.from(
      JSON.stringify(envelopeOf({ from: { ...sender, host: 'anyone', kind: 'main' } })),
    );
    const signature = createNoSigner(hostId).verify(content, {});
    const admission = admitInbound(
      {
        content,
        verify: () => signature,
        open,
        target: { kind: 'inbox', ...recipients.worker },
        now: Date.now(),
      },
      { ...limits, signingRequired: false },
    );
    expect(admission).toMatchObject({ verdict: 'admitted', signer: '' });
  });
});

describe('judgeSender: the roster check after admission', () => {
  const envelope = envelopeOf() as unknown as Envelope;
  const base = { envelope, signer: peer.host, signingRequired: true, graceMs: 100 };

  it('delivers a sender the roster places on the signing host', () => {
    expect(judgeSender({ ...base, livesOn: () => true, now: 1_000, graceUntil: undefined })).toEqual({
      verdict: 'deliver',
    });
  });

  it('waits out the grace for a sender the roster does not know yet, then refuses it', () => {
    const livesOn = () => false;
    expect(judgeSender({ ...base, livesOn, now: 1_000, graceUntil: undefined })).toEqual({
      verdict: 'wait',
      until: 1_100,
    });
    expect(judgeSender({ ...base, livesOn, now: 1_050, graceUntil: 1_100 })).toEqual({
      verdict: 'wait',
      until: 1_100,
    });
    expect(judgeSender({ ...base, livesOn, now: 1_100, graceUntil: 1_100 })).toEqual({
      verdict: 'refused',
      reason: 'unknown-sender',
      detail: `${sender.name} (${sender.gid}) is not in ${peer.host}'s roster`,
    });
  });

  it('asks no roster when signing is off', () => {
    const livesOn = () => {
      throw new Error('asked the roster');
    };
    expect(
      judgeSender({ ...base, signingRequired: false, livesOn, now: 1_000, graceUntil: undefined }),
    ).toEqual({
      verdict: 'deliver',
    });
  });
});
