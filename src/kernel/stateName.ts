import type { StateValue } from 'xstate';

/** A state value as one dotted string: `active.idle`, `pending`. */
export function stateName(value: StateValue): string {
  if (typeof value === 'string') return value;
  const [key, child] = Object.entries(value)[0] ?? ['?', undefined];
  return child === undefined ? key : `${key}.${stateName(child as StateValue)}`;
}
