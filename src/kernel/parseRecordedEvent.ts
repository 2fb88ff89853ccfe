import type { EventFromLogic, InputFrom } from 'xstate';
import { type ActorKind, type MachineOf, machines } from '../machines/index.js';
import { upcastSpawnLaunched } from '../machines/upcastSpawnLaunched.js';
import type { EventRow } from '../store/eventRow.js';
import { describeIssues } from '../wire/envelope.js';

/** The name of the first event of every actor: its creation, with its input as data. */
export const initEvent = 'xstate.init';

/** XState's name for a delayed event (`after`): the machine raised it, the runtime recorded it. */
const delayedPrefix = 'xstate.after.';
export type DelayedEvent = { type: `xstate.after.${string}` };

/** An actor's creation as recorded: the input it was created with. */
export interface RecordedInit<K extends ActorKind> {
  type: typeof initEvent;
  input: InputFrom<MachineOf<K>>;
}

/** A row of an actor's log as its machine takes it. */
export type RecordedEvent<K extends ActorKind> =
  | RecordedInit<K>
  | EventFromLogic<MachineOf<K>>
  | DelayedEvent;

export type ParsedRecord<K extends ActorKind> =
  | { ok: true; event: RecordedEvent<K> }
  /** `unknownType`: the machine has no event of this name (it would take no transition on it). */
  | { ok: false; unknownType: boolean; problem: string };

/** A row as an older release recorded it, in the shape the machine takes now. */
export type Upcast = (data: Record<string, unknown> | null) => Pick<EventRow, 'event' | 'data'>;

/** Upcasts by actor kind, then by the recorded event's name (`xstate.init` for an actor's input). */
export type Upcasts = { readonly [K in ActorKind]?: Readonly<Record<string, Upcast>> };

/**
 * Every recorded shape a machine no longer takes, and how to read it now. The delivery machine
 * still takes the events gateways recorded before verified submission (`delivery.injected`,
 * `found`, `absent`) as events of its own; moving those here would leave it only current ones.
 */
export const upcasts: Upcasts = {
  spawn: {
    'spawn.launched': (data) => ({ event: 'spawn.launched', data: upcastSpawnLaunched(data ?? {}) }),
  },
};

/**
 * Parses one row of an actor's log with its machine's schemas, after upcasting an older shape:
 * the init row's data with the input schema, any other row's with the event schema (a delayed
 * event carries no data). The one door between the log and the machines: rehydration and replay
 * both come through it, so a row that does not fit is reported, never folded. Pure.
 */
export function parseRecordedEvent<K extends ActorKind>(
  kind: K,
  row: Pick<EventRow, 'event' | 'data'>,
  table: Upcasts = upcasts,
): ParsedRecord<K> {
  const entry = machines[kind];
  const upcast = table[kind]?.[row.event];
  const { event, data } = upcast ? upcast(row.data) : row;
  if (event === initEvent) {
    const input = entry.input.safeParse(data ?? {});
    if (!input.success)
      return invalid(`has an input the ${kind} machine does not take (${describeIssues(input.error)})`);
    return { ok: true, event: { type: initEvent, input: input.data as InputFrom<MachineOf<K>> } };
  }
  if (event.startsWith(delayedPrefix)) {
    if (data !== null) return invalid('is a delayed event with data');
    return { ok: true, event: { type: event as DelayedEvent['type'] } };
  }
  if (!eventTypesOf(kind).has(event)) {
    return { ok: false, unknownType: true, problem: `is no event of the ${kind} machine` };
  }
  const parsed = entry.events.safeParse({ ...data, type: event });
  if (!parsed.success) return invalid(`does not fit the ${kind} machine (${describeIssues(parsed.error)})`);
  return { ok: true, event: parsed.data as EventFromLogic<MachineOf<K>> };
}

function invalid(problem: string): { ok: false; unknownType: false; problem: string } {
  return { ok: false, unknownType: false, problem };
}

const eventTypes = new Map<ActorKind, ReadonlySet<string>>();

/** The event names a machine's schema knows (one option of its union per event). */
function eventTypesOf(kind: ActorKind): ReadonlySet<string> {
  let types = eventTypes.get(kind);
  if (!types) {
    const options: ReadonlyArray<{ shape: { type: { values: ReadonlySet<unknown> } } }> =
      machines[kind].events.options;
    types = new Set(options.flatMap((option) => [...option.shape.type.values].map(String)));
    eventTypes.set(kind, types);
  }
  return types;
}
