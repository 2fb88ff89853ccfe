/**
 * A whole-number bench setting from the environment: `fallback` when unset or empty, an error
 * naming the variable when it is not a whole number of at least `min`.
 */
export function intSetting(name, fallback, min = 0, env = process.env) {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min) {
    throw new Error(`${name}=${raw}: expected a whole number${min > 0 ? ` ≥ ${min}` : ''}`);
  }
  return value;
}
