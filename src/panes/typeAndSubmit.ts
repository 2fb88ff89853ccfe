import type { PaneInjector, PaneMessage, SubmitOutcome, TypeOutcome } from './paneInjector.js';

/**
 * Types a message and submits it, both verified; the outcome of the step that ended it. For
 * what has no delivery of its own to record the steps on (a nudge into a main's pane).
 */
export async function typeAndSubmit(
  injector: PaneInjector,
  message: PaneMessage,
): Promise<TypeOutcome | SubmitOutcome> {
  const typed = await injector.type(message);
  if (typed.kind !== 'typed') return typed;
  return injector.submit(message);
}
