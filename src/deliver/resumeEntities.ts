import { resumeOrReport } from '../kernel/resumeOrReport.js';
import { DeliveryMode } from '../machines/deliveryMachine.js';
import { readLiveActors } from '../store/actorHeads.js';
import { parseDeliveryActorId } from '../store/actorIds.js';
import { readEntities } from '../store/entities.js';
import { Delivery, type DeliveryOwner, deliveryKind } from './Delivery.js';
import type { Directory } from './Directory.js';
import { EntityActor, type EntityActorDeps, entityKind } from './EntityActor.js';

/**
 * Rebuilds every stored entity into `directory`, then every undelivered message with its
 * recipient. A log that does not fold is reported and left (resumeOrReport); a message whose
 * recipient no longer exists is dead-lettered with its reason, not dropped. Returns how many
 * deliveries resumed.
 */
export function resumeEntities(deps: EntityActorDeps, directory: Directory): number {
  const { store, logger } = deps;
  for (const record of readEntities(store)) {
    if (record.refusedGroups) {
      logger.warn(
        { gid: record.gid, name: record.name, refusedGroups: record.refusedGroups },
        'stored groups that are no group names are left out (their broker bindings removed): ' +
          'register the entity again with valid --group names',
      );
    }
    resumeOrReport(logger, { actor: entityKind, id: record.gid, name: record.name }, () => {
      const entity = EntityActor.rehydrate(record, deps);
      directory.add(entity);
      entity.start();
    });
  }
  let resumed = 0;
  for (const head of readLiveActors(store, deliveryKind)) {
    const owner = head.owner === null ? undefined : directory.byGidOrUndefined(head.owner);
    const parsed = parseDeliveryActorId(head.actorId);
    const msgId = parsed?.msgId ?? head.actorId;
    const identity = { actor: deliveryKind, id: head.actorId, traceId: head.traceId, msgId };
    const ok = resumeOrReport(logger, identity, () => {
      if (owner) owner.rehydrateDelivery(msgId, head.traceId);
      else if (parsed) deadLetterOrphan(deps, msgId, head.traceId, parsed.recipient);
      else throw new Error(`delivery actor id ${head.actorId} names no recipient`);
    });
    if (ok) resumed++;
  }
  return resumed;
}

/**
 * A live delivery whose entity is gone (its row was lost while the gateway was down): it ends
 * as any delivery of a departed entity does, through Delivery, so it is counted and logged,
 * forwarded to the DLQ if it came from another host, and its sender gets the receipt.
 */
function deadLetterOrphan(deps: EntityActorDeps, msgId: string, traceId: string, recipient: string): void {
  const gone: DeliveryOwner = {
    gid: recipient,
    name: recipient,
    host: deps.host,
    mode: DeliveryMode.hold,
    injector: () => undefined,
    moved: () => {},
  };
  const delivery = Delivery.rehydrate(msgId, traceId, gone, deps);
  delivery.deadLetter('recipient-gone', 'its entity was gone when the gateway started');
}
