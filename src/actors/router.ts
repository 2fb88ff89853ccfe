import { broadcastKey } from '../broker/topology.js';
import type { Config } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import { newTraceId } from '../log/logger.js';
import type { ActorKind } from '../machines/index.js';
import { sendInputSchema, sendMachine, unconfirmedSendStates } from '../machines/sendMachine.js';
import type { Metrics } from '../metrics/metrics.js';
import { ActorCell, type RuntimeDeps, type Transition } from '../runtime/actorCell.js';
import { readActorHead } from '../store/actorHeads.js';
import { readKeyRecord, recordIdempotencyKey } from '../store/idempotency.js';
import { purgeMessage, putMessage, readMessage, readTraceOfMessage } from '../store/messageBodies.js';
import { readActorEvents } from '../store/readEvents.js';
import { byteLength, digestText } from '../wire/digest.js';
import { type Address, type Envelope, schemaVersionString, WireKind } from '../wire/envelope.js';
import { type IdempotentCall, idempotentCall, judgeRepeat, type KeyRecord } from '../wire/idempotentCall.js';
import { namedUuid, uuidv7 } from '../wire/ids.js';
import { judgeReply, type RepliedMessage } from '../wire/judgeReply.js';
import type { Directory } from './directory.js';
import type { EntityActor } from './entityActor.js';
import type { Federation } from './federation.js';

export interface SendRequest {
  kind: typeof WireKind.send | typeof WireKind.reply | typeof WireKind.ask | typeof WireKind.answer;
  to: string;
  text: string;
  inReplyTo?: string | undefined;
  idempotencyKey?: string | undefined;
  /** ASK/ANSWER: the asking turn. */
  turnId?: string | undefined;
  /** Set by the gateway when it must know them before the send (an ask's turn). */
  msgId?: string | undefined;
  traceId?: string | undefined;
  /** Shorter than the default TTL (an ask lives as long as its turn). */
  expiresAt?: number | undefined;
}

export interface BroadcastRequest {
  text: string;
  group?: string | undefined;
  idempotencyKey?: string | undefined;
}

export interface SendResult {
  msgId: string;
  traceId: string;
  to: Address;
  /** True when an earlier call with the same idempotency key already sent it. */
  duplicate: boolean;
}

export interface BroadcastResult {
  msgId: string;
  traceId: string;
  key: string;
  duplicate: boolean;
  /** Some inbox refused its copy (full): the others have theirs (SPEC §12). */
  partial: boolean;
  /** Copies delivered by this gateway without the broker (single-host mode). */
  localCopies?: number;
}

export interface RouterDeps extends RuntimeDeps {
  config: Config;
  metrics: Metrics;
  directory: Directory;
  federation?: Federation | undefined;
}

export const sendKind: ActorKind = 'send';
/** Outbound envelopes are kept under this recipient until the broker confirms them. */
const outbox = '>outbox';

export function addressOf(entity: EntityActor, host: string): Address {
  return { gid: entity.gid, name: entity.record.name, host, kind: entity.record.kind };
}

export type SendCell = ActorCell<typeof sendMachine>;

/**
 * Send actors kept in memory after their call, for the receipts that follow (R-RC1). Beyond
 * this many the oldest is dropped; a receipt for it rebuilds it from the log.
 */
export const recentSendLimit = 4096;

/** An idempotency key with the call it is used for. */
export interface KeyedCall {
  readonly key: string;
  readonly call: IdempotentCall;
}

/** A call under `key` (none without a key). */
export function keyedCall(
  key: string | undefined,
  kind: string,
  recipient: string,
  content: Readonly<Record<string, unknown>>,
): KeyedCall | undefined {
  return key === undefined ? undefined : { key, call: idempotentCall(kind, recipient, content) };
}

