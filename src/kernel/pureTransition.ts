import {
  type AnyActorScope,
  type AnyMachineSnapshot,
  type AnyStateMachine,
  createActor,
  type EventObject,
  type ExecutableActionsFrom,
} from 'xstate';

/**
 * XState's pure `transition` / `initialTransition`, with one inert actor scope per machine
 * instead of a new one per call (XState builds a whole actor for each call; that was a fifth
 * of the gateway's CPU per message). Same semantics: the machine's own `transition` runs with
 * an action executor that only collects, so nothing executes. Our machines spawn no children
 * (tools/checkImports.mjs rejects `invoke` and `spawn` in src/machines), so sharing the scope's
 * system between calls is safe. test/unit/pureTransition.unit.test.ts is the proof that the fork
 * agrees with `xstate.transition` on every shortest path of every registered machine.
 */
const scopes = new WeakMap<AnyStateMachine, AnyActorScope>();

function scopeOf(machine: AnyStateMachine): AnyActorScope {
  let scope = scopes.get(machine);
  if (!scope) {
    const self = createActor(machine, { input: {} });
    scope = {
      self,
      defer: () => {},
      id: '',
      logger: () => {},
      sessionId: '',
      stopChild: () => {},
      system: self.system,
      emit: () => {},
      actionExecutor: () => {},
    } as unknown as AnyActorScope;
    scopes.set(machine, scope);
  }
  return scope;
}

export type CollectedActions = ExecutableActionsFrom<AnyStateMachine>[];

export function pureInitialTransition(
  machine: AnyStateMachine,
  input: unknown,
): [AnyMachineSnapshot, CollectedActions] {
  const scope = scopeOf(machine);
  const actions: CollectedActions = [];
  scope.actionExecutor = (action) => void actions.push(action as CollectedActions[number]);
  const snapshot = machine.getInitialSnapshot(scope, input) as AnyMachineSnapshot;
  return [snapshot, actions];
}

export function pureTransition(
  machine: AnyStateMachine,
  snapshot: AnyMachineSnapshot,
  event: EventObject,
): [AnyMachineSnapshot, CollectedActions] {
  const scope = scopeOf(machine);
  const actions: CollectedActions = [];
  scope.actionExecutor = (action) => void actions.push(action as CollectedActions[number]);
  const next = machine.transition(snapshot, event, scope) as AnyMachineSnapshot;
  return [next, actions];
}
