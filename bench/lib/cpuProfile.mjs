import { readFileSync } from 'node:fs';

/**
 * Sums a V8 .cpuprofile (from `node --cpu-prof`): self time by package or file (`dist/actors`,
 * `amqplib`, `(garbage collector)`, ...) and by function, inclusive time by function, and
 * inclusive time by layer (a `dist/` folder of this project or a dependency, counted once per
 * sample when it is anywhere on the stack: the time spent in that layer and in what it called).
 * Times in µs; `idleUs` is the `(idle)` share, `busyUs` the rest. With `fromUs`/`toUs` (the
 * monotonic clock, µs: what `process.hrtime` reads in any process on this machine, as V8 stamps
 * its samples) only the samples in that span count.
 */
export function summarizeProfile(file, { fromUs = -Infinity, toUs = Infinity } = {}) {
  const profile = JSON.parse(readFileSync(file, 'utf8'));
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const parents = new Map();
  for (const node of profile.nodes) for (const child of node.children ?? []) parents.set(child, node.id);

  const sampled = new Map();
  let at = profile.startTime;
  for (const [i, id] of profile.samples.entries()) {
    const delta = profile.timeDeltas[i] ?? 0;
    at += delta;
    if (at < fromUs || at > toUs) continue;
    sampled.set(id, (sampled.get(id) ?? 0) + delta);
  }
  const add = (map, key, us) => map.set(key, (map.get(key) ?? 0) + us);
  const bySelfPackage = new Map();
  const bySelfFunction = new Map();
  const byInclusive = new Map();
  const byInclusiveLayer = new Map();
  let totalUs = 0;
  for (const [id, us] of sampled) {
    totalUs += us;
    const node = nodes.get(id);
    add(bySelfPackage, packageOf(node), us);
    add(bySelfFunction, functionOf(node), us);
    // Each function (and layer) once per sample, however often it recurs on the stack.
    const functions = new Set();
    const layers = new Set();
    for (let frameId = id; frameId !== undefined; frameId = parents.get(frameId)) {
      const frame = nodes.get(frameId);
      functions.add(functionOf(frame));
      layers.add(packageOf(frame));
    }
    for (const key of functions) add(byInclusive, key, us);
    for (const key of layers) add(byInclusiveLayer, key, us);
  }
  const idleUs = bySelfPackage.get('(idle)') ?? 0;
  return {
    totalUs,
    idleUs,
    busyUs: totalUs - idleUs,
    bySelfPackage,
    bySelfFunction,
    byInclusive,
    byInclusiveLayer,
  };
}

/** The `top` largest entries of one of the summary's maps, largest first. */
export function topEntries(map, top) {
  return [...map].sort((a, b) => b[1] - a[1]).slice(0, top);
}

/** Now on the monotonic clock V8 stamps profile samples with, in µs. */
export function monotonicUs() {
  return Number(process.hrtime.bigint() / 1000n);
}

const shortUrl = (url) => url.replace(/.*node_modules\//, '').replace(/^file:\/\/.*?\/(dist|bench)\//, '$1/');

function functionOf({ callFrame: f }) {
  return `${f.functionName || '(anonymous)'} ${shortUrl(f.url)}:${f.lineNumber + 1}`;
}

function packageOf({ callFrame: f }) {
  if (!f.url) return f.functionName.startsWith('(') ? f.functionName : '(native)';
  if (f.url.startsWith('node:')) return 'node';
  const dependency = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(f.url);
  if (dependency) return dependency[1];
  return shortUrl(f.url).split('/').slice(0, 2).join('/');
}

/**
 * A profile's busy time in a span per message, in µs: in all, by layer's self time (where the CPU
 * was: this project's dist/ folders, each dependency, node's own code, GC, the profiler's
 * `(program)`), and by layer inclusive (each layer with what it called).
 */
export function cpuPerMessage(file, span, messages, top = 10) {
  const summary = summarizeProfile(file, span);
  const per = (us) => Math.round(us / messages);
  const layers = (map) =>
    topEntries(new Map([...map].filter(([layer]) => layer !== '(idle)' && layer !== '(root)')), top).map(
      ([layer, us]) => [layer, per(us)],
    );
  return {
    busyUsPerMessage: per(summary.busyUs),
    self: layers(summary.bySelfPackage),
    inclusive: layers(summary.byInclusiveLayer),
  };
}

/** One line of `cpuPerMessage`'s result. */
export function describeCpu({ busyUsPerMessage, self, inclusive }) {
  const list = (entries) => entries.map(([layer, us]) => `${layer} ${us}`).join(', ');
  return (
    `CPU ${busyUsPerMessage} µs/message in the span; self by layer: ${list(self)}; ` +
    `inclusive: ${list(inclusive)}`
  );
}
