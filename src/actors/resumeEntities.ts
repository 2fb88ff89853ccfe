import { deliveryMachine } from '../machines/deliveryMachine.js';
import { ActorCell } from '../runtime/ActorCell.js';
import { parseDeliveryActorId } from '../runtime/actorIds.js';
import { resumeOrReport } from '../runtime/resumeOrReport.js';
import { readLiveActors } from '../store/actorHeads.js';
import { readEntities } from '../store/entities.js';
import { readActorEvents } from '../store/readEvents.js';
import { deliveryKind } from './Delivery.js';
import type { Directory } from './Directory.js';
import { reportDeadLetter } from './deadLetterReport.js';
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
    const msgId = parseDeliveryActorId(head.actorId)?.msgId ?? head.actorId;
    const identity = { actor: deliveryKind, id: head.actorId, traceId: head.traceId, msgId };
    const ok = resumeOrReport(logger, identity, () => {
      if (owner) owner.rehydrateDelivery(msgId, head.traceId);
      else deadLetterOrphan(deps, head.actorId, msgId, head.traceId, head.owner);
    });
    if (ok) resumed++;
  }
  return resumed;
}

function deadLetterOrphan(
  deps: EntityActorDeps,
  actorId: string,
  msgId: string,
  traceId: string,
  owner: string | null,
): void {
  // The bare machine runs no effect: the dead end is reported here, as the entity would.
  const cell = ActorCell.rehydrate(
    deliveryMachine,
    readActorEvents(deps.store, deliveryKind, actorId),
    { kind: deliveryKind, id: actorId, traceId, msgId, owner },
    deps,
  );
  cell.send({ type: 'delivery.deadLettered', reason: 'recipient-gone' });
  reportDeadLetter(deps, cell.context, owner);
}
