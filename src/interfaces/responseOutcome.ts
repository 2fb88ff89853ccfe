import { AsyncLocalStorage } from 'node:async_hooks';
import type { ServerResponse } from 'node:http';
import type { Handover } from '../deliver/handover.js';

type Listener = (delivered: boolean) => void;

interface ResponseState {
  /** Undefined while the response is open; then whether it was written out. */
  delivered: boolean | undefined;
  listeners: Listener[];
}

const storage = new AsyncLocalStorage<ResponseState>();

/**
 * Runs a request's handling with a hook that learns whether its response went out: `finish`
 * (flushed to the socket) or `close` before that (the client is gone, perhaps long before the
 * handler is done).
 */
export function trackResponse<T>(res: ServerResponse, handle: () => Promise<T>): Promise<T> {
  const state: ResponseState = { delivered: undefined, listeners: [] };
  const settle = (delivered: boolean) => {
    if (state.delivered !== undefined) return;
    state.delivered = delivered;
    for (const listener of state.listeners.splice(0)) listener(delivered);
  };
  res.once('finish', () => settle(true));
  res.once('close', () => settle(res.writableFinished));
  return storage.run(state, handle);
}

/**
 * Settles a handover when the current response is out: confirmed if it was written, given
 * back (held again) if the client went away first. Outside a tracked request it confirms now.
 */
export function settleOnResponse(handover: Handover | undefined): void {
  if (!handover) return;
  const state = storage.getStore();
  const settle: Listener = (delivered) => (delivered ? handover.confirm() : handover.giveBack());
  if (!state) handover.confirm();
  else if (state.delivered !== undefined) settle(state.delivered);
  else state.listeners.push(settle);
}

/**
 * The signal a parked call gives up on: the MCP request's own (`request`: cancelled by the
 * client) or the response closing before it was written (the client hung up).
 */
export function callGoneSignal(request: AbortSignal): AbortSignal {
  const gone = responseGoneSignal();
  return gone ? AbortSignal.any([request, gone]) : request;
}

/**
 * An AbortSignal that fires when the current response closes before it was written (the
 * client hung up mid-call); undefined outside a tracked request.
 */
export function responseGoneSignal(): AbortSignal | undefined {
  const state = storage.getStore();
  if (!state) return undefined;
  const controller = new AbortController();
  if (state.delivered === false) controller.abort();
  else if (state.delivered === undefined)
    state.listeners.push((delivered) => delivered || controller.abort());
  return controller.signal;
}
