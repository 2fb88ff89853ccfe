import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { sign } from '../../src/security/signature.js';
import {
  type Envelope,
  entityKinds,
  envelopeSchema,
  schemaVersion,
  WireKind,
} from '../../src/wire/envelope.js';
import { encodeHlc } from '../../src/wire/hlc.js';
import { SignatureHeader } from '../../src/wire/signatureHeaders.js';
import { type FakePeer, fakePeer } from './signedPeer.js';

/**
 * The hostile-input fuzz of the receive path (issue 4): recipes for arbitrary bytes with
 * arbitrary headers and for envelopes signed by a trusted peer then mutated (before or after
 * signing), and an oracle that decides independently of the gateway's code what should be
 * delivered. `admitInbound.unit.test.ts` runs it over the pure admission by the thousand;
 * `receiveFuzz.int.test.ts` runs a sample through a real gateway and broker.
 */

/** The oracle refuses to guess within this distance of a time boundary (the clock moves on). */
export const edgeMarginMs = 10_000;

export const peer = fakePeer('fuzzpeer');
export const evil = fakePeer('fuzzevil');
/** The sender the peer announces in its PRESENCE: the only one its messages may come from. */
export const sender = { gid: randomUUID(), name: 'sender' };

export type Target = 'worker' | 'main';

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

export type Recipe = EnvelopeRecipe | BytesRecipe;

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

/**
 * An envelope from the announced sender, signed by the peer as it should be, current and
 * unmutated; its kind, text, sender kind, reply, target and replay stay drawn. The many
 * independent faults of envelopeRecipeArb leave few fully valid inputs (too few, in some seeds,
 * to execute delivery at all), so a share of the inputs is made valid on purpose.
 */
const validEnvelopeRecipeArb: fc.Arbitrary<EnvelopeRecipe> = envelopeRecipeArb.map((recipe) => ({
  ...recipe,
  senderChoice: 'announced' as const,
  name: 'sender',
  hlc: { rel: 'now' as const },
  expiry: { none: true as const },
  mutation: { type: 'none' as const },
  headers: 'peer' as const,
  extraHeaders: {},
}));

export const recipesArb: fc.Arbitrary<Recipe[]> = fc.array(
  fc.oneof(
    { weight: 3, arbitrary: envelopeRecipeArb },
    { weight: 1, arbitrary: validEnvelopeRecipeArb },
    { weight: 1, arbitrary: bytesRecipeArb },
  ),
  { minLength: 1, maxLength: 4 },
);

// ---------------------------------------------------------------------------------------------

export interface Input {
  target: Target;
  content: Buffer;
  headers: Record<string, unknown>;
  /** Fed again after the first one settled. */
  replay: boolean;
}

export type Expectation =
  | { deliver: true; envelope: Envelope }
  | { deliver: false; why: string }
  | 'ambiguous';

/** The receiving gateway, as the recipes and the oracle need it. */
export interface FuzzContext {
  hostId: string;
  recipientOf(target: Target): { gid: string; groups: readonly string[] };
  /** delivery.ttlMs */
  ttlMs: number;
  /** security.maxClockSkewMs */
  maxClockSkewMs: number;
  /** limits.maxTextBytes */
  maxTextBytes: number;
  /** What the gateway parses at all. */
  maxWireBytes: number;
  /** The oracle's own check of a canonical 64-byte signature by the peer, not the gateway's code. */
  verifiesAsPeer(signature: Uint8Array, content: Buffer): boolean;
}

/** The AMQP signature headers `by` puts on `content`. */
export const signedHeaders = (content: Buffer, by: FakePeer): Record<string, string> => ({
  [SignatureHeader.signature]: sign(content, by.keys.privateKey),
  [SignatureHeader.signer]: by.host,
});

// ---------------------------------------------------------------------------------------------
// Materializing recipes, in a context: the receiving gateway and its limits.

const wallOf = (choice: HlcChoice, ctx: FuzzContext, now: number): number => {
  if ('wall' in choice) return choice.wall;
  const { ttlMs } = ctx;
  const skew = ctx.maxClockSkewMs;
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

const fromOf = (r: EnvelopeRecipe, hostId: string): Record<string, unknown> => {
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
  hostId: string,
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
    case WireKind.ownerAnswer:
      return { ownerAnswer: { requestId, gid, decision: 'deny' } };
    case WireKind.spawnResult:
      return { result: { requestId, op: 'spawn', ok: true, gid } };
    case WireKind.receipt:
      return { receipts: [{ msgId: requestId, recipient: gid, stage: 'queued', at: Date.now() }] };
    default:
      return {};
  }
};

