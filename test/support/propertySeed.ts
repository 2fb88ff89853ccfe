/**
 * Every property test can be replayed: `FUZZ_SEED` fixes fast-check's seed for the whole run.
 * A failing property prints the seed it ran with (`{ seed: N, path: "…" }` in its report), so
 * `FUZZ_SEED=N npx vitest run <file>` runs it again as it failed. The fuzz tests that draw
 * their own seed (admission, receive path, shared pane) read the same variable.
 */
import fc from 'fast-check';

const seed = process.env.FUZZ_SEED;
if (seed !== undefined) fc.configureGlobal({ seed: Number(seed) });
