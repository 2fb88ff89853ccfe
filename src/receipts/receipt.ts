import { z } from 'zod';

/**
 * A delivery's stage as its sender learns it (R-RC1). The recipient's gateway reports each
 * stage its delivery reaches; the sender's gateway records it on the message's send actor.
 *
 *   queued       durable at the recipient's gateway (in its event log)
 *   typed        pasted into the recipient's pane, not yet submitted
 *   submitted    the agent in the pane took it (verified by reading the pane back, R-DL6)
 *   handed-over  a main or orchestrator has it (drain, open send, or the parked ask)
 *   dead-lettered{reason}  it will not be delivered (reason as in the DLQ)
 *   too-late     an ANSWER whose ask was over: delivered nowhere (U2)
 */
export const ReceiptStage = {
  queued: 'queued',
  typed: 'typed',
  submitted: 'submitted',
  handedOver: 'handed-over',
  deadLettered: 'dead-lettered',
  tooLate: 'too-late',
} as const;
export type ReceiptStage = (typeof ReceiptStage)[keyof typeof ReceiptStage];
export const receiptStages = Object.values(ReceiptStage) as [ReceiptStage, ...ReceiptStage[]];

/** A stage reached by one delivery, as the recipient's gateway reports it. */
export const receiptSchema = z.object({
  msgId: z.string().uuid(),
  /** The recipient entity's gid. */
  recipient: z.string().uuid(),
  stage: z.enum(receiptStages),
  /** dead-lettered: the reason (as in the DLQ); others: absent. */
  reason: z.string().max(64).optional(),
  /** Why, in words (a dead letter's detail, a hold's cause). */
  detail: z.string().max(500).optional(),
  /** When the recipient's gateway recorded the stage (ms since epoch, its clock). */
  at: z.number().int().min(0),
});
export type Receipt = z.infer<typeof receiptSchema>;

/** Where the entity actors report their deliveries' stages. */
export interface ReceiptSink {
  /**
   * A delivery reached `receipt.stage`. Called in the tick of the transition, before its
   * commit; the sink records it (same host) or sends it to `senderHost` once it is durable.
   */
  record(
    receipt: Receipt,
    route: { readonly sender: string; readonly senderHost: string; readonly traceId: string },
  ): void;
}
