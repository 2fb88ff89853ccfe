import type { Config } from '../config/schema.js';
import type { Directory } from '../deliver/Directory.js';
import type { EntityActor } from '../deliver/EntityActor.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { Federation } from '../federation/Federation.js';
import { broadcastKey } from '../federation/topology.js';
import type { RuntimeDeps } from '../kernel/ActorCell.js';
import type { Lifecycle } from '../kernel/Lifecycle.js';
import { readActorInput } from '../kernel/readActorInput.js';
import { unconfirmedSendStates } from '../machines/sendMachine.js';
import type { Metrics } from '../metrics/metrics.js';
import { readActorHead } from '../store/actorHeads.js';
import type { BusyPolicy } from '../wire/agentHost.js';
import { byteLength } from '../wire/digest.js';
import { type Address, type Envelope, WireKind } from '../wire/envelope.js';
import { inboxRefusal, takesRoom } from '../wire/inboxCap.js';
import { judgeReply } from '../wire/judgeReply.js';
import { composeEnvelope, type EnvelopeExtras } from './composeEnvelope.js';
import { deadLetterForRoom } from './deadLetterForRoom.js';
import { addressOf, resolveRemote, unknownHost } from './resolveRemote.js';
import { type SendCell, SendCells, sendKind } from './SendCells.js';
import { type KeyedCall, keyedCall, keyedSend, SendKeys } from './SendKeys.js';
import { SendPublisher } from './SendPublisher.js';

// The router is where callers reach sends, their actors, keys and addresses from.
export { addressOf } from './resolveRemote.js';
export { type SendCell, sendKind } from './SendCells.js';
export { type KeyedCall, keyedCall, keyedSend } from './SendKeys.js';

export interface SendRequest {
  kind: typeof WireKind.send | typeof WireKind.reply | typeof WireKind.ask | typeof WireKind.answer;
  /** A name, `name@host` or gid to resolve, or an address `resolve` gave already (not resolved again). */
  to: string | Address;
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
  /** For a worker whose agent takes a message mid-turn: steer it in, or queue it for the turn's end. */
  busy?: BusyPolicy | undefined;
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

/** What the router reads of the configuration. */
export interface RouterConfig {
  broker: Pick<Config['broker'], 'heartbeatMs'>;
  limits: Pick<Config['limits'], 'maxTextBytes'>;
  delivery: Pick<Config['delivery'], 'ttlMs'>;
}

export interface RouterDeps extends RuntimeDeps {
  config: RouterConfig;
  metrics: Metrics;
  directory: Directory;
  federation?: Federation | undefined;
  /** Asked before a broadcast, the router's one call that comes straight from an interface. */
  lifecycle: Lifecycle;
}

/**
 * Where a message for one recipient goes, decided once per send (`Router.routeTo`): the
 * recipient's entity on this host, the broker, or nowhere (single-host, and not here).
 */
type Route =
  | { readonly to: 'local'; readonly entity: EntityActor }
  | { readonly to: 'broker'; readonly publisher: SendPublisher }
  | { readonly to: 'nowhere' };

/**
 * Accepts messages from local senders and routes them. A recipient on this host gets the
 * message through its entity actor, durably, without the broker (invariant 3); any other is
 * published to the broker by recipient gid (invariant 2) and the call returns once the broker
 * has confirmed it. The send's actor is on record before anything leaves; its text is not
 * (R-H2): it is in the recipient's inbox or on the broker, and nowhere once the send is over.
 */
export class Router {
  private readonly cells: SendCells;
  private readonly keys: SendKeys;
  /** Federated only: what publishes a send's envelope to the broker. */
  private readonly publisher: SendPublisher | undefined;

  constructor(private readonly deps: RouterDeps) {
    this.cells = new SendCells(deps);
    this.keys = new SendKeys(deps);
    const { federation } = deps;
    this.publisher = federation && new SendPublisher({ ...deps, federation, cells: this.cells });
  }

  /** The host entity `gid` lives on: this one, the one the roster places it on, or undefined. */
  hostOf(gid: string): string | undefined {
    const { federation } = this.deps;
    if (federation) return federation.hostsOf(gid)[0];
    return this.deps.directory.byGidOrUndefined(gid) ? this.deps.host : undefined;
  }

