#!/usr/bin/env node
// Architecture checks the linter cannot express:
// 1. src/machines stays pure: no I/O imports, no wall clock (STYLE.md "Machines are pure").
// 2. src/machines spawn no children: kernel/pureTransition.ts shares one actor scope per
//    machine across calls, which is only safe while no machine invokes or spawns an actor.
// 3. No import cycles in src/, type-only imports included: a type shared by two modules lives
//    where both can import it (STYLE.md "Type-only import cycles are cycles").
// 4. File names follow STYLE.md "Names": a file whose main export is a class is spelled as
//    that class (`Gateway.ts`), every other file in camelCase after its main export; so a
//    file exporting a class named like itself in another case is misnamed, and a PascalCase
//    file exports a class of its name. Checked in src/ and test/support/.
// 5. Each folder of src/ imports only what its README.md's "May import:" line allows: the
//    base folders only those below them (text, wire, machines/config/log, security, store,
//    metrics, kernel), a message's flows the base and the flows below them (a pane knows no
//    delivery, a delivery no sender, federation no send; what a lower flow needs from a higher
//    one it is given as a port), the edges (interfaces, cli, daemon, ...) what they name.
//    Type-only imports count: a port's type lives where the lower flow owns it.
// 6. The composition root (Gateway.assemble) builds in dependency order: nothing it builds is
//    named before its own line, so no closure reaches a service built later (a runtime cycle
//    the import rules cannot see). A lower flow gets what it needs from a higher one through a
//    port handed over once the higher one exists (Federation.serve).
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
const impureLocal =
  /\/(store|kernel|deliver|send|ask|spawn|federation|gateway|panes|interfaces|cli|log|metrics)\//;

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
      `${relative(root, file)} has \`${child[0].replace(/\s+/g, '')}\`; machines spawn no children (kernel/pureTransition.ts shares one actor scope per machine)`,
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

/**
 * What each folder may import, read from the `May import:` line of its README.md (the one
 * place the rule is written): "the base folders", errors.ts and folder names. A base folder's README
 * says it is one ("Base folder"); errors.ts, at the top of src/, is base too.
 */
const folders = readdirSync(src).filter((name) => statSync(join(src, name)).isDirectory());
const rules = new Map();
const base = new Set(['errors.ts']);
for (const folder of folders) {
  const readme = join(src, folder, 'README.md');
  let text;
  try {
    text = readFileSync(readme, 'utf8');
  } catch {
    problems.push(`src/${folder}/ has no README.md saying what it owns and what it may import`);
    continue;
  }
  const line = text.match(/^May import: (.+)\.$/m);
  if (!line) {
    problems.push(`${relative(root, readme)} has no "May import: …." line`);
    continue;
  }
  const may = line[1].split(/,\s*/);
  const unknown = may.filter(
    (name) => name !== 'the base folders' && name !== 'errors.ts' && !folders.includes(name),
  );
  if (unknown.length > 0) problems.push(`${relative(root, readme)} names no folder ${unknown.join(', ')}`);
  rules.set(folder, { may, withBase: may.includes('the base folders') });
  if (/^Base folder\b/m.test(text)) base.add(folder);
}
const folderOf = (file) => relative(src, file).split('/')[0];
for (const file of files) {
  const folder = folderOf(file);
  const rule = rules.get(folder);
  if (!rule) continue;
  for (const target of allImports.get(file) ?? []) {
    const to = folderOf(target);
    if (to === folder || (rule.withBase && base.has(to)) || rule.may.includes(to)) continue;
    problems.push(
      `${relative(root, file)} imports ${relative(root, target)}: src/${folder}/README.md says it may import ${rule.may.join(', ')}, not ${to}/; pass what it needs as a port`,
    );
  }
}

const composition = join(src, 'gateway', 'Gateway.ts');
const assembleBody = readFileSync(composition, 'utf8').match(
  /\n {2}private assemble\([^)]*\)[^{]*\{\n([\s\S]*?)\n {2}\}\n/,
);
if (!assembleBody) problems.push(`${relative(root, composition)} has no assemble method to check`);
else {
  const lines = withoutComments(assembleBody[1]).split('\n');
  lines.forEach((line, at) => {
    const built = line.match(/^ {4}const (\w+)\b/)?.[1];
    if (built === undefined) return;
    const early = lines.slice(0, at).findIndex((before) => new RegExp(`\\b${built}\\b`).test(before));
    if (early >= 0) {
      problems.push(
        `${relative(root, composition)}: assemble names ${built} before it is built (\`${lines[early].trim()}\`): build in dependency order and hand a lower flow a port once the higher one exists`,
      );
    }
  });
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
  `checkImports: ${files.length} files, machines pure, each folder imports what its README allows, assembled in dependency order, no import cycles, file names follow their exports`,
);
