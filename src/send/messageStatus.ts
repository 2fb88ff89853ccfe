import type { Directory } from '../deliver/Directory.js';
import type { EntityActor } from '../deliver/EntityActor.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { RemoteRoster } from '../federation/RemoteRoster.js';
import type { Lifecycle } from '../kernel/Lifecycle.js';
import type { StageRecord } from '../machines/sendMachine.js';
import type { ReceiptStage } from '../wire/receipt.js';
import type { Router } from './Router.js';

/** Where a message this gateway sent is now (bridge_status, R-RC1). */
export interface MessageStatus {
  msgId: string;
  traceId: string;
  kind: string;
  /** The recipient's gid (a routing key for a broadcast), with its name and host when known. */
  to: { gid: string; name?: string; host?: string };
  /** The latest stage a receipt reported; null: none yet. */
  stage: ReceiptStage | null;
  stages: StageRecord[];
  /** The send actor's own state: accepted, published, confirmed, routed-local, failed, or a stage. */
  sendState: string;
  /** Why the send failed, when it did. */
  failure: string | null;
}

export interface MessageStatusDeps {
  host: string;
  router: Router;
  directory: Directory;
  /** Federated only: where the names of remote recipients come from. */
  remoteRoster: RemoteRoster | undefined;
  lifecycle: Lifecycle;
}

/**
 * Where a message sent from this gateway is (R-RC1): its send actor's state and every stage
 * its receipts reported. `requester` (an MCP caller) may ask about its own messages, or any
 * if it is a main or an orchestrator; the operator (admin socket) passes none.
 */
export type MessageStatusLookup = (
  requester: EntityActor | undefined,
  msgId: string,
) => Promise<MessageStatus>;

export function createMessageStatusLookup(deps: MessageStatusDeps): MessageStatusLookup {
  const { host, router, directory, remoteRoster, lifecycle } = deps;

  /** A gid with the name and host this gateway knows for it. */
  const addressOfGid = (gid: string, recipientHost: string | undefined): MessageStatus['to'] => {
    const local = directory.byGidOrUndefined(gid);
    if (local) return { gid, name: local.record.name, host };
    const remote = remoteRoster?.find(gid)[0];
    if (remote) return { gid, name: remote.name, host: remote.host };
    return recipientHost === undefined ? { gid } : { gid, host: recipientHost };
  };

  return async (requester, msgId) => {
    lifecycle.assertRunning();
    const cell = await router.loadSend(msgId);
    if (!cell) {
      throw new BridgeError(
        ErrorCode.unknownMessage,
        `no message ${msgId} was sent from ${host}: bridge_status knows the messages sent through ` +
          'this gateway, by the msgId bridge_send returned',
        { details: { msgId } },
      );
    }
    const { context } = cell;
    if (requester && requester.gid !== context.sender && requester.record.kind === 'worker') {
      throw new BridgeError(
        ErrorCode.forbidden,
        `message ${msgId} was not sent by ${requester.record.name}: a worker may ask only about its own ` +
          'messages (a main or an orchestrator about any)',
      );
    }
    const { stages } = context;
    return {
      msgId,
      traceId: context.traceId,
      kind: context.kind,
      to: addressOfGid(context.recipient, context.recipientHost),
      stage: stages.at(-1)?.stage ?? null,
      stages,
      sendState: cell.state,
      failure: context.failure,
    };
  };
}
