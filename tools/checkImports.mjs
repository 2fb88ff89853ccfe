#!/usr/bin/env node
// Architecture checks the linter cannot express:
// 1. src/machines stays pure: no I/O imports, no wall clock (STYLE.md "Machines are pure").
// 2. src/machines spawn no children: runtime/pureTransition.ts shares one actor scope per
//    machine across calls, which is only safe while no machine invokes or spawns an actor.
// 3. No import cycles in src/, type-only imports included: a type shared by two modules lives
//    where both can import it (STYLE.md "Type-only import cycles are cycles").
// 4. File names follow STYLE.md "Names": a file whose main export is a class is spelled as
//    that class (`Gateway.ts`), every other file in camelCase after its main export; so a
//    file exporting a class named like itself in another case is misnamed, and a PascalCase
//    file exports a class of its name. Checked in src/ and test/support/.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const root = resolve(dirname(new URL(import.meta.url).pathname), '..');
const src = join(root, 'src');
const testSupport = join(root, 'test', 'support');

function walk(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path) : path.endsWith('.ts') ? [path] : [];
  });
}

const childActorPattern = /\binvoke\s*:|\bspawnChild\b|\bspawn\s*\(/;
const withoutComments = (text) => text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:])\/\/.*$/gm, '$1');
const importPattern = /^\s*(import|export)\s+(type\s+)?[^'"]*?from\s+['"]([^'"]+)['"]/gm;
const files = walk(src);
/** Local imports by file: purity follows the runtime ones; cycles count type-only ones too. */
const runtimeImports = new Map();
const allImports = new Map();
const impureImports = new Map();
const problems = [];

const impureModules = /^(node:|fs$|net$|child_process$|http$|better-sqlite3$|amqplib$|pino$|prom-client$)/;
const impureLocal = /\/(store|actors|runtime|inject|interfaces|daemon|cli|log|metrics)\//;

for (const file of files) {
  const text = readFileSync(file, 'utf8');
  const edges = [];
  const allEdges = [];
  for (const match of text.matchAll(importPattern)) {
    const [, , typeOnly, spec] = match;
    const inMachines = file.startsWith(join(src, 'machines'));
    if (
      inMachines &&
      !typeOnly &&
      (impureModules.test(spec) || impureLocal.test(`/${spec.replace(/^\.\.?\//, '')}`))
    ) {
      problems.push(`${relative(root, file)} imports ${spec}: machines must stay pure (actors do the I/O)`);
    }
    if (!typeOnly && impureModules.test(spec)) impureImports.set(file, spec);
    if (!spec.startsWith('.')) continue;
    const target = resolve(dirname(file), spec.replace(/\.js$/, '.ts'));
    allEdges.push(target);
    if (!typeOnly) edges.push(target);
  }
  if (file.startsWith(join(src, 'machines')) && /Date\.now\(\)|new Date\(/.test(text)) {
    problems.push(`${relative(root, file)} reads the wall clock: inject time instead`);
  }
  const child = file.startsWith(join(src, 'machines')) && withoutComments(text).match(childActorPattern);
  if (child) {
    problems.push(
      `${relative(root, file)} has \`${child[0].replace(/\s+/g, '')}\`; machines spawn no children (runtime/pureTransition.ts shares one actor scope per machine)`,
    );
  }
  runtimeImports.set(file, edges);
  allImports.set(file, allEdges);
}

// Machines may import local modules only if those are pure too, all the way down.
for (const file of files.filter((f) => f.startsWith(join(src, 'machines')))) {
  const seen = new Set([file]);
  const queue = [...(runtimeImports.get(file) ?? [])];
  while (queue.length > 0) {
    const next = queue.shift();
    if (seen.has(next)) continue;
    seen.add(next);
    if (impureImports.has(next)) {
      problems.push(
        `${relative(root, file)} reaches ${relative(root, next)}, which imports ${impureImports.get(next)}`,
      );
    }
    queue.push(...(runtimeImports.get(next) ?? []));
  }
}

const classPattern = /^export\s+(?:default\s+)?(?:abstract\s+)?class\s+(\w+)/gm;
for (const file of [...files, ...walk(testSupport)]) {
  const stem = file.slice(dirname(file).length + 1).replace(/\.ts$/, '');
  const classes = [...readFileSync(file, 'utf8').matchAll(classPattern)].map((m) => m[1]);
  const named = classes.find((name) => name.toLowerCase() === stem.toLowerCase());
  if (named !== undefined && named !== stem) {
    problems.push(`${relative(root, file)} exports class ${named}: name the file ${named}.ts`);
  } else if (/^[A-Z]/.test(stem) && named === undefined) {
    problems.push(
      `${relative(root, file)} is PascalCase but exports no class ${stem}: camelCase after its main export`,
    );
  }
}

const state = new Map();
const stack = [];
function visit(file) {
  state.set(file, 'open');
  stack.push(file);
  for (const next of allImports.get(file) ?? []) {
    if (state.get(next) === 'open') {
      const cycle = stack
        .slice(stack.indexOf(next))
        .concat(next)
        .map((f) => relative(src, f));
      problems.push(`import cycle: ${cycle.join(' -> ')}`);
    } else if (!state.has(next)) visit(next);
  }
  stack.pop();
  state.set(file, 'done');
}
for (const file of files) if (!state.has(file)) visit(file);

if (problems.length > 0) {
  for (const problem of problems) console.error(`checkImports: ${problem}`);
  process.exit(1);
}
console.log(
  `checkImports: ${files.length} files, machines pure, no import cycles, file names follow their exports`,
);
