import { createPrivateKey, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { SealingKeyPair, SealingKeys } from '../../src/security/keys.js';
import { newPrivateKey, sealingKeyId, sealingKeyString } from '../../src/security/publicKey.js';
import { open, SealingSessions, seal, sessionMaxAgeMs, sessionMaxUses } from '../../src/security/sealing.js';
import { OpenFailure, type Sealed, sealedSchema } from '../../src/wire/sealed.js';

/** A host's sealing keys as keys.ts loads them: `count` kept, the last one current. */
function hostKeys(count = 1): SealingKeys {
  const pairs: SealingKeyPair[] = Array.from({ length: count }, () => {
    const { privateKey } = generateKeyPairSync('x25519');
    const publicKeyString = sealingKeyString(privateKey);
    return { keyId: sealingKeyId(publicKeyString), privateKey, publicKeyString, path: '' };
  });
  return { current: pairs.at(-1)!, byId: new Map(pairs.map((pair) => [pair.keyId, pair])) };
}

const content = Buffer.from(JSON.stringify({ text: 'the brief: MARKER-7f3a, with the customer list' }));
const headers = Buffer.from('SEND|01890a5d-ac96-774b-bcce-b302099a805a|host-a|host-b');
const b = hostKeys();
const c = hostKeys();
const to = (host: string, keys: SealingKeys) => ({ host, key: keys.current.publicKeyString });

/** A copy of `sealed` with one character of a base64url field changed. */
function flip(value: string, at = Math.floor(value.length / 2)): string {
  const next = value[at] === 'A' ? 'B' : 'A';
  return `${value.slice(0, at)}${next}${value.slice(at + 1)}`;
}

describe('sealing a message’s content to its hosts (X25519, HKDF-SHA256, AES-256-GCM)', () => {
  it('opens on the host it was sealed to, and the sealed part holds none of the content', () => {
    const sealed = seal(content, [to('host-b', b)], headers);
    expect(sealedSchema.parse(sealed)).toEqual(sealed);
    expect(JSON.stringify(sealed)).not.toContain('MARKER-7f3a');
    const opened = open(sealed, 'host-b', b, headers);
    expect(opened).toEqual({ ok: true, content, kid: b.current.keyId });
  });

  it('a broadcast seals one content key to every host: each opens it, with its own key only', () => {
    const sealed = seal(content, [to('host-b', b), to('host-c', c)], headers);
    expect(sealed.recipients.map((r) => r.host)).toEqual(['host-b', 'host-c']);
    expect(open(sealed, 'host-b', b, headers)).toMatchObject({ ok: true, content });
    expect(open(sealed, 'host-c', c, headers)).toMatchObject({ ok: true, content });
    expect(open(sealed, 'host-c', b, headers)).toMatchObject({
      ok: false,
      reason: OpenFailure.unknownSealingKey,
    });
  });

  it('sealed anew each time: two seals of the same content share no bytes of key or content', () => {
    const [one, two] = [seal(content, [to('host-b', b)], headers), seal(content, [to('host-b', b)], headers)];
    expect(one.ct).not.toBe(two.ct);
    expect(one.iv).not.toBe(two.iv);
    expect(one.recipients[0]?.epk).not.toBe(two.recipients[0]?.epk);
  });

  it('within a session, messages share the ephemeral key but no content key, nonce or wrapped key; a new session after its uses or its time', () => {
    let now = 0;
    const sending = new SealingSessions(() => now);
    const opening = new SealingSessions(() => now);
    const seals = Array.from({ length: 3 }, () => seal(content, [to('host-b', b)], headers, sending));
    const entries = seals.map((sealed) => sealed.recipients[0]!);
    expect(new Set(entries.map((e) => e.epk)).size).toBe(1);
    expect(new Set(entries.map((e) => e.key)).size).toBe(3);
    expect(new Set(seals.map((sealed) => sealed.iv)).size).toBe(3);
    for (const sealed of seals)
      expect(open(sealed, 'host-b', b, headers, opening)).toMatchObject({ ok: true, content });
    // One byte of the wrapped key changed: the session's wrapping key does not open it.
    const changed = { ...seals[0]!, recipients: [{ ...entries[0]!, key: flip(entries[0]!.key) }] };
    expect(open(changed, 'host-b', b, headers, opening)).toMatchObject({
      ok: false,
      reason: OpenFailure.tampered,
    });
    now += sessionMaxAgeMs;
    const later = seal(content, [to('host-b', b)], headers, sending);
    expect(later.recipients[0]?.epk).not.toBe(entries[0]?.epk);
    for (let i = 1; i < sessionMaxUses; i++) seal(Buffer.alloc(0), [to('host-b', b)], headers, sending);
    const next = seal(content, [to('host-b', b)], headers, sending);
    expect(next.recipients[0]?.epk).not.toBe(later.recipients[0]?.epk);
    expect(open(next, 'host-b', b, headers, opening)).toMatchObject({ ok: true, content });
  });

  it('the random bytes come from a pool, each handed out once: 2,000 seals (refills among them) share no nonce or wrapped key, and each opens', () => {
    const sending = new SealingSessions();
    const opening = new SealingSessions();
    const seals = Array.from({ length: 2_000 }, () =>
      seal(content, [to('host-b', b), to('host-c', c)], headers, sending),
    );
    const ivs = seals.map((sealed) => sealed.iv);
    const keys = seals.flatMap((sealed) => sealed.recipients.map((entry) => entry.key));
    expect(new Set(ivs).size).toBe(ivs.length);
    expect(new Set(keys).size).toBe(keys.length);
    // A nonce is not a prefix of the next one's: no two draws overlap in the pool.
    const nonces = keys.map((key) => Buffer.from(key, 'base64url').subarray(0, 12).toString('hex'));
    expect(new Set([...nonces, ...ivs.map((iv) => Buffer.from(iv, 'base64url').toString('hex'))]).size).toBe(
      nonces.length + ivs.length,
    );
    for (const sealed of [seals[0]!, seals[999]!, seals[1_999]!]) {
      expect(open(sealed, 'host-b', b, headers, opening)).toMatchObject({ ok: true, content });
      expect(open(sealed, 'host-c', c, headers, opening)).toMatchObject({ ok: true, content });
    }
  });

  it('replayed to another host: not sealed to it, and it says to whom it was', () => {
    const sealed = seal(content, [to('host-b', b)], headers);
    expect(open(sealed, 'host-c', c, headers)).toEqual({
      ok: false,
      reason: OpenFailure.notSealedToThisHost,
      detail: 'sealed to host-b, not to host-c',
    });
  });

  it('an entry copied onto another host’s name, or sealed to another host’s key, does not open', () => {
    const sealed = seal(content, [to('host-b', b)], headers);
    const renamed: Sealed = { ...sealed, recipients: [{ ...sealed.recipients[0]!, host: 'host-c' }] };
    // host-c keeping host-b's key id would be needed even to try: give it b's keys under its name.
    expect(open(renamed, 'host-c', b, headers)).toMatchObject({ ok: false, reason: OpenFailure.tampered });
    const toWrongKey = seal(content, [{ host: 'host-b', key: c.current.publicKeyString }], headers);
    expect(open(toWrongKey, 'host-b', b, headers)).toMatchObject({
      ok: false,
      reason: OpenFailure.unknownSealingKey,
    });
    const wrongKeyUnderB: Sealed = {
      ...toWrongKey,
      recipients: [{ ...toWrongKey.recipients[0]!, kid: b.current.keyId }],
    };
    expect(open(wrongKeyUnderB, 'host-b', b, headers)).toMatchObject({
      ok: false,
      reason: OpenFailure.tampered,
    });
  });

  it.each([
    ['the content', (s: Sealed): Sealed => ({ ...s, ct: flip(s.ct) })],
    ['the content’s tag', (s: Sealed): Sealed => ({ ...s, ct: flip(s.ct, s.ct.length - 2) })],
    ['the nonce', (s: Sealed): Sealed => ({ ...s, iv: flip(s.iv) })],
    [
      'the sealed key',
      (s: Sealed): Sealed => ({
        ...s,
        recipients: [{ ...s.recipients[0]!, key: flip(s.recipients[0]!.key) }],
      }),
    ],
    [
      'the ephemeral key',
      (s: Sealed): Sealed => ({
        ...s,
        recipients: [{ ...s.recipients[0]!, epk: flip(s.recipients[0]!.epk) }],
      }),
    ],
    ['the content cut short', (s: Sealed): Sealed => ({ ...s, ct: s.ct.slice(0, 10) })],
  ])('one changed byte in %s: tampered, nothing opened', (_what, change) => {
    const sealed = change(seal(content, [to('host-b', b)], headers));
    const opened = open(sealed, 'host-b', b, headers);
    expect(opened).toMatchObject({ ok: false, reason: OpenFailure.tampered });
  });

  it('headers other than those it was sealed with (a header changed, or the part moved to another message): tampered', () => {
    const sealed = seal(content, [to('host-b', b)], headers);
    const other = Buffer.from(headers.toString().replace('host-a', 'host-x'));
    expect(open(sealed, 'host-b', b, other)).toMatchObject({ ok: false, reason: OpenFailure.tampered });
  });

  it('a rotation: what was sealed to the old key opens while the host keeps it, and says which key opened it', () => {
    const rotated = hostKeys(2);
    const [old] = [...rotated.byId.values()];
    const sealedToOld = seal(content, [{ host: 'host-b', key: old!.publicKeyString }], headers);
    expect(open(sealedToOld, 'host-b', rotated, headers)).toMatchObject({ ok: true, kid: old!.keyId });
    const retired: SealingKeys = {
      current: rotated.current,
      byId: new Map([[rotated.current.keyId, rotated.current]]),
    };
    const refused = open(sealedToOld, 'host-b', retired, headers);
    expect(refused).toMatchObject({ ok: false, reason: OpenFailure.unknownSealingKey });
    expect(refused.ok ? '' : refused.detail).toContain('agentbridge keys show');
  });

  it('a sealing key string is the raw X25519 public key (RFC 7748 §6.1, Alice), and a new key is of its kind', () => {
    const alice = createPrivateKey({
      key: Buffer.from(
        '302e020100300506032b656e04220420' +
          '77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a',
        'hex',
      ),
      format: 'der',
      type: 'pkcs8',
    });
    const public_ = Buffer.from('8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a', 'hex');
    expect(sealingKeyString(alice)).toBe(`x25519:${public_.toString('base64url')}`);
    const made = newPrivateKey('x25519');
    expect(made.asymmetricKeyType).toBe('x25519');
    expect(sealingKeyString(made)).toBe(`x25519:${createPublicKey(made).export({ format: 'jwk' }).x}`);
    expect(newPrivateKey('ed25519').asymmetricKeyType).toBe('ed25519');
  });

  it('an empty content seals and opens too', () => {
    const sealed = seal(Buffer.alloc(0), [to('host-b', b)], headers);
    expect(open(sealed, 'host-b', b, headers)).toMatchObject({ ok: true, content: Buffer.alloc(0) });
  });
});
