import type { Transition } from '../kernel/ActorCell.js';
import type { DeliveryContext } from '../machines/deliveryMachine.js';
import { WireKind } from '../wire/envelope.js';
import { type Receipt, ReceiptStage } from '../wire/receipt.js';

/** The event a delivery's creation is recorded under (foldEvents' `initEvent`). */
const creation = 'xstate.init';

/**
 * The receipt a delivery transition gives its sender (R-RC1), or undefined for one that tells
 * the sender nothing new. Pure: the entity actor calls it for every transition of a delivery
 * (and for its creation) and hands what it returns to its ReceiptSink.
 *
 *   creation (pending)               queued: the message is in this gateway's event log
 *   typed                            typed: in the agent's input area, not submitted yet
 *   submitted                        submitted: the agent took it, read back from its pane (R-DL6)
 *   acked via pane, from `injected`  submitted (logs of gateways before verified submission)
 *   acked via drain, open-send,      handed-over (a main, a parked ask, or the operator at the
 *     ask or console                 console for the main, has it)
 *   dead-lettered                    dead-lettered, with the reason and the last error
 *   too-late                         too-late, with why
 *
 * A broadcast copy reports nothing: its send's recipient is a routing key, not this entity,
 * and a thousand inboxes answering one send would be a storm, not a receipt.
 */
export function receiptForTransition(
  transition: Transition,
  context: DeliveryContext,
  at: number,
): Receipt | undefined {
  if (context.kind === WireKind.broadcast) return undefined;
  const base = { msgId: context.msgId, recipient: context.recipient, at };
  if (transition.event === creation) return { ...base, stage: ReceiptStage.queued };
  if (transition.from === transition.to) return undefined;
  switch (transition.to) {
    case 'typed':
      return { ...base, stage: ReceiptStage.typed };
    case 'submitted':
      return { ...base, stage: ReceiptStage.submitted };
    case 'acked': {
      const via = transition.data?.via ?? (transition.from === 'injected' ? 'pane' : 'drain');
      // A pane's ack follows `submitted`, which told the sender already.
      if (via === 'pane')
        return transition.from === 'injected' ? { ...base, stage: ReceiptStage.submitted } : undefined;
      return { ...base, stage: ReceiptStage.handedOver };
    }
    case 'dead-lettered':
      return {
        ...base,
        stage: ReceiptStage.deadLettered,
        reason: context.reason ?? 'rejected',
        ...detailOf(context.lastError),
      };
    case 'too-late':
      return { ...base, stage: ReceiptStage.tooLate, ...detailOf(context.lastError) };
    default:
      return undefined;
  }
}

/** A receipt's detail: short words, never a message body (which no context holds anyway). */
function detailOf(text: string | null): { detail?: string } {
  return text === null || text === '' ? {} : { detail: text.slice(0, 500) };
}