  /** Resolves an address to a local entity or, federated, to one in the roster (R-ID1). */
  resolve(address: string): Address {
    const local = this.deps.directory.find(address);
    return local ? addressOf(local, this.deps.host) : resolveRemote(this.deps, address);
  }

  async send(sender: EntityActor, request: SendRequest): Promise<SendResult> {
    const size = this.checkSize(request.text);
    if (request.inReplyTo !== undefined) this.checkReceived(sender, request.inReplyTo);
    const to = typeof request.to === 'string' ? this.resolve(request.to) : request.to;
    const route = this.routeTo(to.gid, to.host);
    sender.touch(); // a send it may make, to someone who is there

    const keyed = keyedSend(request, to.gid);
    const repeated = this.earlierSend(sender, keyed);
    const earlier = repeated && (await repeated);
    if (earlier) {
      const { msgId, traceId, recipient } = earlier.context;
      // Only a send that never got its confirm (nor a receipt, which implies it) goes out again,
      // as this call builds it (the first call's text is not kept), under the first one's msgId
      // and trace: if the first did get through, the receiver drops this one as a duplicate.
      if (route.to === 'broker' && unconfirmedSendStates.includes(earlier.state)) {
        const again = this.messageOf(sender, request, recipient, { msgId, traceId });
        await route.publisher.publish(earlier, again, recipient);
      }
      return { msgId, traceId, to, duplicate: true };
    }

    const envelope = this.messageOf(sender, request, to.gid, {});
    const recipientHost = to.host === unknownHost ? undefined : to.host;
    await this.dispatch(envelope, route, size, keyed, recipientHost);
    return { msgId: envelope.msgId, traceId: envelope.traceId, to, duplicate: false };
  }

  /**
   * Routes a message the gateway itself writes (a TOO_LATE notice, a SPAWN_RESULT) to its
   * recipient gid, here or through the broker, with its send actor in the log like any other.
   * A msgId this gateway already sent is not sent again.
   */
  async routeEnvelope(envelope: Envelope): Promise<void> {
    if (this.traceOfSent(envelope.msgId) !== undefined) return;
    const route = this.routeTo(envelope.to);
    await this.dispatch(envelope, route, byteLength(envelope.text), undefined, this.hostOf(envelope.to));
  }

  /** Publishes a SPAWN or STOP to `control.<host>` (U4); returns once the broker has it. */
  async sendControl(envelope: Envelope, host: string): Promise<void> {
    // A keyed retry has the msgId of the first request: publish again under its send actor.
    await this.deps.store.batch.flush();
    if (!this.publisher) throw new Error('a control request is sent only by a federated gateway');
    const cell =
      this.cells.open(envelope.msgId) ??
      this.createSend(envelope, host, byteLength(envelope.text), undefined);
    await this.publisher.published(cell, envelope, host, 'control');
  }

  /** The trace of a message this gateway sent, if it has one on record. */
  traceOfSent(msgId: string): string | undefined {
    return readActorHead(this.deps.store, sendKind, msgId)?.traceId;
  }

  /** The send actor of `msgId` if it is in memory (sent lately, or rebuilt for a receipt). */
  liveSend(msgId: string): SendCell | undefined {
    return this.cells.live(msgId);
  }

  /** The send actor of `msgId`, in memory or rebuilt from the log (SendCells.load). */
  loadSend(msgId: string): Promise<SendCell | undefined> {
    return this.cells.load(msgId);
  }

  /** Calls `listener` after each transition of the send actor, until the returned function is called. */
  watchSend(msgId: string, listener: (cell: SendCell) => void): () => void {
    return this.cells.watch(msgId, listener);
  }

  /** The msgId of a retried keyed call; throws IDEMPOTENCY_CONFLICT for another call (SendKeys). */
  repeatOf(sender: EntityActor, keyed: KeyedCall): string | undefined {
    return this.keys.repeatOf(sender, keyed);
  }

  /** Records a keyed call without a send actor here (a SPAWN), unless it is a retry (SendKeys). */
  claimKey(sender: EntityActor, keyed: KeyedCall, msgId: string): void {
    this.keys.claim(sender, keyed, msgId);
  }

