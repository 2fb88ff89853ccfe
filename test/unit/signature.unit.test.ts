import { createHash, createPrivateKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import * as noble from '@noble/ed25519';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { publicKeyString } from '../../src/security/publicKey.js';
import { sign, verify } from '../../src/security/signature.js';

// noble's synchronous API needs a SHA-512; node's is enough (SHA-512 is not what is under test).
noble.hashes.sha512 = (message) => new Uint8Array(createHash('sha512').update(message).digest());

/**
 * RFC 8032 §7.1 "Test Vectors for Ed25519", transcribed line by line as the RFC prints them
 * (16 bytes a line) and checked against a second independent transcription of TEST 1024.
 */
interface Vector {
  name: string;
  secretKey: string;
  publicKey: string;
  message: string;
  signature: string;
}

const test1024Message = [
  '08b8b2b733424243760fe426a4b54908',
  '632110a66c2f6591eabd3345e3e4eb98',
  'fa6e264bf09efe12ee50f8f54e9f77b1',
  'e355f6c50544e23fb1433ddf73be84d8',
  '79de7c0046dc4996d9e773f4bc9efe57',
  '38829adb26c81b37c93a1b270b20329d',
  '658675fc6ea534e0810a4432826bf58c',
  '941efb65d57a338bbd2e26640f89ffbc',
  '1a858efcb8550ee3a5e1998bd177e93a',
  '7363c344fe6b199ee5d02e82d522c4fe',
  'ba15452f80288a821a579116ec6dad2b',
  '3b310da903401aa62100ab5d1a36553e',
  '06203b33890cc9b832f79ef80560ccb9',
  'a39ce767967ed628c6ad573cb116dbef',
  'efd75499da96bd68a8a97b928a8bbc10',
  '3b6621fcde2beca1231d206be6cd9ec7',
  'aff6f6c94fcd7204ed3455c68c83f4a4',
  '1da4af2b74ef5c53f1d8ac70bdcb7ed1',
  '85ce81bd84359d44254d95629e9855a9',
  '4a7c1958d1f8ada5d0532ed8a5aa3fb2',
  'd17ba70eb6248e594e1a2297acbbb39d',
  '502f1a8c6eb6f1ce22b3de1a1f40cc24',
  '554119a831a9aad6079cad88425de6bd',
  'e1a9187ebb6092cf67bf2b13fd65f270',
  '88d78b7e883c8759d2c4f5c65adb7553',
  '878ad575f9fad878e80a0c9ba63bcbcc',
  '2732e69485bbc9c90bfbd62481d9089b',
  'eccf80cfe2df16a2cf65bd92dd597b07',
  '07e0917af48bbb75fed413d238f5555a',
  '7a569d80c3414a8d0859dc65a46128ba',
  'b27af87a71314f318c782b23ebfe808b',
  '82b0ce26401d2e22f04d83d1255dc51a',
  'ddd3b75a2b1ae0784504df543af8969b',
  'e3ea7082ff7fc9888c144da2af58429e',
  'c96031dbcad3dad9af0dcbaaaf268cb8',
  'fcffead94f3c7ca495e056a9b47acdb7',
  '51fb73e666c6c655ade8297297d07ad1',
  'ba5e43f1bca32301651339e22904cc8c',
  '42f58c30c04aafdb038dda0847dd988d',
  'cda6f3bfd15c4b4c4525004aa06eeff8',
  'ca61783aacec57fb3d1f92b0fe2fd1a8',
  '5f6724517b65e614ad6808d6f6ee34df',
  'f7310fdc82aebfd904b01e1dc54b2927',
  '094b2db68d6f903b68401adebf5a7e08',
  'd78ff4ef5d63653a65040cf9bfd4aca7',
  '984a74d37145986780fc0b16ac451649',
  'de6188a7dbdf191f64b5fc5e2ab47b57',
  'f7f7276cd419c17a3ca8e1b939ae49e4',
  '88acba6b965610b5480109c8b17b80e1',
  'b7b750dfc7598d5d5011fd2dcc5600a3',
  '2ef5b52a1ecc820e308aa342721aac09',
  '43bf6686b64b2579376504ccc493d97e',
  '6aed3fb0f9cd71a43dd497f01f17c0e2',
  'cb3797aa2a2f256656168e6c496afc5f',
  'b93246f6b1116398a346f1a641f3b041',
  'e989f7914f90cc2c7fff357876e506b5',
  '0d334ba77c225bc307ba537152f3f161',
  '0e4eafe595f6d9d90d11faa933a15ef1',
  '369546868a7f3a45a96768d40fd9d034',
  '12c091c6315cf4fde7cb68606937380d',
  'b2eaaa707b4c4185c32eddcdd306705e',
  '4dc1ffc872eeee475a64dfac86aba41c',
  '0618983f8741c5ef68d3a101e8a3b8ca',
  'c60c905c15fc910840b94c00a0b9d0',
].join('');

const vectors: Vector[] = [
  {
    name: 'TEST 1 (empty message)',
    secretKey: '9d61b19deffd5a60ba844af492ec2cc4' + '4449c5697b326919703bac031cae7f60',
    publicKey: 'd75a980182b10ab7d54bfed3c964073a' + '0ee172f3daa62325af021a68f707511a',
    message: '',
    signature:
      'e5564300c360ac729086e2cc806e828a' +
      '84877f1eb8e5d974d873e06522490155' +
      '5fb8821590a33bacc61e39701cf9b46b' +
      'd25bf5f0595bbe24655141438e7a100b',
  },
  {
    name: 'TEST 2 (1 byte)',
    secretKey: '4ccd089b28ff96da9db6c346ec114e0f' + '5b8a319f35aba624da8cf6ed4fb8a6fb',
    publicKey: '3d4017c3e843895a92b70aa74d1b7ebc' + '9c982ccf2ec4968cc0cd55f12af4660c',
    message: '72',
    signature:
      '92a009a9f0d4cab8720e820b5f642540' +
      'a2b27b5416503f8fb3762223ebdb69da' +
      '085ac1e43e15996e458f3613d0f11d8c' +
      '387b2eaeb4302aeeb00d291612bb0c00',
  },
  {
    name: 'TEST 3 (2 bytes)',
    secretKey: 'c5aa8df43f9f837bedb7442f31dcb7b1' + '66d38535076f094b85ce3a2e0b4458f7',
    publicKey: 'fc51cd8e6218a1a38da47ed00230f058' + '0816ed13ba3303ac5deb911548908025',
    message: 'af82',
    signature:
      '6291d657deec24024827e69c3abe01a3' +
      '0ce548a284743a445e3680d7db5ac3ac' +
      '18ff9b538d16f290ae67f760984dc659' +
      '4a7c15e9716ed28dc027beceea1ec40a',
  },
  {
    name: 'TEST 1024 (1023 bytes)',
    secretKey: 'f5e5767cf153319517630f226876b86c' + '8160cc583bc013744c6bf255f5cc0ee5',
    publicKey: '278117fc144c72340f67d0f2316e8386' + 'ceffbf2b2428c9c51fef7c597f1d426e',
    message: test1024Message,
    signature:
      '0aab4c900501b3e24d7cdf4663326a3a' +
      '87df5e4843b2cbdb67cbf6e460fec350' +
      'aa5371b1508f9f4528ecea23c436d94b' +
      '5e8fcd4f681e30a6ac00a9704a188a03',
  },
];

const hex = (text: string): Buffer => Buffer.from(text, 'hex');
const b64url = (bytes: Uint8Array): string => Buffer.from(bytes).toString('base64url');
const compact = (raw: Uint8Array): string => `ed25519:${b64url(raw)}`;

// PKCS#8 wrapping of a raw 32-byte Ed25519 seed (RFC 8410 §7): the fixed DER prefix, then the seed.
const pkcs8Prefix = hex('302e020100300506032b657004220420');
function privateKeyFromSeed(seed: Uint8Array): KeyObject {
  return createPrivateKey({ key: Buffer.concat([pkcs8Prefix, seed]), format: 'der', type: 'pkcs8' });
}

describe('RFC 8032 test vectors', () => {
  it('the 1023-byte message of TEST 1024 has its stated length', () => {
    expect(hex(test1024Message)).toHaveLength(1023);
  });

  for (const vector of vectors) {
    describe(vector.name, () => {
      const seed = hex(vector.secretKey);
      const message = hex(vector.message);
      const expectedPublic = compact(hex(vector.publicKey));

      it('our key derivation and signer reproduce the public key and signature byte for byte', () => {
        const privateKey = privateKeyFromSeed(seed);
        expect(publicKeyString(privateKey)).toBe(expectedPublic);
        expect(sign(message, privateKey)).toBe(b64url(hex(vector.signature)));
      });

      it('our verifier accepts the published signature, and refuses it on another message', () => {
        expect(verify(message, b64url(hex(vector.signature)), [expectedPublic])).toBe(true);
        const other = Buffer.concat([message, Buffer.from([0])]);
        expect(verify(other, b64url(hex(vector.signature)), [expectedPublic])).toBe(false);
      });

      it('@noble/ed25519 agrees on the same vector', () => {
        expect(Buffer.from(noble.getPublicKey(seed)).toString('hex')).toBe(vector.publicKey);
        expect(Buffer.from(noble.sign(message, seed)).toString('hex')).toBe(vector.signature);
        expect(noble.verify(hex(vector.signature), message, hex(vector.publicKey), { zip215: false })).toBe(
          true,
        );
      });
    });
  }
});

describe('cross-check with @noble/ed25519 over random messages', () => {
  const bytes = fc.uint8Array({ minLength: 0, maxLength: 2048 });
  const seeds = fc.uint8Array({ minLength: 32, maxLength: 32 });

  it('our signatures verify with noble, and are the ones noble makes (Ed25519 is deterministic)', () => {
    fc.assert(
      fc.property(seeds, bytes, (seed, message) => {
        const privateKey = privateKeyFromSeed(seed);
        const ours = Buffer.from(sign(message, privateKey), 'base64url');
        expect(noble.verify(ours, message, noble.getPublicKey(seed), { zip215: false })).toBe(true);
        expect(b64url(noble.sign(message, seed))).toBe(b64url(ours));
      }),
      { numRuns: 150 },
    );
  });

  it("noble's signatures verify with ours", () => {
    fc.assert(
      fc.property(seeds, bytes, (seed, message) => {
        const signature = b64url(noble.sign(message, seed));
        expect(verify(message, signature, [compact(noble.getPublicKey(seed))])).toBe(true);
      }),
      { numRuns: 150 },
    );
  });

  it('a signature over one message does not verify another (ours and noble agree)', () => {
    fc.assert(
      fc.property(seeds, bytes, bytes, (seed, message, other) => {
        fc.pre(Buffer.compare(Buffer.from(message), Buffer.from(other)) !== 0);
        const signature = sign(message, privateKeyFromSeed(seed));
        const publicKey = noble.getPublicKey(seed);
        expect(verify(other, signature, [compact(publicKey)])).toBe(false);
        expect(noble.verify(Buffer.from(signature, 'base64url'), other, publicKey)).toBe(false);
      }),
      { numRuns: 100 },
    );
  });
});

describe('verify never throws and refuses what is not a valid signature', () => {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const trusted = publicKeyString(publicKey);
  const message = Buffer.from('{"kind":"SEND","text":"hello"}');
  const good = sign(message, privateKey);

  it('accepts the good signature under the right key', () => {
    expect(verify(message, good, [trusted])).toBe(true);
  });

  it('refuses a signature by a key that is not in the list, and accepts it once the key is (rotation)', () => {
    const stranger = generateKeyPairSync('ed25519');
    const forged = sign(message, stranger.privateKey);
    expect(verify(message, forged, [trusted])).toBe(false);
    expect(verify(message, forged, [trusted, publicKeyString(stranger.publicKey)])).toBe(true);
    expect(verify(message, good, [])).toBe(false);
  });

  it('refuses every single-bit change of the signature and of the message', () => {
    const signatureBytes = Buffer.from(good, 'base64url');
    for (let bit = 0; bit < signatureBytes.length * 8; bit += 7) {
      const tampered = Buffer.from(signatureBytes);
      tampered[bit >> 3]! ^= 1 << (bit & 7);
      expect(verify(message, tampered.toString('base64url'), [trusted])).toBe(false);
    }
    for (let bit = 0; bit < message.length * 8; bit += 5) {
      const tampered = Buffer.from(message);
      tampered[bit >> 3]! ^= 1 << (bit & 7);
      expect(verify(tampered, good, [trusted])).toBe(false);
    }
  });

  it('refuses malformed signatures: wrong length, padding, other alphabets, non-canonical spelling', () => {
    const bad = [
      '',
      'x',
      good.slice(0, -1),
      `${good}A`,
      `${good}==`,
      Buffer.from(good, 'base64url').toString('base64'),
      `${good.slice(0, -1)}B`, // same bytes under a sloppy decoder, but not the canonical spelling
      ' '.repeat(86),
      '\u0000'.repeat(86),
    ];
    for (const signature of bad) expect(verify(message, signature, [trusted])).toBe(false);
  });

  it('ignores malformed keys in the list instead of throwing', () => {
    const keys = ['', 'ed25519:', 'ed25519:xyz', 'rsa:abc', `ed25519:${'_'.repeat(43)}`, trusted];
    expect(verify(message, good, keys)).toBe(true);
    expect(verify(message, good, keys.slice(0, -1))).toBe(false);
  });

  it('arbitrary strings as signature and key list never throw', () => {
    fc.assert(
      fc.property(
        fc.string({ maxLength: 120 }),
        fc.array(fc.string({ maxLength: 60 }), { maxLength: 4 }),
        (signature, keys) => {
          expect(verify(message, signature, keys)).toBe(false);
          expect(verify(message, signature, [...keys, trusted])).toBe(signature === good);
        },
      ),
      { numRuns: 500 },
    );
  });

  it('arbitrary 64 bytes as a signature never verify and never throw', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 64, maxLength: 64 }), (bytes) => {
        fc.pre(b64url(bytes) !== good);
        expect(verify(message, b64url(bytes), [trusted])).toBe(false);
      }),
      { numRuns: 300 },
    );
  });
});