/** The call a keyed message to `recipient` (a gid) is. */
export function keyedSend(
  request: Pick<SendRequest, 'kind' | 'text' | 'inReplyTo' | 'idempotencyKey'>,
  recipient: string,
): KeyedCall | undefined {
  return keyedCall(request.idempotencyKey, request.kind, recipient, {
    // Only the first answer to an ask counts: another text is a repeat, not another call.
    text: request.kind === WireKind.answer ? undefined : request.text,
    inReplyTo: request.inReplyTo,
  });
}

interface EnvelopeExtras {
  inReplyTo?: string | undefined;
  idempotencyKey?: string | undefined;
  turnId?: string | undefined;
  spawn?: Envelope['spawn'];
  stop?: Envelope['stop'];
  result?: Envelope['result'];
  msgId?: string | undefined;
  traceId?: string | undefined;
  expiresAt?: number | undefined;
}
/**
 * The kinds whose deliveries report receipts: not a broadcast (its recipient is a routing
 * key, not an entity), nor a SPAWN or STOP (a control request, answered by SPAWN_RESULT).
 */
const receiptKinds: ReadonlySet<string> = new Set([
  WireKind.send,
  WireKind.reply,
  WireKind.ask,
  WireKind.answer,
  WireKind.tooLate,
  WireKind.spawnResult,
]);

/** The host of a recipient addressed by a gid the roster does not know. */
const unknownHost = 'unknown';
const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Accepts messages from local senders and routes them. A recipient on this host gets the
 * message through its entity actor, durably, without the broker (invariant 3); any other is
 * published to the broker by recipient gid (invariant 2) and the call returns once the broker
 * has confirmed it. The send's actor and the body are on disk before anything leaves.
 */
export class Router {
  /** Idempotency keys written in the current, not yet committed batch. */
  private readonly pendingKeys = new Map<string, KeyRecord>();
  /** Live send actors by msgId, oldest first: one cell per actor, whoever asks for it. */
  private readonly sends = new Map<string, SendCell>();
  /** Send actors being rebuilt from the log, so that two receipts rebuild one cell, not two. */
  private readonly loading = new Map<string, Promise<SendCell | undefined>>();
  /** Who waits for a send's next transition (bridge_send wait_for). */
  private readonly watchers = new Map<string, Set<(cell: SendCell) => void>>();

  constructor(private readonly deps: RouterDeps) {}

  /** Resolves an address to a local entity or, federated, to one in the roster (R-ID1). */
  resolve(address: string): Address {
    const local = this.deps.directory.find(address);
    return local ? addressOf(local, this.deps.host) : this.resolveRemote(address);
  }

  async send(sender: EntityActor, request: SendRequest): Promise<SendResult> {
    const size = this.checkSize(request.text);
    if (request.inReplyTo !== undefined) this.checkReceived(sender, request.inReplyTo);
    const local = this.deps.directory.find(request.to);
    const to = local ? addressOf(local, this.deps.host) : this.resolveRemote(request.to);

    const keyed = keyedSend(request, to.gid);
    const repeated = this.earlierSend(sender, keyed);
    const earlier = repeated && (await repeated);
    if (earlier) {
      // Only a send that never got its confirm (nor a receipt, which implies it) goes out again.
      if (!local && unconfirmedSendStates.includes(earlier.state))
        await this.republish(earlier.cell, earlier.msgId);
      return { msgId: earlier.msgId, traceId: earlier.traceId, to, duplicate: true };
    }

    const envelope = this.envelope(addressOf(sender, this.deps.host), request.kind, to.gid, request.text, {
      inReplyTo: request.inReplyTo,
      idempotencyKey: request.idempotencyKey,
      turnId: request.turnId,
      msgId: request.msgId,
      traceId: request.traceId,
      expiresAt: request.expiresAt,
    });
    const recipientHost = to.host === unknownHost ? undefined : to.host;
    await this.dispatch(envelope, local, size, keyed, recipientHost);
    return { msgId: envelope.msgId, traceId: envelope.traceId, to, duplicate: false };
  }

