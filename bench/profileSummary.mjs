// Summarizes a V8 .cpuprofile (from `node --cpu-prof`, or BENCH_CPU_PROF=DIR / BENCH_PROFILE=1 for
// the daemons): self time by package/file and by function, inclusive time by function and by layer.
// Usage: node bench/profileSummary.mjs FILE.cpuprofile [TOP=25]
import { summarizeProfile, topEntries } from './lib/cpuProfile.mjs';

const [file, top = '25'] = process.argv.slice(2);
if (!file) {
  console.error('usage: node bench/profileSummary.mjs FILE.cpuprofile [TOP]');
  process.exit(2);
}
const summary = summarizeProfile(file);

function print(title, map) {
  console.log(`\n== ${title} (of ${(summary.totalUs / 1000).toFixed(0)} ms sampled)`);
  for (const [key, us] of topEntries(map, Number(top))) {
    console.log(`${((100 * us) / summary.totalUs).toFixed(1).padStart(5)}%  ${key}`);
  }
}

print('self time by package or file', summary.bySelfPackage);
print('self time by function', summary.bySelfFunction);
print('inclusive time by function', summary.byInclusive);
print(
  'inclusive time by layer (a dist/ folder or a dependency, with what it called)',
  summary.byInclusiveLayer,
);
