/**
 * What to tell the operator when the broker refuses a queue declare with 406 PRECONDITION_FAILED
 * because the queue exists with other arguments: above all another queue type (classic vs
 * quorum, which RabbitMQ cannot change in place). Pure: no I/O.
 */

/** One side of RabbitMQ's "received X but current is Y": a value, or none (not set). */
function sideValue(side: string): string | undefined {
  if (side === 'none') return undefined;
  return /'([^']*)'/.exec(side)?.[1];
}

interface Inequivalence {
  arg: string;
  queue: string;
  received: string | undefined;
  current: string | undefined;
}

/** Reads `inequivalent arg 'A' for queue 'Q' in vhost 'V': received X but current is Y`. */
export function parseInequivalentArg(message: string): Inequivalence | undefined {
  const match =
    /inequivalent arg '([^']+)' for queue '([^']+)' in vhost '[^']*': received (none|the value '[^']*'(?: of type '[^']*')?|'[^']*') but current is (none|the value '[^']*'(?: of type '[^']*')?|'[^']*')/.exec(
      message,
    );
  if (!match) return undefined;
  const [, arg, queue, received, current] = match as unknown as [string, string, string, string, string];
  return { arg, queue, received: sideValue(received), current: sideValue(current) };
}

/** A queue without `x-queue-type` is a classic queue. */
function queueType(value: string | undefined): string {
  return value ?? 'classic';
}

/**
 * One line that names the queue, what differs, and the fix. For a queue type: the type it has,
 * the one `broker.queueMode` asks for, and the two ways out.
 */
export function describeQueueMismatch(brokerMessage: string, declaredAs?: 'classic' | 'quorum'): string {
  const found = parseInequivalentArg(brokerMessage);
  if (!found) {
    return (
      `the broker refused a queue declare: ${brokerMessage}; the queue exists with other settings: move ` +
      'what it holds and delete it (it is declared anew), or give this deployment its own vhost'
    );
  }
  const { arg, queue } = found;
  if (arg === 'x-queue-type') {
    const has = queueType(found.current);
    const wanted = queueType(found.received);
    return (
      `queue ${queue} exists as a ${has} queue, but broker.queueMode is ${wanted}: RabbitMQ cannot change ` +
      `a queue's type in place. Either set broker.queueMode: ${has} (on every gateway and for ` +
      `\`agentbridge broker setup\`), or move what ${queue} holds elsewhere (a shovel) and delete it, so it is ` +
      `declared anew as a ${wanted} queue`
    );
  }
  const shown = (value: string | undefined) => (value === undefined ? 'none' : value);
  const differs =
    `queue ${queue} exists with ${arg} ${shown(found.current)}, and this release declares it with ` +
    `${shown(found.received)}`;
  const anew = `move what ${queue} holds elsewhere (a shovel) and delete it, so it is declared anew`;
  if (declaredAs === undefined) {
    return `${differs} (an earlier release or another application declared it): ${anew}`;
  }
  // RabbitMQ names the first argument that differs, often not x-queue-type itself.
  const other = declaredAs === 'quorum' ? 'classic' : 'quorum';
  return (
    `${differs}, as a ${declaredAs} queue (broker.queueMode: ${declaredAs}). If it is a ${other} queue ` +
    `(RabbitMQ cannot change a queue's type in place), set broker.queueMode: ${other} again; otherwise, or ` +
    `to make it a ${declaredAs} queue, ${anew}`
  );
}