  /**
   * Routes a message the gateway itself writes (a TOO_LATE notice, a SPAWN_RESULT) to its
   * recipient gid, here or through the broker, with its send actor in the log like any other.
   * A msgId this gateway already sent is not sent again.
   */
  async routeEnvelope(envelope: Envelope): Promise<void> {
    if (this.traceOfSent(envelope.msgId) !== undefined) return;
    const local = this.deps.directory.byGidOrUndefined(envelope.to);
    const host = local ? this.deps.host : this.deps.federation?.roster.find(envelope.to)[0]?.host;
    await this.dispatch(envelope, local, byteLength(envelope.text), undefined, host);
  }

  /** Publishes a SPAWN or STOP to `control.<host>` (U4); returns once the broker has it. */
  async sendControl(envelope: Envelope, host: string): Promise<void> {
    // A keyed retry has the msgId of the first request: publish again under its send actor.
    const { store } = this.deps;
    await store.batch.flush();
    const cell =
      this.openSend(envelope.msgId) ?? this.createSend(envelope, host, byteLength(envelope.text), undefined);
    putMessage(store, outbox, envelope);
    await this.published(cell, envelope, host, 'control');
  }

  /** The trace of a message this gateway sent, if it has one on record. */
  traceOfSent(msgId: string): string | undefined {
    return readActorHead(this.deps.store, sendKind, msgId)?.traceId;
  }

  /**
   * A send actor in memory, or rebuilt from its log (a retry goes on under it, a receipt is
   * recorded on it); undefined if none. Callers flush the batch first, so the log is complete.
   */
  private openSend(msgId: string): SendCell | undefined {
    const live = this.sends.get(msgId);
    if (live) return live;
    const rows = readActorEvents(this.deps.store, sendKind, msgId);
    const first = rows[0];
    if (!first) return undefined;
    const owner = typeof first.data?.sender === 'string' ? first.data.sender : null;
    const cell = ActorCell.rehydrate(
      sendMachine,
      rows,
      { kind: sendKind, id: msgId, traceId: first.traceId, msgId, owner },
      this.deps,
    );
    if (!cell.done) this.keep(cell);
    return cell;
  }

  /** The send actor of `msgId` if it is in memory (sent lately, or rebuilt for a receipt). */
  liveSend(msgId: string): SendCell | undefined {
    return this.sends.get(msgId);
  }

  /**
   * The send actor of `msgId`: in memory, or rebuilt from the log once everything written so
   * far is on disk. Concurrent callers get the same cell. Undefined: this host sent no such
   * message.
   */
  loadSend(msgId: string): Promise<SendCell | undefined> {
    const live = this.sends.get(msgId);
    if (live) return Promise.resolve(live);
    let loading = this.loading.get(msgId);
    if (!loading) {
      loading = this.deps.store.batch
        .flush()
        .then(() => this.openSend(msgId))
        .finally(() => this.loading.delete(msgId));
      this.loading.set(msgId, loading);
    }
    return loading;
  }

  /**
   * Calls `listener` with the send actor after each of its transitions, until the returned
   * function is called.
   */
  watchSend(msgId: string, listener: (cell: SendCell) => void): () => void {
    let listeners = this.watchers.get(msgId);
    if (!listeners) {
      listeners = new Set();
      this.watchers.set(msgId, listeners);
    }
    listeners.add(listener);
    return () => {
      const set = this.watchers.get(msgId);
      set?.delete(listener);
      if (set?.size === 0) this.watchers.delete(msgId);
    };
  }

  /** Keeps a live send cell in memory (bounded), and tells watchers of its transitions. */
  private keep(cell: SendCell): void {
    if (!receiptKinds.has(cell.context.kind)) return;
    const msgId = cell.context.msgId;
    this.sends.set(msgId, cell);
    cell.onTransition = (transition) => this.onSendTransition(msgId, cell, transition);
    if (this.sends.size <= recentSendLimit) return;
    // The oldest goes, unless its call still holds it (accepted, published): a second cell for
    // the same actor would write a log that contradicts the first.
    let looked = 0;
    for (const [id, oldest] of this.sends) {
      if (++looked > 16) break;
      if (oldest.state === 'accepted' || oldest.state === 'published') continue;
      this.sends.delete(id);
      break;
    }
  }

