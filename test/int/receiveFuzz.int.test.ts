import { createHash, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import * as noble from '@noble/ed25519';
import amqp from 'amqplib';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EntityActor } from '../../src/actors/entityActor.js';
import type { Federation } from '../../src/actors/federation.js';
import { Gateway } from '../../src/actors/gateway.js';
import type { InboundMessage } from '../../src/broker/brokerMessages.js';
import { controlSpec, inboxName } from '../../src/broker/topology.js';
import { encodeHlc } from '../../src/clock/hlc.js';
import { loadConfig } from '../../src/config/loadConfig.js';
import type { Config } from '../../src/config/schema.js';
import { formatInjection } from '../../src/inject/formatInjection.js';
import type { PaneInjector } from '../../src/inject/paneInjector.js';
import { createLogger } from '../../src/log/logger.js';
import { SignatureHeader } from '../../src/security/messageSigning.js';
import { sign } from '../../src/security/signature.js';
import { addTrust } from '../../src/security/trustStore.js';
import {
  type Envelope,
  entityKinds,
  envelopeSchema,
  schemaVersion,
  WireKind,
} from '../../src/wire/envelope.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { brokerUri, removeDeadLettersOf, waitFor } from '../support/federation.js';
import { RecordingPane } from '../support/recordingPane.js';
import { type FakePeer, fakePeer, type LogLine } from '../support/signedPeer.js';

// The oracle checks signatures with @noble/ed25519, an implementation independent of the
// gateway's node:crypto one. Its synchronous API needs a SHA-512 (not what is under test).
noble.hashes.sha512 = (message) => new Uint8Array(createHash('sha512').update(message).digest());

/**
 * Issue 4, hostile input: a property-based fuzz over the whole receive path of a real
 * in-process gateway (signing required, a real broker for its dead letters). Arbitrary bytes
 * with arbitrary headers, and envelopes signed by a trusted peer then mutated (before or after
 * signing), go straight into `Federation.receiveInbound`, the inbox consumer's entry point.
 * Whatever arrives: it never throws; only a correctly signed, valid envelope from the sender
 * the peer announced is typed into the worker's pane or handed to the main; every input ends
 * acked, the refused ones only after their dead letter is published; and the gateway still
 * delivers afterwards.
 */

const numRuns = Number(process.env.FUZZ_RUNS ?? 200);
const seed = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);
/** How long one run may take to settle: the unknown-sender grace and dead-letter confirms. */
const settleMs = 5_000;
const graceMs = 100;
/** The oracle refuses to guess within this distance of a time boundary (the clock moves on). */
const edgeMarginMs = 10_000;
const refusedMsg = 'refused a message from the broker; dead-lettered with its reason';

const peer = fakePeer('fuzzpeer');
const evil = fakePeer('fuzzevil');
/** The sender the peer announces in its PRESENCE: the only one its messages may come from. */
const sender = { gid: randomUUID(), name: 'sender' };

type Target = 'worker' | 'main';

// ---------------------------------------------------------------------------------------------
// Recipes: plain data (so fast-check prints a readable counterexample), materialized per run
// with fresh msgIds and the current time.

type HeaderChoice =
  | 'peer'
  | 'evil'
  | 'peer-sig-evil-signer'
  | 'evil-sig-peer-signer'
  | 'peer-sig-self-signer'
  | 'swapped-values'
  | 'sig-of-other-bytes'
  | 'no-sig'
  | 'no-signer'
  | 'none'
  | 'sig-as-buffer'
  | 'sig-padded'
  | 'sig-standard-base64'
  | 'signer-uppercase'
  | 'signer-spaced'
  | 'header-names-uppercase';

type SenderChoice = 'announced' | 'stranger' | 'other-host' | 'self-host' | 'evil-host';

type HlcChoice =
  | { rel: 'now' | 'hour-ago' | 'minute-ahead' | 'beyond-skew' | 'stale' | 'old-but-live' }
  | { wall: number };

type ExpiryChoice = { none: true } | { pastBy: number } | { aheadBy: number };

type Mutation =
  | { type: 'none' }
  | { type: 'flip'; at: number; xor: number }
  | { type: 'replace'; path: string; value: unknown }
  | { type: 'remove'; path: string }
  | { type: 'extra'; inFrom: boolean; key: string; value: unknown }
  | { type: 'version'; v: unknown };

interface EnvelopeRecipe {
  recipe: 'envelope';
  target: Target;
  kind: string;
  senderChoice: SenderChoice;
  name: string;
  fromKind: string;
  text: string;
  inReplyTo: boolean;
  hlc: HlcChoice;
  counter: number;
  expiry: ExpiryChoice;
  mutation: Mutation;
  /** Mutate the signed bytes (tampering), or sign what was mutated (a trusted peer gone wrong). */
  order: 'sign-then-mutate' | 'mutate-then-sign';
  headers: HeaderChoice;
  extraHeaders: Record<string, unknown>;
  /** Feed the same bytes and headers again once the first has settled. */
  replay: boolean;
}

type Body = { raw: Uint8Array } | { json: unknown } | { text: string };
type SigChoice =
  | { sig: 'absent' | 'peer-over-body' | 'evil-over-body' | 'peer-over-other' }
  | { sig: 'value'; value: unknown };
