import { randomUUID } from 'node:crypto';
import { type Address, type Envelope, schemaVersionString } from '../../src/wire/envelope.js';
import { encodeHlc } from '../../src/wire/hlc.js';

/** A valid SEND from `from` to `to`, stamped now, with fresh ids; `overrides` replace any field. */
export function sendEnvelope(from: Address, to: string, overrides: Partial<Envelope> = {}): Envelope {
  return {
    v: schemaVersionString,
    kind: 'SEND',
    msgId: randomUUID(),
    traceId: randomUUID(),
    hlc: encodeHlc({ wall: Date.now(), counter: 0 }),
    from,
    to,
    text: 'hello',
    ...overrides,
  };
}