  private onSendTransition(msgId: string, cell: SendCell, transition: Transition): void {
    if (transition.done && this.sends.get(msgId) === cell) this.sends.delete(msgId);
    const listeners = this.watchers.get(msgId);
    if (listeners) for (const listener of [...listeners]) listener(cell);
  }

  /** A new envelope from `from` (a local entity, or this gateway), stamped now. */
  compose(
    from: Address,
    kind: Envelope['kind'],
    to: string,
    text: string,
    extra: Partial<
      Pick<Envelope, 'inReplyTo' | 'turnId' | 'spawn' | 'stop' | 'result' | 'traceId' | 'msgId' | 'expiresAt'>
    > = {},
  ): Envelope {
    return this.envelope(from, kind, to, text, extra);
  }

  /**
   * Records a message this gateway refused to send (an answer past its ask's deadline): its
   * send actor goes straight to `failed`, so the flow's log shows what was tried and why not.
   */
  recordRefusal(
    sender: EntityActor,
    refusal: {
      msgId: string;
      traceId: string;
      kind: Envelope['kind'];
      to: string;
      text: string;
      code: string;
      detail: string;
    },
  ): void {
    const envelope = this.envelope(
      addressOf(sender, this.deps.host),
      refusal.kind,
      refusal.to,
      refusal.text,
      {
        msgId: refusal.msgId,
        traceId: refusal.traceId,
      },
    );
    if (this.traceOfSent(envelope.msgId) !== undefined) return;
    const cell = this.createSend(envelope, refusal.to, byteLength(refusal.text), undefined);
    cell.send({ type: 'send.failed', code: refusal.code, detail: refusal.detail });
    // Refused here: no receipt will come for it.
    this.sends.delete(envelope.msgId);
  }

  /** The send actor, then the local hand-over or the publish; throws what the recipient refused. */
  private async dispatch(
    envelope: Envelope,
    local: EntityActor | undefined,
    size: number,
    keyed: KeyedCall | undefined,
    recipientHost: string | undefined,
  ): Promise<void> {
    const cell = this.createSend(envelope, envelope.to, size, keyed, recipientHost);
    if (!local) {
      putMessage(this.deps.store, outbox, envelope);
      await this.published(cell, envelope, envelope.to);
      return;
    }
    try {
      this.checkRoom(local, envelope, size);
      local.accept(envelope);
    } catch (err) {
      cell.send({ type: 'send.failed', code: codeOf(err), detail: (err as Error).message });
      await this.deps.store.batch.flush();
      throw err;
    }
    cell.send({ type: 'send.routedLocal' });
    this.deps.metrics.accepted.inc({ route: 'local' });
    await this.deps.store.batch.flush();
  }

