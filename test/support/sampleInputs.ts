import type { DeliveryInput } from '../../src/machines/deliveryMachine.js';
import type { TurnInput } from '../../src/machines/turnMachine.js';

/** One delivery from the main to the worker: injected, a minute to live, three attempts. */
export const sampleDeliveryInput: DeliveryInput = {
  msgId: 'msg-1',
  traceId: 'trace-1',
  recipient: 'worker-gid',
  sender: 'main-gid',
  mode: 'inject',
  acceptedAt: 1_000,
  deadline: 61_000,
  maxAttempts: 3,
  retryBaseMs: 100,
  digest: 'sha256:abc',
  size: 12,
};

/** One turn of the main asking the worker, thirty seconds to answer. */
export const sampleTurnInput: TurnInput = {
  turnId: 'turn-1',
  askMsgId: 'msg-ask-1',
  traceId: 'trace-1',
  asker: 'main-gid',
  recipient: 'worker-gid',
  startedAt: 1_000,
  deadline: 31_000,
};
