import type { AnyStateMachine } from 'xstate';
import type { z } from 'zod';
import { brokerEventSchema, brokerInputSchema, brokerMachine } from './brokerMachine.js';
import { deliveryEventSchema, deliveryInputSchema, deliveryMachine } from './deliveryMachine.js';
import { entityEventSchema, entityInputSchema, entityMachine } from './entityMachine.js';
import { remindEventSchema, remindInputSchema, remindMachine } from './remindMachine.js';
import { sendEventSchema, sendInputSchema, sendMachine } from './sendMachine.js';
import { spawnEventSchema, spawnInputSchema, spawnMachine } from './spawnMachine.js';
import { turnEventSchema, turnInputSchema, turnMachine } from './turnMachine.js';

/**
 * Every machine by actor kind, with the schemas of its input and events: what a row of its log
 * is parsed with (kernel/parseRecordedEvent.ts), and what viz draws.
 */
export interface MachineEntry {
  readonly machine: AnyStateMachine;
  readonly input: z.ZodType;
  /** One object schema per event, told apart by `type`. */
  readonly events: z.ZodDiscriminatedUnion<z.ZodObject[], 'type'>;
}

export const machines = {
  entity: { machine: entityMachine, input: entityInputSchema, events: entityEventSchema },
  delivery: { machine: deliveryMachine, input: deliveryInputSchema, events: deliveryEventSchema },
  send: { machine: sendMachine, input: sendInputSchema, events: sendEventSchema },
  broker: { machine: brokerMachine, input: brokerInputSchema, events: brokerEventSchema },
  turn: { machine: turnMachine, input: turnInputSchema, events: turnEventSchema },
  remind: { machine: remindMachine, input: remindInputSchema, events: remindEventSchema },
  spawn: { machine: spawnMachine, input: spawnInputSchema, events: spawnEventSchema },
} as const satisfies Record<string, MachineEntry>;

export type ActorKind = keyof typeof machines;
export type MachineOf<K extends ActorKind> = (typeof machines)[K]['machine'];
export const actorKinds = Object.keys(machines) as ActorKind[];