  /**
   * Publishes once for everyone bound to `broadcast.all` or `broadcast.<group>` (U8). Without
   * a broker, this gateway hands a copy to each matching local entity.
   */
  async broadcast(sender: EntityActor, request: BroadcastRequest): Promise<BroadcastResult> {
    const size = this.checkSize(request.text);
    const key = broadcastKey(request.group);
    const keyed = keyedCall(request.idempotencyKey, WireKind.broadcast, key, { text: request.text });
    const repeated = this.earlierSend(sender, keyed);
    const earlier = repeated && (await repeated);
    if (earlier)
      return { msgId: earlier.msgId, traceId: earlier.traceId, key, duplicate: true, partial: false };

    const envelope = this.envelope(addressOf(sender, this.deps.host), WireKind.broadcast, key, request.text, {
      idempotencyKey: request.idempotencyKey,
    });
    const cell = this.createSend(envelope, key, size, keyed);
    const federation = this.deps.federation;
    if (!federation) {
      let localCopies = 0;
      let partial = false;
      for (const entity of this.deps.directory.all()) {
        if (entity === sender) continue;
        if (request.group !== undefined && !entity.record.groups.includes(request.group)) continue;
        try {
          this.checkRoom(entity, envelope, size);
        } catch {
          partial = true; // a full inbox refused its copy; the others have theirs (SPEC §12)
          continue;
        }
        if (entity.accept({ ...envelope, to: entity.gid }) === 'accepted') localCopies++;
      }
      cell.send({ type: 'send.routedLocal' });
      this.deps.metrics.accepted.inc({ route: 'local' });
      await this.deps.store.batch.flush();
      return {
        msgId: envelope.msgId,
        traceId: envelope.traceId,
        key,
        duplicate: false,
        partial,
        localCopies,
      };
    }
    putMessage(this.deps.store, outbox, envelope);
    const partial = await this.published(cell, envelope, key);
    return { msgId: envelope.msgId, traceId: envelope.traceId, key, duplicate: false, partial };
  }

  /**
   * A full local inbox refuses like a full broker queue (R-H1): INBOX_FULL to the sender, and a
   * dead letter with reason maxlen, counted; federated, a copy goes to bridge.dlq as the
   * broker's reject-publish-dlx would put it there.
   */
  private checkRoom(recipient: EntityActor, envelope: Envelope, size: number): void {
    // What the gateway writes (SPAWN_RESULT, TOO_LATE) and answers (handed to the parked turn,
    // never held) take no room an entity's senders could fill.
    if (!cappedKinds.has(envelope.kind)) return;
    try {
      recipient.checkRoom(size);
    } catch (err) {
      const { metrics, logger, federation } = this.deps;
      metrics.deadLetters.inc({ reason: 'maxlen' });
      logger.warn(
        {
          traceId: envelope.traceId,
          msgId: envelope.msgId,
          recipient: recipient.record.name,
          ...recipient.load,
        },
        'refused a message for a full inbox; dead-lettered as maxlen',
      );
      federation?.deadLetter({ ...envelope, to: recipient.gid }, 'maxlen', (err as Error).message);
      throw err;
    }
  }

  private checkSize(text: string): number {
    const { config } = this.deps;
    const size = byteLength(text);
    if (size > config.limits.maxTextBytes) {
      throw new BridgeError(
        ErrorCode.textTooLarge,
        `text is ${size} bytes; the limit is ${config.limits.maxTextBytes} (limits.maxTextBytes): ` +
          'send a shorter text, or write it to a file and send the path',
        { details: { size, limit: config.limits.maxTextBytes } },
      );
    }
    return size;
  }

  /** A recipient on another host, from the roster; a bare gid goes to the broker as it is. */
  private resolveRemote(address: string): Address {
    const federation = this.deps.federation;
    if (!federation) return addressOf(this.deps.directory.resolve(address), this.deps.host);
    const matches = federation.roster.find(address);
    if (matches.length > 1) {
      const where = matches.map((m) => `${m.name}@${m.host}`).join(', ');
      throw new BridgeError(
        ErrorCode.ambiguousRecipient,
        `"${address}" names more than one entity (${where}): address it as name@host or by gid`,
      );
    }
    const [match] = matches;
    if (match) return { gid: match.gid, name: match.name, host: match.host, kind: match.kind };
    // The roster resolves existence, the broker resolves location (invariant 2): an unknown
    // gid is still tried, and a mandatory publish tells us if no inbox has it.
    if (uuidPattern.test(address)) return { gid: address, name: address, host: unknownHost, kind: 'worker' };
    const hosts = [this.deps.host, ...federation.roster.hostIds()].join(', ');
    const { broker } = this.deps.config;
    // Right after a start or a reconnect the roster has not heard every host yet: say so, and
    // let the caller retry instead of giving up on a recipient that may well exist.
    const filling = federation.roster.filling(broker.heartbeatMs * 2);
    throw new BridgeError(
      ErrorCode.unknownRecipient,
      `unknown recipient "${address}": no entity with that gid or name on this host or in the roster ` +
        `(hosts: ${hosts}); ` +
        (filling
          ? `the roster is still filling (this gateway only just reached the broker): retry in ${Math.ceil((broker.heartbeatMs * 2) / 1000)} s, or address it by gid`
          : 'call bridge_roster to see who is reachable'),
      { details: { to: address }, retryable: filling },
    );
  }