  /** A new envelope from `from` (a local entity, or this gateway), stamped now. */
  compose(
    from: Address,
    kind: Envelope['kind'],
    to: string,
    text: string,
    extra: EnvelopeExtras = {},
  ): Envelope {
    return composeEnvelope(this.deps, from, kind, to, text, extra);
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
    const envelope = composeEnvelope(
      this.deps,
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
    this.cells.forget(envelope.msgId);
  }

  /**
   * Why a message from the broker may not name the message it says it answers (judgeReply), or
   * undefined. Only a message this gateway sent can be checked: its send actor says to whom.
   */
  refusesReply(envelope: Envelope): string | undefined {
    const msgId = envelope.inReplyTo;
    const replied =
      msgId === undefined
        ? undefined
        : (this.cells.live(msgId)?.context ?? readActorInput(this.deps.store, 'send', msgId));
    return judgeReply(envelope, replied, (gid) => this.hostOf(gid));
  }

  /**
   * Publishes once for everyone bound to `broadcast.all` or `broadcast.<group>` (U8). Without
   * a broker, this gateway hands a copy to each matching local entity.
   */
  async broadcast(sender: EntityActor, request: BroadcastRequest): Promise<BroadcastResult> {
    this.deps.lifecycle.assertRunning();
    const size = this.checkSize(request.text);
    sender.touch();
    const key = broadcastKey(request.group);
    const keyed = keyedCall(request.idempotencyKey, WireKind.broadcast, key, { text: request.text });
    const repeated = this.earlierSend(sender, keyed);
    const earlier = repeated && (await repeated);
    if (earlier) {
      const { msgId, traceId } = earlier.context;
      return { msgId, traceId, key, duplicate: true, partial: false };
    }

    const envelope = composeEnvelope(
      this.deps,
      addressOf(sender, this.deps.host),
      WireKind.broadcast,
      key,
      request.text,
      {
        idempotencyKey: request.idempotencyKey,
      },
    );
    const cell = this.createSend(envelope, key, size, keyed);
    // One publish reaches every gateway's copy; without a broker, every copy is made here.
    if (this.publisher) {
      const partial = await this.publisher.published(cell, envelope, key);
      return { msgId: envelope.msgId, traceId: envelope.traceId, key, duplicate: false, partial };
    }
    let localCopies = 0;
    let partial = false;
    let overShare: BridgeError | undefined;
    for (const entity of this.deps.directory.all()) {
      if (entity === sender) continue;
      if (request.group !== undefined && !entity.record.groups.includes(request.group)) continue;
      const refusal = this.roomRefusal(entity, envelope, size);
      if (refusal !== undefined) {
        partial = true; // a full inbox refused its copy; the others have theirs (SPEC §12)
        if (refusal.code === ErrorCode.inboxShareFull) overShare ??= refusal;
        continue;
      }
      if (entity.accept({ ...envelope, to: entity.gid }) === 'accepted') localCopies++;
    }
    // Every copy refused, some for the sender's own share: it is told why, not sent nowhere.
    if (localCopies === 0 && overShare) return this.cells.fail(cell, overShare);
    cell.send({ type: 'send.routedLocal' });
    this.deps.metrics.accepted.inc({ route: 'local' });
    await this.deps.store.batch.flush();
    return { msgId: envelope.msgId, traceId: envelope.traceId, key, duplicate: false, partial, localCopies };
  }

  /**
   * Where a message for `gid` goes (see Route): its entity, when it is on this host (`host`
   * says where the resolved address placed it; undefined, look here first); else the broker,
   * federated; else nowhere. Every send and every message the gateway writes is routed here.
   */
  private routeTo(gid: string, host?: string): Route {
    const entity =
      host === undefined || host === this.deps.host ? this.deps.directory.byGidOrUndefined(gid) : undefined;
    if (entity) return { to: 'local', entity };
    return this.publisher ? { to: 'broker', publisher: this.publisher } : { to: 'nowhere' };
  }

  /** The send actor, then the local hand-over or the publish; throws what the recipient refused. */
  private async dispatch(
    envelope: Envelope,
    route: Route,
    size: number,
    keyed: KeyedCall | undefined,
    recipientHost: string | undefined,
  ): Promise<void> {
    const cell = this.createSend(envelope, envelope.to, size, keyed, recipientHost);
    if (route.to === 'broker') {
      await route.publisher.published(cell, envelope, envelope.to);
      return;
    }
    if (route.to === 'nowhere') {
      return this.cells.fail(
        cell,
        new BridgeError(
          ErrorCode.unknownRecipient,
          `unknown recipient ${envelope.to}: it is not on this host, and this gateway runs without a broker ` +
            '(single-host mode), so nothing else can reach it',
        ),
      );
    }
    const local = route.entity;
    const refusal = this.roomRefusal(local, envelope, size);
    if (refusal !== undefined) return this.cells.fail(cell, refusal);
    try {
      local.accept(envelope);
    } catch (err) {
      return this.cells.fail(cell, err);
    }
    cell.send({ type: 'send.routedLocal' });
    this.deps.metrics.accepted.inc({ route: 'local' });
    await this.deps.store.batch.flush();
  }

  /** A new send actor, and the first call under its idempotency key, in one batch. */
  private createSend(
    envelope: Envelope,
    recipient: string,
    size: number,
    keyed: KeyedCall | undefined,
    recipientHost?: string | undefined,
  ): SendCell {
    const cell = this.cells.create(envelope, recipient, size, recipientHost);
    if (keyed !== undefined) this.keys.record(envelope.from.gid, keyed, envelope.msgId);
    return cell;
  }

  /**
   * Why `recipient`'s inbox refuses `envelope`, or undefined if it has room: the sender holds
   * its share of it (INBOX_SHARE_FULL, R-H8), or it is full (INBOX_FULL). A refusal is told to
   * the sender and counts as a dead letter with reason maxlen, as a full broker queue refuses
   * (R-H1); federated, a copy goes to bridge.dlq as the broker's reject-publish-dlx would put it.
   */
  private roomRefusal(recipient: EntityActor, envelope: Envelope, size: number): BridgeError | undefined {
    // What the gateway writes (SPAWN_RESULT, TOO_LATE) and answers take no room (takesRoom).
    if (!takesRoom(envelope.kind)) return undefined;
    const name = recipient.record.name;
    const share = recipient.senderShareRefusal(envelope, size);
    const full = share === undefined ? inboxRefusal(recipient.load, recipient.cap, size) : undefined;
    if (share === undefined && full === undefined) return undefined;
    const refusal =
      share !== undefined
        ? new BridgeError(
            ErrorCode.inboxShareFull,
            `${name}'s inbox takes no more from you now: ${share}; the message was not accepted. ` +
              `Wait until ${name} has taken some of your messages, then retry`,
            { retryable: true },
          )
        : new BridgeError(
            ErrorCode.inboxFull,
            `${name}'s inbox is full: ${full}; the message was not accepted. ` +
              'Retry later, or ask its owner to drain it',
            { retryable: true },
          );
    deadLetterForRoom(this.deps, envelope, {
      recipient: recipient.gid,
      detail: refusal.message,
      keptByBroker: false,
      logFields: { name, code: refusal.code, ...recipient.load },
    });
    return refusal;
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
   * The send actor of the earlier call a keyed call repeats, if any. The verdict on the key is
   * taken before the first await: a call the key is new for goes on to record it without
   * yielding, so a concurrent call with the same key sees it.
   */
  private earlierSend(
    sender: EntityActor,
    keyed: KeyedCall | undefined,
  ): Promise<SendCell | undefined> | undefined {
    const msgId = keyed === undefined ? undefined : this.keys.repeatOf(sender, keyed);
    return msgId === undefined ? undefined : this.openEarlier(msgId);
  }

  private async openEarlier(msgId: string): Promise<SendCell | undefined> {
    await this.deps.store.batch.flush();
    return this.cells.open(msgId);
  }

  /** The envelope of a local sender's call, to `to` (a gid); `ids` are a retry's own. */
  private messageOf(
    sender: EntityActor,
    request: SendRequest,
    to: string,
    ids: Pick<EnvelopeExtras, 'msgId' | 'traceId'>,
  ): Envelope {
    return composeEnvelope(this.deps, addressOf(sender, this.deps.host), request.kind, to, request.text, {
      inReplyTo: request.inReplyTo,
      idempotencyKey: request.idempotencyKey,
      turnId: request.turnId,
      msgId: ids.msgId ?? request.msgId,
      traceId: ids.traceId ?? request.traceId,
      expiresAt: request.expiresAt,
      busy: request.busy,
    });
  }
}