const materializeEnvelope = (r: EnvelopeRecipe, ctx: FuzzContext, now: number): Input => {
  const recipient = ctx.recipientOf(r.target);
  const envelope: Record<string, unknown> = {
    v: '1.0',
    kind: r.kind,
    msgId: randomUUID(),
    traceId: randomUUID(),
    hlc: encodeHlc({ wall: wallOf(r.hlc, ctx, now), counter: r.counter }),
    from: fromOf(r, ctx.hostId),
    to: r.kind === WireKind.broadcast ? 'broadcast.all' : recipient.gid,
    text: r.text,
  };
  if (r.inReplyTo) envelope.inReplyTo = randomUUID();
  Object.assign(envelope, partOf(r.kind, recipient.gid));
  if ('pastBy' in r.expiry) envelope.expiresAt = now - r.expiry.pastBy;
  if ('aheadBy' in r.expiry) envelope.expiresAt = now + r.expiry.aheadBy;
  const original = Buffer.from(JSON.stringify(envelope), 'utf8');
  const mutated = flip(Buffer.from(JSON.stringify(mutateObject(envelope, r.mutation)), 'utf8'), r.mutation);
  const signedBytes = r.order === 'sign-then-mutate' ? original : mutated;
  const headers = { ...r.extraHeaders, ...headersFor(mutated, signedBytes, r.headers, ctx.hostId) };
  return { target: r.target, content: mutated, headers, replay: r.replay };
};

const materializeBytes = (r: BytesRecipe, hostId: string): Input => {
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

/** The input a recipe describes, with fresh msgIds and `now`'s time. */
export function materialize(recipe: Recipe, ctx: FuzzContext, now: number): Input {
  return recipe.recipe === 'bytes'
    ? materializeBytes(recipe, ctx.hostId)
    : materializeEnvelope(recipe, ctx, now);
}

// ---------------------------------------------------------------------------------------------
// The oracle: what should be delivered, decided independently of the gateway's code path.

export const expectationOf = (input: Input, ctx: FuzzContext, now: number): Expectation => {
  const no = (why: string): Expectation => ({ deliver: false, why });
  const sig = input.headers[SignatureHeader.signature];
  const signer = input.headers[SignatureHeader.signer];
  // Only the peer is trusted (the gateway's own key signs nothing here).
  if (signer !== peer.host) return no('not signed as the trusted peer');
  if (typeof sig !== 'string') return no('no signature');
  const sigBytes = Buffer.from(sig, 'base64url');
  if (sigBytes.length !== 64 || sigBytes.toString('base64url') !== sig)
    return no('not a canonical signature');
  if (!ctx.verifiesAsPeer(sigBytes, input.content)) return no('bad signature');
  if (input.content.length > ctx.maxWireBytes) return no('oversized');
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
  const recipient = ctx.recipientOf(input.target);
  const inboxKinds = ['SEND', 'REPLY', 'BROADCAST', 'ASK', 'ANSWER', 'TOO_LATE', 'SPAWN_RESULT'];
  if (!inboxKinds.includes(envelope.kind)) return no('not an inbox kind');
  if (envelope.kind === 'BROADCAST') {
    if (envelope.from.gid === recipient.gid) return no('its own broadcast');
    if (envelope.to !== 'broadcast.all' && !recipient.groups.some((g) => envelope.to === `broadcast.${g}`)) {
      return no('a broadcast for another group');
    }
  } else if (envelope.to !== recipient.gid) return no('addressed to someone else');
  if (Buffer.byteLength(envelope.text, 'utf8') > ctx.maxTextBytes) return no('text over the limit');
  if (envelope.from.host !== peer.host || envelope.from.gid !== sender.gid) {
    return no('not the announced sender on the signing host');
  }
  const wall = Number(envelope.hlc.slice(0, 15));
  const skew = ctx.maxClockSkewMs;
  const oldest = now - ctx.ttlMs - skew;
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