  /**
   * The msgId of `sender`'s earlier call with this key, when it is the same call (a retry);
   * undefined when no call used the key. Throws IDEMPOTENCY_CONFLICT when another call did.
   */
  repeatOf(sender: EntityActor, keyed: KeyedCall): string | undefined {
    const keyId = `${sender.gid}\u0000${keyed.key}`;
    const record = this.pendingKeys.get(keyId) ?? readKeyRecord(this.deps.store, sender.gid, keyed.key);
    const verdict = judgeRepeat(record, keyed.call);
    if (verdict.kind === 'new') return undefined;
    if (verdict.kind === 'repeat') return verdict.msgId;
    const first = verdict.first;
    const what = { kind: 'another tool', recipient: 'another recipient', content: 'another text' }[
      verdict.differs
    ];
    throw new BridgeError(
      ErrorCode.idempotencyConflict,
      `idempotency key "${keyed.key}" was already used by ${sender.record.name} for ${first.kind} ` +
        `${verdict.msgId} to ${this.describeRecipient(first)}; this ${keyed.call.kind} has ${what}, so it is ` +
        'not a retry of that call and was not sent: use a new idempotency key for a new message',
      {
        details: {
          key: keyed.key,
          msgId: verdict.msgId,
          kind: first.kind,
          to: first.recipient,
          differs: verdict.differs,
        },
      },
    );
  }

  /**
   * Records a call made under a key without a send actor of its own here (a SPAWN), unless the
   * same call is on record already; throws IDEMPOTENCY_CONFLICT for another call with the key.
   */
  claimKey(sender: EntityActor, keyed: KeyedCall, msgId: string): void {
    if (this.repeatOf(sender, keyed) === undefined) this.recordKey(sender.gid, keyed, msgId);
  }

  private recordKey(sender: string, keyed: KeyedCall, msgId: string): void {
    const { store } = this.deps;
    const keyId = `${sender}\u0000${keyed.key}`;
    recordIdempotencyKey(store, sender, keyed.key, msgId, keyed.call);
    this.pendingKeys.set(keyId, { msgId, call: keyed.call });
    store.batch.afterCommit(() => this.pendingKeys.delete(keyId));
  }

  /** A first call's recipient in words: name@host when this gateway knows it. */
  private describeRecipient(call: IdempotentCall): string {
    if (call.kind === WireKind.broadcast || call.kind === WireKind.spawn) return call.recipient;
    const local = this.deps.directory.byGidOrUndefined(call.recipient);
    if (local) return `${local.record.name}@${this.deps.host}`;
    const remote = this.deps.federation?.roster.find(call.recipient)[0];
    return remote ? `${remote.name}@${remote.host}` : call.recipient;
  }

  /**
   * A reply may name only a message delivered to its sender (SPEC §9): one naming any other
   * would join that flow's trace, read as its answer, and could resolve the open send that
   * waits for it. The check is here, where every message an entity writes is sent from.
   */
  private checkReceived(sender: EntityActor, msgId: string): void {
    if (sender.hasReceived(msgId)) return;
    throw new BridgeError(
      ErrorCode.unknownMessage,
      `no message ${msgId} was delivered to ${sender.record.name}: you can reply only to a message ` +
        'delivered to you (in_reply_to / --reply-to is the msgId bridge_drain or the pane showed); ' +
        'leave it out to send a new message',
      { details: { inReplyTo: msgId } },
    );
  }