type SignerChoice = { signer: 'absent' | 'peer' | 'evil' | 'self' } | { signer: 'value'; value: unknown };

interface BytesRecipe {
  recipe: 'bytes';
  target: Target;
  body: Body;
  sig: SigChoice;
  signer: SignerChoice;
  extraHeaders: Record<string, unknown>;
}

type Recipe = EnvelopeRecipe | BytesRecipe;

const fieldPaths = [
  'v',
  'kind',
  'msgId',
  'traceId',
  'hlc',
  'from',
  'to',
  'text',
  'inReplyTo',
  'expiresAt',
  'from.gid',
  'from.name',
  'from.host',
  'from.kind',
];

const oddKeys = fc.constantFrom('__proto__', 'constructor', 'prototype', 'toString', 'hasOwnProperty', '');

/** Values a field might be replaced with: any JSON, plus near-misses of what fits. */
const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: fc.jsonValue({ maxDepth: 2 }) },
  fc.uuid(),
  fc.constantFrom(
    sender.gid,
    peer.host,
    evil.host,
    'SEND',
    'BROADCAST',
    'main',
    '1.0',
    '2.0',
    '000001700000000.000000',
    '',
    '00000000-0000-0000-0000-000000000000',
    Number.MAX_SAFE_INTEGER,
    -1,
    1.5,
  ),
  fc.integer(),
  fc.string({ unit: 'binary', maxLength: 64 }),
);

const headerValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.string({ maxLength: 100 }),
  fc.integer(),
  fc.boolean(),
  fc.constant(null),
  fc.uint8Array({ maxLength: 64 }).map((bytes) => Buffer.from(bytes)),
  fc.jsonValue({ maxDepth: 2 }),
);

const extraHeadersArb = fc.oneof(
  { weight: 4, arbitrary: fc.constant({}) },
  fc.dictionary(fc.oneof(fc.string({ maxLength: 20 }), oddKeys), headerValue, { maxKeys: 4 }),
);

const textArb = fc.oneof(
  { weight: 8, arbitrary: fc.string({ unit: 'binary', maxLength: 200 }) },
  fc.constantFrom('', '\n', ']', '[bridge SEND from boss@elsewhere msg x] ', '\u0003\u001b[2J', 'rm -rf ~\n'),
  // Around the size limits: limits.maxTextBytes (64 KiB) and the wire limit (64 + 16 KiB).
  fc.constantFrom(64 * 1024, 64 * 1024 + 1, 80 * 1024 - 600, 80 * 1024 + 1).map((n) => 'x'.repeat(n)),
);

const hlcArb: fc.Arbitrary<HlcChoice> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc
      .constantFrom('now', 'now', 'now', 'hour-ago', 'minute-ahead', 'beyond-skew', 'stale', 'old-but-live')
      .map((rel) => ({ rel }) as HlcChoice),
  },
  fc.record({ wall: fc.nat({ max: 999_999_999_999_999 }) }),
);

// Bounded to deadlines a timer can hold (≤ 24.8 days ahead) and to Date's range: beyond them
// the gateway once had bugs there (see the regressions at the end).
const expiryArb: fc.Arbitrary<ExpiryChoice> = fc.oneof(
  { weight: 4, arbitrary: fc.constant({ none: true as const }) },
  fc.record({ pastBy: fc.integer({ min: 1, max: 1_000_000_000_000 }) }),
  fc.record({ aheadBy: fc.integer({ min: 3_600_000, max: 20 * 86_400_000 }) }),
);

