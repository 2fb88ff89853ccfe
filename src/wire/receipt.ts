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
 *
 * Stages only move forward: queued, then typed, then one of the four final ones. A stage may
 * be skipped (a main's message goes from queued to handed-over); one that comes after a later
 * one (receipts may arrive late, or twice) says nothing new.
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

/** The stages after which nothing more happens to the delivery. */
export const finalStages: readonly ReceiptStage[] = [
  ReceiptStage.submitted,
  ReceiptStage.handedOver,
  ReceiptStage.deadLettered,
  ReceiptStage.tooLate,
];

/** How far a stage is along: queued 0, typed 1, every final stage 2. */
export function stageRank(stage: ReceiptStage): number {
  if (stage === ReceiptStage.queued) return 0;
  if (stage === ReceiptStage.typed) return 1;
  return 2;
}

/** The stages that come after `stage` (all of them for none yet). */
export function stagesAfter(stage: ReceiptStage | null): ReceiptStage[] {
  const rank = stage === null ? -1 : stageRank(stage);
  return receiptStages.filter((next) => stageRank(next) > rank);
}

/** What `bridge_send {wait_for}` can wait for. */
export const WaitableStage = { queued: ReceiptStage.queued, submitted: ReceiptStage.submitted } as const;
export type WaitableStage = (typeof WaitableStage)[keyof typeof WaitableStage];

/**
 * Whether a wait for `wanted` is over once `recorded` is: that stage or a later one. For a
 * main, handed-over is what submitted is for a pane; a dead letter or a too-late answer ends
 * any wait (nothing more will come).
 */
export function endsWait(recorded: ReceiptStage | null, wanted: WaitableStage): boolean {
  if (recorded === null) return false;
  if (wanted === WaitableStage.queued) return true;
  return stageRank(recorded) >= stageRank(ReceiptStage.submitted);
}

/** A stage reached by one delivery, as the recipient's gateway reports it. */
export const receiptSchema = z.object({
  msgId: z.string().uuid(),
  /** The recipient entity's gid. */
  recipient: z.string().uuid(),
  stage: z.enum(receiptStages),
  /** dead-lettered: the reason (as in the DLQ); others: absent. */
  reason: z.string().max(64).optional(),
  /** Why, in words (a dead letter's detail, why an answer came too late). Never message text. */
  detail: z.string().max(500).optional(),
  /** When the recipient's gateway recorded the stage (ms since epoch, its clock). */
  at: z.number().int().min(0),
});
export type Receipt = z.infer<typeof receiptSchema>;

/** Where a receipt goes: the message's sender, its gateway's host, and the flow's trace. */
export interface ReceiptRoute {
  readonly sender: string;
  /** Undefined when the recipient's side no longer has it in memory; the sink looks it up. */
  readonly senderHost: string | undefined;
  readonly traceId: string;
}

/** Where the entity actors report their deliveries' stages. */
export interface ReceiptSink {
  /**
   * A delivery reached `receipt.stage`. Called in the tick of the transition, before its
   * commit; the sink records it (same host) or sends it to the sender's host once it is durable.
   */
  record(receipt: Receipt, route: ReceiptRoute): void;
}