  /**
   * Why a message from the broker may not name the message it says it answers (judgeReply), or
   * undefined. Only a message this gateway sent can be checked: its send actor says to whom.
   */
  refusesReply(envelope: Envelope): string | undefined {
    const replied = envelope.inReplyTo === undefined ? undefined : this.repliedOnRecord(envelope.inReplyTo);
    return judgeReply(envelope, replied, (gid) => this.deps.federation?.roster.find(gid)[0]?.host);
  }

  private repliedOnRecord(msgId: string): RepliedMessage | undefined {
    const live = this.sends.get(msgId)?.context;
    if (live) return live;
    const first = readActorEvents(this.deps.store, sendKind, msgId)[0];
    const parsed = sendInputSchema.safeParse(first?.data);
    return parsed.success ? parsed.data : undefined;
  }

  /**
   * The earlier send a keyed call repeats, if any. The verdict on the key is taken before the
   * first await: a call the key is new for goes on to record it without yielding, so a
   * concurrent call with the same key sees it.
   */
  private earlierSend(
    sender: EntityActor,
    keyed: KeyedCall | undefined,
  ): Promise<{ msgId: string; traceId: string; state: string; cell: SendCell } | undefined> | undefined {
    const msgId = keyed === undefined ? undefined : this.repeatOf(sender, keyed);
    return msgId === undefined ? undefined : this.openEarlier(msgId);
  }

  private async openEarlier(
    msgId: string,
  ): Promise<{ msgId: string; traceId: string; state: string; cell: SendCell } | undefined> {
    await this.deps.store.batch.flush();
    const cell = this.openSend(msgId);
    if (!cell) return undefined;
    return { msgId, traceId: cell.context.traceId, state: cell.state, cell };
  }

