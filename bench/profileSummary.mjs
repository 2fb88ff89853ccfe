// Summarizes a V8 .cpuprofile (from `node --cpu-prof`, or BENCH_CPU_PROF=DIR for the daemon):
// self time by package/file and by function, and inclusive time by function.
// Usage: node bench/profileSummary.mjs FILE.cpuprofile [TOP=25]
import { readFileSync } from 'node:fs';

const [file, top = '25'] = process.argv.slice(2);
if (!file) {
  console.error('usage: node bench/profileSummary.mjs FILE.cpuprofile [TOP]');
  process.exit(2);
}
const profile = JSON.parse(readFileSync(file, 'utf8'));
const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
const parents = new Map();
for (const node of profile.nodes) for (const child of node.children ?? []) parents.set(child, node.id);

const sampled = new Map();
for (const [i, id] of profile.samples.entries()) {
  sampled.set(id, (sampled.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
}
const total = [...sampled.values()].reduce((sum, us) => sum + us, 0);

const shortUrl = (url) => url.replace(/.*node_modules\//, '').replace(/^file:\/\/.*?\/(dist|bench)\//, '$1/');
const functionOf = ({ callFrame: f }) =>
  `${f.functionName || '(anonymous)'} ${shortUrl(f.url)}:${f.lineNumber + 1}`;
const packageOf = ({ callFrame: f }) => {
  if (!f.url) return f.functionName.startsWith('(') ? f.functionName : '(native)';
  const dependency = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(f.url);
  if (dependency) return dependency[1];
  return shortUrl(f.url).split('/').slice(0, 2).join('/');
};

const bySelfPackage = new Map();
const bySelfFunction = new Map();
const byInclusive = new Map();
const add = (map, key, us) => map.set(key, (map.get(key) ?? 0) + us);
for (const [id, us] of sampled) {
  const node = nodes.get(id);
  add(bySelfPackage, packageOf(node), us);
  add(bySelfFunction, functionOf(node), us);
  // Count each function once per sample, however often it recurs on the stack.
  const onStack = new Set();
  for (let at = id; at !== undefined; at = parents.get(at)) onStack.add(functionOf(nodes.get(at)));
  for (const key of onStack) add(byInclusive, key, us);
}

function print(title, map) {
  console.log(`\n== ${title} (of ${(total / 1000).toFixed(0)} ms sampled)`);
  const rows = [...map].sort((a, b) => b[1] - a[1]).slice(0, Number(top));
  for (const [key, us] of rows) console.log(`${((100 * us) / total).toFixed(1).padStart(5)}%  ${key}`);
}

print('self time by package or file', bySelfPackage);
print('self time by function', bySelfFunction);
print('inclusive time by function', byInclusive);