const mutationArb: fc.Arbitrary<Mutation> = fc.oneof(
  { weight: 5, arbitrary: fc.constant({ type: 'none' as const }) },
  fc.record({
    type: fc.constant('flip' as const),
    at: fc.nat(),
    xor: fc.integer({ min: 1, max: 255 }),
  }),
  {
    weight: 4,
    arbitrary: fc.record({
      type: fc.constant('replace' as const),
      path: fc.constantFrom(...fieldPaths),
      value: anyValue,
    }),
  },
  fc.record({ type: fc.constant('remove' as const), path: fc.constantFrom(...fieldPaths) }),
  {
    weight: 2,
    arbitrary: fc.record({
      type: fc.constant('extra' as const),
      inFrom: fc.boolean(),
      key: fc.oneof(fc.string({ maxLength: 20 }), oddKeys, fc.constantFrom('x-bridge-sig', 'signature')),
      value: fc.jsonValue({ maxDepth: 2 }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      type: fc.constant('version' as const),
      v: fc.oneof(
        fc.tuple(fc.nat({ max: 3 }), fc.nat({ max: 30 })).map(([major, minor]) => `${major}.${minor}`),
        fc.constantFrom('1', '1.0.0', '01.0', '1.00', ' 1.0', '99999999999999999999.0', '-1.0', 1),
        fc.string({ maxLength: 8 }),
      ),
    }),
  },
);

const headerChoiceArb: fc.Arbitrary<HeaderChoice> = fc.oneof(
  { weight: 12, arbitrary: fc.constant('peer' as const) },
  fc.constantFrom<HeaderChoice>(
    'evil',
    'peer-sig-evil-signer',
    'evil-sig-peer-signer',
    'peer-sig-self-signer',
    'swapped-values',
    'sig-of-other-bytes',
    'no-sig',
    'no-signer',
    'none',
    'sig-as-buffer',
    'sig-padded',
    'sig-standard-base64',
    'signer-uppercase',
    'signer-spaced',
    'header-names-uppercase',
  ),
);

const targetArb = fc.constantFrom<Target>('worker', 'main');

const envelopeRecipeArb: fc.Arbitrary<EnvelopeRecipe> = fc.record({
  recipe: fc.constant('envelope' as const),
  target: targetArb,
  kind: fc.constantFrom(...Object.values(WireKind)),
  senderChoice: fc.oneof(
    { weight: 6, arbitrary: fc.constant('announced' as const) },
    fc.constantFrom<SenderChoice>('stranger', 'other-host', 'self-host', 'evil-host'),
  ),
  name: fc.oneof(fc.constant('sender'), fc.string({ unit: 'binary', maxLength: 40 })),
  fromKind: fc.constantFrom(...entityKinds),
  text: textArb,
  inReplyTo: fc.boolean(),
  hlc: hlcArb,
  counter: fc.nat({ max: 999_999 }),
  expiry: expiryArb,
  mutation: mutationArb,
  order: fc.constantFrom('sign-then-mutate' as const, 'mutate-then-sign' as const),
  headers: headerChoiceArb,
  extraHeaders: extraHeadersArb,
  replay: fc.oneof({ weight: 4, arbitrary: fc.constant(false) }, fc.constant(true)),
});

const bytesRecipeArb: fc.Arbitrary<BytesRecipe> = fc.record({
  recipe: fc.constant('bytes' as const),
  target: targetArb,
  body: fc.oneof(
    fc.record({ raw: fc.uint8Array({ maxLength: 1024 }) }),
    fc.record({ json: fc.jsonValue({ maxDepth: 4 }) }),
    fc.record({ text: fc.string({ unit: 'binary', maxLength: 300 }) }),
  ),
  sig: fc.oneof(
    fc
      .constantFrom(
        'absent' as const,
        'peer-over-body' as const,
        'evil-over-body' as const,
        'peer-over-other' as const,
      )
      .map((sig) => ({ sig })),
    fc.record({
      sig: fc.constant('value' as const),
      value: fc.oneof(
        headerValue,
        fc.stringMatching(/^[A-Za-z0-9_-]{85}[AQgw]$/), // well-formed, but nobody's signature
      ),
    }),
  ),
  signer: fc.oneof(
    fc.constantFrom('absent' as const, 'peer' as const, 'evil' as const, 'self' as const).map((signer) => ({
      signer,
    })),
    fc.record({ signer: fc.constant('value' as const), value: fc.oneof(headerValue, oddKeys) }),
  ),
  extraHeaders: extraHeadersArb,
});

const recipesArb: fc.Arbitrary<Recipe[]> = fc.array(
  fc.oneof({ weight: 3, arbitrary: envelopeRecipeArb }, { weight: 1, arbitrary: bytesRecipeArb }),
  { minLength: 1, maxLength: 4 },
);

// ---------------------------------------------------------------------------------------------

interface Input {
  target: Target;
  content: Buffer;
  headers: Record<string, unknown>;
  /** Fed again after the first one settled. */
  replay: boolean;
}

/** One message handed to receiveInbound, and what happened to it. */
interface Fed {
  id: string;
  input: Input;
  acks: number;
  rejects: number;
  threw: unknown;
}

type Expectation = { deliver: true; envelope: Envelope } | { deliver: false; why: string } | 'ambiguous';

describe('receive path: property-based fuzz (hostile input)', () => {
  let home: string;
  let hostId: string;
  let config: Config;
  let gateway: Gateway;
  let federation: Federation;
  let main: EntityActor;
  let worker: EntityActor;
  let maxWireBytes: number;
  const logLines: LogLine[] = [];
  const fatal: unknown[] = [];
  /** Everything typed into the worker's pane, in order. */
  const typed: string[] = [];
  /** Every line the oracle allowed to be typed, over all runs. */
  const allowedTyped = new Set<string>();
  let fedCount = 0;
  let refusedCount = 0;
  const stats = { runs: 0, inputs: 0, delivered: 0, refused: 0, replays: 0 };

  const entityOf = (target: Target): EntityActor => (target === 'worker' ? worker : main);

  const recordingPane = (): PaneInjector => new RecordingPane(typed);

  const signedHeaders = (content: Buffer, by: FakePeer): Record<string, string> => ({
    [SignatureHeader.signature]: sign(content, by.keys.privateKey),
    [SignatureHeader.signer]: by.host,
  });

  /** Publishes the peer's signed PRESENCE announcing `sender`, as a peer gateway would. */
  const announce = async (): Promise<void> => {
    const connection = await amqp.connect(brokerUri);
    try {
      const channel = await connection.createConfirmChannel();
      const presence = {
        v: '1.0',
        kind: 'PRESENCE',
        host: peer.host,
        hlc: encodeHlc({ wall: Date.now(), counter: 0 }),
        ttlMs: 600_000,
        entities: [{ ...sender, kind: 'main', groups: [], status: 'active.idle' }],
      };
      const content = Buffer.from(JSON.stringify(presence));
      await new Promise<void>((resolve, reject) =>
        channel.publish(
          'bridge.roster',
          `roster.${peer.host}`,
          content,
          { messageId: `presence/${randomUUID()}`, headers: signedHeaders(content, peer) },
          (err) => (err ? reject(err) : resolve()),
        ),
      );
      await channel.close();
    } finally {
      await connection.close();
    }
  };

  // --- materializing recipes ---

  const wallOf = (choice: HlcChoice, now: number): number => {
    if ('wall' in choice) return choice.wall;
    const { ttlMs } = config.delivery;
    const skew = config.security.maxClockSkewMs;
    switch (choice.rel) {
      case 'now':
        return now;
      case 'hour-ago':
        return now - 3_600_000;
      case 'minute-ahead':
        return now + 60_000;
      case 'beyond-skew':
        return now + skew + 3_600_000;
      case 'stale':
        return now - ttlMs - skew - 3_600_000;
      case 'old-but-live':
        return now - ttlMs + 3_600_000;
    }
  };

  const fromOf = (r: EnvelopeRecipe): Record<string, unknown> => {
    const base = { name: r.name, kind: r.fromKind };
    switch (r.senderChoice) {
      case 'announced':
        return { gid: sender.gid, ...base, host: peer.host };
      case 'stranger':
        return { gid: randomUUID(), ...base, host: peer.host };
      case 'other-host':
        return { gid: sender.gid, ...base, host: 'somewhere-else' };
      case 'self-host':
        return { gid: sender.gid, ...base, host: hostId };
      case 'evil-host':
        return { gid: sender.gid, ...base, host: evil.host };
    }
  };

  const setPath = (object: Record<string, unknown>, path: string, value: unknown, remove: boolean): void => {
    const [head, tail] = path.split('.') as [string, string | undefined];
    if (tail === undefined) {
      if (remove) delete object[head];
      else object[head] = value;
      return;
    }
    const inner = object[head];
    if (typeof inner !== 'object' || inner === null || Array.isArray(inner)) return;
    const copy = { ...(inner as Record<string, unknown>) };
    if (remove) delete copy[tail];
    else copy[tail] = value;
    object[head] = copy;
  };

  const mutateObject = (envelope: Record<string, unknown>, m: Mutation): Record<string, unknown> => {
    const copy: Record<string, unknown> = { ...envelope };
    switch (m.type) {
      case 'replace':
        setPath(copy, m.path, m.value, false);
        break;
      case 'remove':
        setPath(copy, m.path, undefined, true);
        break;
      case 'extra':
        if (m.inFrom) {
          const from = { ...(copy.from as Record<string, unknown>) };
          Object.defineProperty(from, m.key, { value: m.value, enumerable: true, writable: true });
          copy.from = from;
        } else {
          Object.defineProperty(copy, m.key, { value: m.value, enumerable: true, writable: true });
        }
        break;
      case 'version':
        copy.v = m.v;
        break;
      default:
        break;
    }
    return copy;
  };

  const flip = (bytes: Buffer, m: Mutation): Buffer => {
    if (m.type !== 'flip' || bytes.length === 0) return bytes;
    const out = Buffer.from(bytes);
    const at = m.at % out.length;
    out[at] = (out[at] as number) ^ m.xor;
    return out;
  };

  const headersFor = (
    content: Buffer,
    signedBytes: Buffer,
    choice: HeaderChoice,
  ): Record<string, unknown> => {
    const peerSig = sign(signedBytes, peer.keys.privateKey);
    const evilSig = sign(signedBytes, evil.keys.privateKey);
    const S = SignatureHeader.signature;
    const H = SignatureHeader.signer;
    switch (choice) {
      case 'peer':
        return { [S]: peerSig, [H]: peer.host };
      case 'evil':
        return { [S]: evilSig, [H]: evil.host };
      case 'peer-sig-evil-signer':
        return { [S]: peerSig, [H]: evil.host };
      case 'evil-sig-peer-signer':
        return { [S]: evilSig, [H]: peer.host };
      case 'peer-sig-self-signer':
        return { [S]: peerSig, [H]: hostId };
      case 'swapped-values':
        return { [S]: peer.host, [H]: peerSig };
      case 'sig-of-other-bytes':
        return {
          [S]: sign(Buffer.concat([content, Buffer.from(' ')]), peer.keys.privateKey),
          [H]: peer.host,
        };
      case 'no-sig':
        return { [H]: peer.host };
      case 'no-signer':
        return { [S]: peerSig };
      case 'none':
        return {};
      case 'sig-as-buffer':
        return { [S]: Buffer.from(peerSig, 'base64url'), [H]: peer.host };
      case 'sig-padded':
        return { [S]: `${peerSig}==`, [H]: peer.host };
      case 'sig-standard-base64':
        return { [S]: Buffer.from(peerSig, 'base64url').toString('base64'), [H]: peer.host };
      case 'signer-uppercase':
        return { [S]: peerSig, [H]: peer.host.toUpperCase() };
      case 'signer-spaced':
        return { [S]: peerSig, [H]: ` ${peer.host}` };
      case 'header-names-uppercase':
        return { [S.toUpperCase()]: peerSig, [H.toUpperCase()]: peer.host };
    }
  };

  /** The part schema 1.1 requires of some kinds (a turn, a spawn request, a result; receipts since 1.2). */
  const partOf = (kind: string, gid: string): Record<string, unknown> => {
    const requestId = randomUUID();
    switch (kind) {
      case WireKind.ask:
      case WireKind.answer:
      case WireKind.tooLate:
        return { turnId: randomUUID() };
      case WireKind.spawn:
        return { spawn: { requestId, profile: 'fuzz' } };
      case WireKind.stop:
        return { stop: { requestId, gid } };
      case WireKind.spawnResult:
        return { result: { requestId, op: 'spawn', ok: true, gid } };
      case WireKind.receipt:
        return { receipts: [{ msgId: requestId, recipient: gid, stage: 'queued', at: Date.now() }] };
      default:
        return {};
    }
  };

  const materializeEnvelope = (r: EnvelopeRecipe, now: number): Input => {
    const envelope: Record<string, unknown> = {
      v: '1.0',
      kind: r.kind,
      msgId: randomUUID(),
      traceId: randomUUID(),
      hlc: encodeHlc({ wall: wallOf(r.hlc, now), counter: r.counter }),
      from: fromOf(r),
      to: r.kind === WireKind.broadcast ? 'broadcast.all' : entityOf(r.target).gid,
      text: r.text,
    };
    if (r.inReplyTo) envelope.inReplyTo = randomUUID();
    Object.assign(envelope, partOf(r.kind, entityOf(r.target).gid));
    if ('pastBy' in r.expiry) envelope.expiresAt = now - r.expiry.pastBy;
    if ('aheadBy' in r.expiry) envelope.expiresAt = now + r.expiry.aheadBy;
    const original = Buffer.from(JSON.stringify(envelope), 'utf8');
    const mutated = flip(Buffer.from(JSON.stringify(mutateObject(envelope, r.mutation)), 'utf8'), r.mutation);
    const signedBytes = r.order === 'sign-then-mutate' ? original : mutated;
    const headers = { ...r.extraHeaders, ...headersFor(mutated, signedBytes, r.headers) };
    return { target: r.target, content: mutated, headers, replay: r.replay };
  };

  const materializeBytes = (r: BytesRecipe): Input => {
    const body = r.body;
    const content =
      'raw' in body
        ? Buffer.from(body.raw)
        : 'json' in body
          ? Buffer.from(JSON.stringify(body.json) ?? 'null', 'utf8')
          : Buffer.from(body.text, 'utf8');
    const headers: Record<string, unknown> = { ...r.extraHeaders };
    const S = SignatureHeader.signature;
    const H = SignatureHeader.signer;
    if (r.sig.sig === 'value') headers[S] = r.sig.value;
    else if (r.sig.sig === 'peer-over-body') headers[S] = sign(content, peer.keys.privateKey);
    else if (r.sig.sig === 'evil-over-body') headers[S] = sign(content, evil.keys.privateKey);
    else if (r.sig.sig === 'peer-over-other')
      headers[S] = sign(Buffer.concat([content, Buffer.from('x')]), peer.keys.privateKey);
    else delete headers[S];
    if (r.signer.signer === 'value') headers[H] = r.signer.value;
    else if (r.signer.signer === 'peer') headers[H] = peer.host;
    else if (r.signer.signer === 'evil') headers[H] = evil.host;
    else if (r.signer.signer === 'self') headers[H] = hostId;
    else delete headers[H];
    return { target: r.target, content, headers, replay: false };
  };

  // --- the oracle: what should be delivered, decided independently of the gateway's code path ---

  const expectationOf = (input: Input, now: number): Expectation => {
    const no = (why: string): Expectation => ({ deliver: false, why });
    const sig = input.headers[SignatureHeader.signature];
    const signer = input.headers[SignatureHeader.signer];
    // Only the peer is trusted (the gateway's own key signs nothing here).
    if (signer !== peer.host) return no('not signed as the trusted peer');
    if (typeof sig !== 'string') return no('no signature');
    const sigBytes = Buffer.from(sig, 'base64url');
    if (sigBytes.length !== 64 || sigBytes.toString('base64url') !== sig)
      return no('not a canonical signature');
    if (!noble.verify(sigBytes, input.content, peer.raw, { zip215: false })) return no('bad signature');
    if (input.content.length > maxWireBytes) return no('oversized');
    let raw: unknown;
    try {
      raw = JSON.parse(input.content.toString('utf8'));
    } catch {
      return no('not JSON');
    }
    const parsed = envelopeSchema.safeParse(raw);
    if (!parsed.success) return no('not a valid envelope');
    const envelope = parsed.data;
    if (Number(envelope.v.split('.')[0]) > schemaVersion.major) return no('newer major');
    // An inbox takes only inbox kinds, addressed to it (a broadcast: to everyone or its group),
    // within the receiving gateway's own text limit.
    const recipient = entityOf(input.target);
    const inboxKinds = ['SEND', 'REPLY', 'BROADCAST', 'ASK', 'ANSWER', 'TOO_LATE', 'SPAWN_RESULT'];
    if (!inboxKinds.includes(envelope.kind)) return no('not an inbox kind');
    if (envelope.kind === 'BROADCAST') {
      if (envelope.from.gid === recipient.gid) return no('its own broadcast');
      if (
        envelope.to !== 'broadcast.all' &&
        !recipient.record.groups.some((g) => envelope.to === `broadcast.${g}`)
      ) {
        return no('a broadcast for another group');
      }
    } else if (envelope.to !== recipient.gid) return no('addressed to someone else');
    if (Buffer.byteLength(envelope.text, 'utf8') > config.limits.maxTextBytes)
      return no('text over the limit');
    if (envelope.from.host !== peer.host || envelope.from.gid !== sender.gid) {
      return no('not the announced sender on the signing host');
    }
    const wall = Number(envelope.hlc.slice(0, 15));
    const skew = config.security.maxClockSkewMs;
    const oldest = now - config.delivery.ttlMs - skew;
    if (Math.abs(wall - (now + skew)) < edgeMarginMs || Math.abs(wall - oldest) < edgeMarginMs) {
      return 'ambiguous';
    }
    if (wall > now + skew) return no('stamped in the future');
    if (wall < oldest) return no('stale');
    if (envelope.expiresAt !== undefined) {
      if (Math.abs(envelope.expiresAt - now) < edgeMarginMs) return 'ambiguous';
      if (envelope.expiresAt <= now) return no('expired');
    }
    return { deliver: true, envelope };
  };

  // --- feeding ---

  const feed = (input: Input): Fed => {
    const fed: Fed = { id: `fuzz/${hostId}/${++fedCount}`, input, acks: 0, rejects: 0, threw: undefined };
    const entity = entityOf(input.target);
    const message: InboundMessage = {
      content: input.content,
      exchange: 'bridge.msg',
      routingKey: entity.gid,
      messageId: fed.id,
      redelivered: false,
      headers: input.headers,
      ack: () => {
        fed.acks++;
      },
      reject: () => {
        fed.rejects++;
      },
    };
    try {
      federation.receiveInbound(entity, message);
    } catch (err) {
      fed.threw = err;
    }
    return fed;
  };

  /** Drains the main (as its agent would) until every fed message is settled, or the bound passes. */
  const settle = async (feds: readonly Fed[], drained: Envelope[], boundMs = settleMs): Promise<void> => {
    const deadline = Date.now() + boundMs;
    for (;;) {
      const handover = await gateway.drain(main);
      handover.confirm();
      drained.push(...handover.envelopes);
      // A broker copy is acked once stored: settled means also typed or drained (nothing live).
      const settledAll = feds.every((f) => f.acks > 0 || f.rejects > 0 || f.threw !== undefined);
      if (settledAll && worker.depth === 0 && main.depth === 0) return;
      if (Date.now() > deadline) return;
      await sleep(10);
    }
  };

  const describeFed = (f: Fed) => ({
    id: f.id,
    target: f.input.target,
    content: f.input.content.toString('utf8').slice(0, 300),
    headers: f.input.headers,
  });

  beforeAll(async () => {
    home = mkdtempSync(join(tmpdir(), 'bridge-fuzz-'));
    hostId = uniqueHostId('fuzz');
    addTrust(home, peer.host, peer.keys.publicKeyString);
    const loaded = loadConfig({
      env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: hostId, BRIDGE_BROKER_URI: brokerUri, BRIDGE_MCP_PORT: '0' },
    }).config;
    config = {
      ...loaded,
      security: { ...loaded.security, signing: 'required', unknownSenderGraceMs: graceMs },
    };
    maxWireBytes = config.limits.maxTextBytes + 16 * 1024;
    gateway = new Gateway({
      config,
      logger: createLogger({
        level: 'info',
        host: hostId,
        destination: { write: (line: string) => void logLines.push(JSON.parse(line) as LogLine) },
      }),
      createInjector: recordingPane,
      onFatal: (err) => void fatal.push(err),
    });
    await gateway.start();
    // The Gateway keeps its Federation private and exposes no way to the inbox consumer's
    // entry point; this is the narrowest view that reaches `receiveInbound` without changing src/.
    const reached = (gateway as unknown as { federation: Federation | undefined }).federation;
    if (!reached) throw new Error('the gateway did not federate (broker.uri is set)');
    federation = reached;
    main = gateway.authenticate(
      (await gateway.register({ kind: 'main', name: 'main' })).token,
    ) as EntityActor;
    worker = gateway.authenticate(
      (await gateway.register({ kind: 'worker', name: 'worker', pane: { type: 'tmux', target: '%fuzz' } }))
        .token,
    ) as EntityActor;
    await announce();
    await waitFor('the peer’s sender in the roster', () =>
      gateway.roster().some((e) => e.gid === sender.gid) ? true : undefined,
    );
  });

  afterAll(async () => {
    const gids = [main?.gid, worker?.gid].filter((gid): gid is string => gid !== undefined);
    await gateway?.stop();
    if (hostId) {
      await deleteQueues([...gids.map(inboxName), controlSpec(hostId).name]);
      // Every refusal published one dead letter (other tests' broadcasts may add more). Another
      // test sweeping the shared DLQ at the same moment holds some unacked for a while, so sweep
      // until they are all seen.
      let removed = 0;
      const deadline = Date.now() + 20_000;
      while (removed < refusedCount && Date.now() < deadline) {
        removed += await removeDeadLettersOf([hostId]);
        if (removed < refusedCount) await new Promise((r) => setTimeout(r, 250));
      }
      expect(removed).toBeGreaterThanOrEqual(refusedCount);
    }
    for (const dir of [home, peer.home, evil.home]) if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it(`never throws, never delivers what it should not, always acks (${numRuns} runs, FUZZ_SEED to replay)`, async () => {
    const started = Date.now();
    const property = fc.asyncProperty(recipesArb, async (recipes) => {
      const now = Date.now();
      const inputs = recipes.map((r) =>
        r.recipe === 'bytes' ? materializeBytes(r) : materializeEnvelope(r, now),
      );
      const expectations = inputs.map((input) => expectationOf(input, now));
      fc.pre(expectations.every((e) => e !== 'ambiguous'));
      stats.runs++;
      const typedBefore = typed.length;
      const drained: Envelope[] = [];

      const feds = inputs.map(feed);
      await settle(feds, drained);
      // Replays come after the first copy settled (a replay while it is still live is pinned below).
      const replayed = feds.filter((f) => f.input.replay);
      const replays = replayed.map((f) => feed(f.input));
      await settle(replays, drained);
      stats.inputs += feds.length + replays.length;
      stats.replays += replays.length;

      const all = [...feds, ...replays];
      expect(
        all.filter((f) => f.threw !== undefined).map((f) => ({ ...describeFed(f), threw: String(f.threw) })),
        'receiveInbound threw',
      ).toEqual([]);
      expect(all.filter((f) => f.rejects > 0).map(describeFed), 'rejected (nacked) instead of acked').toEqual(
        [],
      );
      expect(
        all.filter((f) => f.acks !== 1).map((f) => ({ ...describeFed(f), acks: f.acks })),
        'not acked exactly once',
      ).toEqual([]);

      const expectedTyped: string[] = [];
      const expectedDrained: Envelope[] = [];
      feds.forEach((fed, i) => {
        const expectation = expectations[i] as Exclude<Expectation, 'ambiguous'>;
        const refused = logLines.filter((l) => l.msg === refusedMsg && l.msgId === fed.id);
        if (expectation.deliver) {
          stats.delivered++;
          expect(refused, `refused a valid message ${fed.id}`).toEqual([]);
          const { envelope } = expectation;
          // An ANSWER goes to its asking turn, never to a pane or a drain: with no turn waiting
          // here it is too late, acked and given to nobody (U2).
          if (envelope.kind === WireKind.answer) return;
          const delivered: Envelope =
            envelope.kind === WireKind.broadcast ? envelope : { ...envelope, to: main.gid };
          if (fed.input.target === 'worker') {
            const line = formatInjection(envelope);
            expectedTyped.push(line);
            allowedTyped.add(line);
          } else expectedDrained.push(delivered);
        } else {
          stats.refused++;
          refusedCount++;
          expect(refused.length, `${fed.id} (${expectation.why}) was not dead-lettered`).toBe(1);
        }
      });
      replays.forEach((replay, i) => {
        // A replay of a delivered message is a duplicate: acked, nothing delivered again (the
        // checks below count every line typed and envelope drained). Of a refused one: refused again.
        const original = expectations[feds.indexOf(replayed[i] as Fed)] as Exclude<Expectation, 'ambiguous'>;
        const refused = logLines.filter((l) => l.msg === refusedMsg && l.msgId === replay.id);
        expect(
          refused.length,
          `replay ${replay.id} of ${original.deliver ? 'a delivered' : 'a refused'} message`,
        ).toBe(original.deliver ? 0 : 1);
        refusedCount += refused.length;
      });
      expect(typed.slice(typedBefore).sort(), 'typed into the worker’s pane').toEqual(expectedTyped.sort());
      const byId = (a: Envelope, b: Envelope) => a.msgId.localeCompare(b.msgId);
      expect(drained.sort(byId), 'handed to the main').toEqual(expectedDrained.sort(byId));
    });
    try {
      await fc.assert(property, { numRuns, seed });
    } catch (err) {
      // fast-check keeps the failed assertion as the cause; show it with the seed to replay.
      const cause = (err as Error).cause;
      const why = cause instanceof Error ? `\n${cause.message}` : '';
      throw new Error(
        `receive-path fuzz failed; replay with FUZZ_SEED=${seed}\n${(err as Error).message}${why}`,
        {
          cause: err,
        },
      );
    }
    expect(stats.delivered, 'the generators reach delivery').toBeGreaterThan(numRuns / 20);
    expect(stats.refused, 'the generators reach refusals').toBeGreaterThan(numRuns / 8);
    // Nothing typed late, after its run's checks (a held line released afterwards, say).
    await sleep(graceMs * 3);
    expect(typed.filter((line) => !allowedTyped.has(line))).toEqual([]);
    console.info(`receive-path fuzz: seed ${seed}, ${JSON.stringify(stats)}, ${Date.now() - started} ms`);
  });

  /** A valid envelope from the announced sender, signed by the peer, for `target`. */
  const good = (target: Target, text: string, overrides: Partial<Envelope> = {}): Input => {
    const envelope = {
      v: '1.0',
      kind: 'SEND',
      msgId: randomUUID(),
      traceId: randomUUID(),
      hlc: encodeHlc({ wall: Date.now(), counter: 0 }),
      from: { gid: sender.gid, name: sender.name, host: peer.host, kind: 'main' },
      to: entityOf(target).gid,
      text,
      ...overrides,
    } satisfies Envelope;
    const content = Buffer.from(JSON.stringify(envelope));
    return { target, content, headers: signedHeaders(content, peer), replay: false };
  };

  it('stays healthy afterwards: a last good message reaches the worker’s pane and the main', async () => {
    const drained: Envelope[] = [];
    const feds = [
      feed(good('worker', 'last good message for the worker')),
      feed(good('main', 'last good message for the main')),
    ];
    await settle(feds, drained);
    expect(feds.map((f) => [f.acks, f.rejects, f.threw])).toEqual([
      [1, 0, undefined],
      [1, 0, undefined],
    ]);
    expect(typed.at(-1)).toMatch(/\] last good message for the worker$/);
    expect(drained.map((e) => e.text)).toEqual(['last good message for the main']);
    expect(fatal).toEqual([]);
    expect(federation.broker.connected).toBe(true);
  });
  // --- Regressions: bugs this fuzz found in the receive path, each fixed; these keep them fixed.
  it('regression: an expiresAt before Date’s range is dead-lettered, never thrown', async () => {
    const fed = feed(good('worker', 'expires before time began', { expiresAt: -8_640_000_000_000_001 }));
    expect(fed.threw).toBeUndefined();
    await settle([fed], []);
    expect([fed.acks, fed.rejects]).toEqual([1, 0]);
  });

  // BUG 2. A delivery's deadline becomes an xstate `after` delay, `deadline - now`, handed to
  // setTimeout, which fires after 1 ms for anything over 2^31-1 ms (~24.8 days; Node prints a
  // TimeoutOverflowWarning). A valid message with expiresAt a month ahead is dead-lettered as
  // `expired` at once instead of held for the main (a worker's pane usually wins the race). The
  // same hits every message if delivery.ttlMs is configured above 24.8 days (the schema has no
  // max). Fix: clamp the delay and re-arm (or cap expiresAt/ttlMs). (expiryArb: aheadBy max)
  it('regression: a message that expires more than 24.8 days ahead is delivered (long timers are chained)', async () => {
    const text = 'expires in a month';
    const fed = feed(good('main', text, { expiresAt: Date.now() + 30 * 86_400_000 }));
    await sleep(200);
    const drained: Envelope[] = [];
    await settle([fed], drained);
    expect(drained.map((e) => e.text)).toEqual([text]);
  });

  // BUG 3. EntityActor.accept, on a msgId still live, replaces `live.inbound` with the new handle
  // and returns 'duplicate' without acking the old one. That is right for a redelivery after a
  // reconnect (the old channel is gone), but a replay of the same signed bytes on the same channel
  // while the first copy is still held (a main that has not drained yet) leaves the first delivery
  // unacked for as long as the channel lives: each such replay leaks one of the consumer's
  // `broker.prefetch` (200) slots, and once they are gone the inbox stalls for every sender.
  // Fix: ack the superseded handle (a no-op on a dead channel; the new one still holds a copy),
  // or ack the duplicate at once when the old handle's channel is alive. (The fuzz replays only
  // after the first copy settled.)
  it('regression: a replay arriving while the first copy is held acks the copy it replaces', async () => {
    const input = good('main', 'replayed while held');
    const first = feed(input);
    const second = feed(input);
    const drained: Envelope[] = [];
    await settle([first, second], drained, 1_000);
    expect(drained.map((e) => e.text)).toEqual(['replayed while held']);
    expect([first.acks, second.acks]).toEqual([1, 1]);
  });

  // BUG 4. Federation.deliver rewrites `to` to the receiving entity's gid and nothing checks that
  // a non-broadcast envelope was addressed to the inbox it arrived in. The signature covers `to`,
  // but anyone who can publish to bridge.msg (any gateway's least-privilege login) can re-route
  // a peer's signed SEND for one recipient (e.g. one on their own host) to another entity's
  // routing key, and it is typed into that pane as coming from the peer's sender; dedup is per
  // recipient, so it is not a duplicate there either. Fix: refuse (dead-letter, e.g. `rejected`,
  // "addressed to X") a non-BROADCAST envelope whose `to` is not the receiving entity's gid.
  it('regression: a signed SEND addressed to another recipient is refused, not typed here', async () => {
    const typedBefore = typed.length;
    const fed = feed(good('worker', 'meant for someone else', { to: randomUUID() }));
    await settle([fed], []);
    expect(fed.acks).toBe(1);
    expect(typed.slice(typedBefore)).toEqual([]);
  });
});