  private envelope(
    from: Address,
    kind: Envelope['kind'],
    to: string,
    text: string,
    extra: EnvelopeExtras,
  ): Envelope {
    const { store, clock, config } = this.deps;
    const now = clock.now();
    const { inReplyTo, idempotencyKey, turnId, spawn, stop, result } = extra;
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
      hlc: this.deps.hlc.tick(),
      from,
      to,
      text,
      ...(inReplyTo === undefined ? {} : { inReplyTo }),
      expiresAt: extra.expiresAt ?? now + config.delivery.ttlMs,
      ...(turnId === undefined ? {} : { turnId }),
      ...(spawn === undefined ? {} : { spawn }),
      ...(stop === undefined ? {} : { stop }),
      ...(result === undefined ? {} : { result }),
    };
  }

  private createSend(
    envelope: Envelope,
    recipient: string,
    size: number,
    keyed: KeyedCall | undefined,
    recipientHost?: string | undefined,
  ): SendCell {
    const sender = envelope.from;
    const cell = ActorCell.create(
      sendMachine,
      {
        msgId: envelope.msgId,
        traceId: envelope.traceId,
        kind: envelope.kind,
        sender: sender.gid,
        recipient,
        digest: digestText(envelope.text),
        size,
        ...(recipientHost === undefined ? {} : { recipientHost }),
      },
      {
        kind: sendKind,
        id: envelope.msgId,
        traceId: envelope.traceId,
        msgId: envelope.msgId,
        owner: sender.gid,
      },
      this.deps,
    );
    this.keep(cell);
    // The message's clock stamp comes after its send actor's creation, so on every host the
    // receive (which merges this stamp) sorts after the send in a replayed timeline.
    envelope.hlc = this.deps.hlc.tick();
    if (keyed !== undefined) this.recordKey(sender.gid, keyed, envelope.msgId);
    return cell;
  }

  /**
   * Publishes while the send's record commits, and returns when both are done: the broker's
   * confirm and our own log. Publishing before the record is durable is safe because a keyed
   * send's msgId comes from its key: a retry after a crash carries the same msgId, which the
   * receiver drops as a duplicate.
   */
  private async published(
    cell: SendCell,
    envelope: Envelope,
    routingKey: string,
    exchange: 'msg' | 'control' = 'msg',
  ): Promise<boolean> {
    const [partial] = await Promise.all([
      this.publish(cell, envelope, routingKey, exchange),
      this.deps.store.batch.flush(),
    ]);
    return partial;
  }

  /** A retried send that never got its confirm: the same envelope again, under the same msgId. */
  private async republish(cell: SendCell, msgId: string): Promise<void> {
    const stored = readMessage(this.deps.store, msgId, outbox);
    if (!stored.ok) {
      this.deps.logger.error({ msgId, detail: stored.detail }, 'a kept send cannot be published again');
      return;
    }
    const envelope = stored.envelope;
    await this.publish(cell, envelope, envelope.to);
  }

  /**
   * Publishes and waits for the broker's confirm. Returns whether a broadcast was only
   * partly taken; throws for a send the broker did not take.
   */
  private async publish(
    cell: SendCell,
    envelope: Envelope,
    routingKey: string,
    exchange: 'msg' | 'control' = 'msg',
  ): Promise<boolean> {
    const federation = this.deps.federation;
    const { store, metrics } = this.deps;
    if (!federation) throw new BridgeError(ErrorCode.internal, 'publish without a broker');
    cell.send({ type: 'send.published' });
    let failure: BridgeError | undefined;
    let partial = false;
    try {
      const outcome = await federation.publishMessage(envelope, routingKey, exchange);
      if (outcome.ok) {
        cell.send({ type: 'send.confirmed' });
      } else if (outcome.reason === 'unroutable') {
        failure = new BridgeError(
          ErrorCode.unknownRecipient,
          exchange === 'control'
            ? `no gateway ${routingKey} on the broker (no control.${routingKey} queue): check the host id with bridge_roster`
            : envelope.kind === WireKind.broadcast
              ? `nobody receives ${routingKey}: no inbox is bound to it; check the group name with bridge_roster`
              : `unknown recipient ${routingKey}: no inbox exists for it on the broker; call bridge_roster to see who is reachable`,
        );
      } else if (envelope.kind === WireKind.broadcast) {
        // A broadcast nacked by one full inbox still reached the others (SPEC §12).
        partial = true;
        metrics.deadLetters.inc({ reason: 'maxlen' });
        cell.send({ type: 'send.confirmed' });
      } else {
        metrics.deadLetters.inc({ reason: 'maxlen' });
        failure = new BridgeError(
          ErrorCode.inboxFull,
          `the recipient's inbox is full (broker.inboxMaxLength); the message was dead-lettered: ${outcome.detail}. ` +
            'Retry later, or ask its owner to drain it',
          { retryable: true },
        );
      }
    } catch (err) {
      failure =
        err instanceof BridgeError ? err : new BridgeError(ErrorCode.internal, (err as Error).message);
    }
    if (failure) {
      cell.send({ type: 'send.failed', code: failure.code, detail: failure.message });
      await store.batch.flush();
      throw failure;
    }
    // Not awaited: once the broker has confirmed, the message is the broker's. If the gateway
    // dies before `confirmed` is on disk, a retry under the same key publishes the same msgId
    // again and the receiver's dedup drops it.
    purgeMessage(store, envelope.msgId, outbox);
    metrics.accepted.inc({ route: 'broker' });
    return partial;
  }
}

/** What a sender puts in an inbox, and a full inbox refuses (R-H1). */
const cappedKinds: ReadonlySet<string> = new Set([
  WireKind.send,
  WireKind.reply,
  WireKind.ask,
  WireKind.broadcast,
]);

function codeOf(err: unknown): string {
  return err instanceof BridgeError ? err.code : ErrorCode.internal;
}
