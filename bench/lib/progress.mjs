import { performance } from 'node:perf_hooks';

/**
 * The progress bar `npm run bench` shows on stderr: which step of the run (a scenario, a
 * baseline, a phase of one) is under way, how far it is (units done of its total, when known)
 * and how long the run has taken. Nothing of it goes to stdout or into bench/results.*.
 *
 * On a terminal it is one line, redrawn in place four times a second; whatever else the
 * benchmark prints (console.log / console.error) is written above it. Otherwise (a pipe, a
 * file, CI) it prints a plain line per step, and one at each quarter of a step's units when the
 * last line is 5 s old. BENCH_PROGRESS=0 turns it off.
 *
 * `plan(steps)` sets how many steps the run has; `step(name, total?)` starts the next one;
 * `tick(n)` adds units done, `update(done, total?, detail?)` sets them; `done()` clears the bar.
 * @returns {Progress}
 */
export function createProgress({
  stream = process.stderr,
  enabled = process.env.BENCH_PROGRESS !== '0',
} = {}) {
  const tty = Boolean(stream.isTTY) && enabled;
  const started = performance.now();
  let steps = 0;
  let index = 0;
  let name = '';
  let done = 0;
  let total = 0;
  let detail = '';
  let quarter = 0;
  let shown = false;
  let timer;
  const consoleMethods = {};

  const elapsed = () => `${((performance.now() - started) / 1000).toFixed(0)} s`;
  const line = () => {
    const width = 24;
    const fraction =
      steps > 0 ? Math.min(1, (index - 1 + (total > 0 ? Math.min(1, done / total) : 0)) / steps) : 0;
    const filled = Math.round(fraction * width);
    const bar = `${'█'.repeat(filled)}${'░'.repeat(width - filled)}`;
    const units =
      total > 0 ? ` ${done}/${total} (${Math.floor((100 * Math.min(done, total)) / total)}%)` : '';
    const columns = stream.columns || 120;
    const text = `bench ${bar} ${index}/${steps} ${name}${units}${detail ? ` ${detail}` : ''} · ${elapsed()}`;
    return text.length > columns - 1 ? `${text.slice(0, columns - 2)}…` : text;
  };
  const clear = () => {
    if (shown) stream.write('\r\x1b[2K');
    shown = false;
  };
  const draw = () => {
    if (!tty || index === 0) return;
    stream.write(`\r\x1b[2K${line()}`);
    shown = true;
  };
  let saidAt = 0;
  const say = (text) => {
    if (!enabled || tty) return;
    saidAt = performance.now();
    stream.write(`bench [${index}/${steps}] ${text} · ${elapsed()}\n`);
  };

  if (tty) {
    // Whatever the benchmark prints goes above the bar, not through it.
    for (const method of ['log', 'error', 'warn', 'info']) {
      consoleMethods[method] = console[method];
      console[method] = (...args) => {
        clear();
        consoleMethods[method](...args);
        draw();
      };
    }
    timer = setInterval(draw, 250);
    timer.unref();
  }

  return {
    plan(count) {
      steps = count;
    },
    step(stepName, stepTotal = 0) {
      index++;
      if (index > steps) steps = index;
      name = stepName;
      done = 0;
      total = stepTotal;
      detail = '';
      quarter = 0;
      say(name);
      draw();
    },
    tick(count = 1) {
      this.update(done + count);
    },
    update(stepDone, stepTotal, stepDetail) {
      done = stepDone;
      if (stepTotal !== undefined) total = stepTotal;
      if (stepDetail !== undefined) detail = stepDetail;
      if (!tty && total > 0) {
        const reached = Math.floor((4 * Math.min(done, total)) / total);
        // A line per quarter, for steps long enough to need one (5 s since the last line).
        if (reached > quarter && reached < 4 && performance.now() - saidAt >= 5_000) {
          quarter = reached;
          say(`${name} ${done}/${total}${detail ? ` ${detail}` : ''}`);
        }
      }
    },
    done() {
      if (timer) clearInterval(timer);
      clear();
      for (const [method, original] of Object.entries(consoleMethods)) console[method] = original;
    },
  };
}

/**
 * @typedef {{
 *   plan: (steps: number) => void,
 *   step: (name: string, total?: number) => void,
 *   tick: (count?: number) => void,
 *   update: (done: number, total?: number, detail?: string) => void,
 *   done: () => void,
 * }} Progress
 */

/**
 * A progress bar that shows nothing (for code run outside `bench/run.mjs`).
 * @type {Progress}
 */
export const noProgress = {
  plan() {},
  step() {},
  tick() {},
  update() {},
  done() {},
};
