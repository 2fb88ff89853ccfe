import type { Config } from '../config/schema.js';
import type { Clock } from '../kernel/clock.js';
import { newTraceId } from '../log/logger.js';
import { readTraceOfMessage } from '../store/actorHeads.js';
import type { Store } from '../store/openStore.js';
import { type Address, type Envelope, schemaVersionString } from '../wire/envelope.js';
import type { Hlc } from '../wire/hlc.js';
import { namedUuid, uuidv7 } from '../wire/ids.js';

/** The envelope fields a caller may set beyond kind, recipient and text. */
export interface EnvelopeExtras {
  inReplyTo?: string | undefined;
  idempotencyKey?: string | undefined;
  turnId?: string | undefined;
  spawn?: Envelope['spawn'];
  stop?: Envelope['stop'];
  ownerAnswer?: Envelope['ownerAnswer'];
  result?: Envelope['result'];
  msgId?: string | undefined;
  traceId?: string | undefined;
  expiresAt?: number | undefined;
  busy?: Envelope['busy'];
}

export interface ComposeDeps {
  store: Store;
  clock: Clock;
  hlc: Hlc;
  config: { delivery: Pick<Config['delivery'], 'ttlMs'> };
}

/**
 * A new envelope from `from`, stamped now. A keyed message's msgId comes from its key (so a
 * retry has the first call's); a reply joins the trace of the message it names.
 */
export function composeEnvelope(
  deps: ComposeDeps,
  from: Address,
  kind: Envelope['kind'],
  to: string,
  text: string,
  extra: EnvelopeExtras,
): Envelope {
  const { store, clock, config } = deps;
  const now = clock.now();
  const { inReplyTo, idempotencyKey, turnId, spawn, stop, ownerAnswer, result, busy } = extra;
  const traceId =
    extra.traceId ??
    (inReplyTo === undefined ? undefined : readTraceOfMessage(store, inReplyTo)) ??
    newTraceId();
  const msgId =
    extra.msgId ?? (idempotencyKey === undefined ? uuidv7(now) : namedUuid(from.gid, idempotencyKey));
  return {
    v: schemaVersionString,
    kind,
    msgId,
    traceId,
    hlc: deps.hlc.tick(),
    from,
    to,
    text,
    ...(inReplyTo === undefined ? {} : { inReplyTo }),
    expiresAt: extra.expiresAt ?? now + config.delivery.ttlMs,
    ...(busy === undefined ? {} : { busy }),
    ...(turnId === undefined ? {} : { turnId }),
    ...(spawn === undefined ? {} : { spawn }),
    ...(stop === undefined ? {} : { stop }),
    ...(ownerAnswer === undefined ? {} : { ownerAnswer }),
    ...(result === undefined ? {} : { result }),
  };
}
