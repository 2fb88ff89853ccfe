import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, extname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

// The project's documentation holds together: every relative link in README.md and docs/
// resolves (file and heading), and every requirement id the code, tests, tools, benchmarks and
// docs cite (R-…, U1–U8, invariant N) is defined in docs/design.md.

const root = resolve(import.meta.dirname, '..', '..');
const design = 'docs/design.md';

/** Files under `dir` (relative to the root) whose names end in one of `extensions`. */
function filesUnder(dir: string, extensions: readonly string[]): string[] {
  const found: string[] = [];
  const walk = (path: string): void => {
    for (const entry of readdirSync(join(root, path), { withFileTypes: true })) {
      const child = join(path, entry.name);
      if (entry.isDirectory()) {
        if (entry.name !== 'node_modules') walk(child);
      } else if (extensions.includes(extname(entry.name))) {
        found.push(child);
      }
    }
  };
  if (existsSync(join(root, dir))) walk(dir);
  return found.sort();
}

const read = (file: string): string => readFileSync(join(root, file), 'utf8');

// ── Markdown ──────────────────────────────────────────────────────────────────────────────────

/** Blanks (keeping the line breaks, so line numbers hold) what `pattern` matches. */
const blank = (text: string, pattern: RegExp): string =>
  text.replace(pattern, (code) => code.replace(/[^\n]/g, ' '));

/** The text without its fenced code blocks (``` or ~~~), each line of them left empty. */
function withoutFences(text: string): string {
  let fence: string | undefined;
  return text
    .split('\n')
    .map((line) => {
      const marker = /^ {0,3}(`{3,}|~{3,})/.exec(line)?.[1];
      if (fence === undefined) {
        if (marker === undefined) return line;
        fence = marker;
        return '';
      }
      if (marker !== undefined && marker[0] === fence[0] && marker.length >= fence.length) fence = undefined;
      return '';
    })
    .join('\n');
}

/** GitHub's anchor for a heading (github-slugger): lower case, punctuation but `-` and `_` gone, spaces → `-`. */
function slug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // a link shows its text
    .replace(/<[^>]+>/g, '') // HTML tags show nothing
    .trim();
  return text
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

/** Every anchor of a markdown file: its ATX headings' slugs (a repeat gets -1, -2, …) and HTML ids. */
function anchors(text: string): Set<string> {
  const counts = new Map<string, number>();
  const found = new Set<string>();
  const prose = withoutFences(text);
  for (const [, heading] of prose.matchAll(/^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$/gm)) {
    const base = slug(heading ?? '');
    let unique = base;
    if (counts.has(base)) {
      let n = counts.get(base)!;
      do {
        n += 1;
        unique = `${base}-${n}`;
      } while (counts.has(unique));
      counts.set(base, n);
    }
    counts.set(unique, 0);
    found.add(unique);
  }
  for (const [, id] of prose.matchAll(/<[a-z]+\s[^>]*\b(?:id|name)="([^"]+)"/gi)) found.add(id ?? '');
  return found;
}

interface Link {
  line: number;
  target: string;
}

/** The links of a markdown file (inline, images, reference definitions), outside code. */
function links(text: string): Link[] {
  const prose = blank(withoutFences(text), /``[\s\S]*?``|`[^`]+`/g);
  const inline =
    /!?\[(?:[^[\]]|\[[^[\]]*\])*\]\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)/g;
  const reference = /^ {0,3}\[[^\]\n]+\]:[ \t]*(<[^>\n]*>|\S+)/gm;
  return [...prose.matchAll(inline), ...prose.matchAll(reference)].map((match) => ({
    line: prose.slice(0, match.index).split('\n').length,
    target: (match[1] ?? '').replace(/^<(.*)>$/, '$1'),
  }));
}

/** What is wrong with a link from `file`, or undefined when it resolves. External links are not checked. */
function brokenLink(file: string, target: string): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('//')) return undefined;
  const hash = target.indexOf('#');
  const path = decodeURIComponent(hash === -1 ? target : target.slice(0, hash));
  const fragment = hash === -1 ? undefined : decodeURIComponent(target.slice(hash + 1));
  const resolved =
    path === ''
      ? join(root, file)
      : path.startsWith('/')
        ? join(root, path)
        : resolve(root, dirname(file), path);
  if (!existsSync(resolved)) return `${relative(root, resolved)} does not exist`;
  if (
    fragment === undefined ||
    fragment === '' ||
    extname(resolved) !== '.md' ||
    !statSync(resolved).isFile()
  ) {
    return undefined;
  }
  if (!anchors(readFileSync(resolved, 'utf8')).has(fragment)) {
    return `${relative(root, resolved)} has no heading whose anchor is #${fragment}`;
  }
  return undefined;
}

const markdownFiles = ['README.md', ...filesUnder('docs', ['.md'])];

describe('relative links in README.md and docs/', () => {
  it.each(markdownFiles)('%s: every relative link resolves', (file) => {
    const broken = links(read(file)).flatMap(({ line, target }) => {
      const problem = brokenLink(file, target);
      return problem === undefined ? [] : [`${file}:${line} (${target}): ${problem}`];
    });
    expect(broken).toEqual([]);
  });

  it('anchors are GitHub heading slugs, repeats numbered', () => {
    expect(slug('Replies and `idempotency_key`s: R-H8 (part 2)!')).toBe(
      'replies-and-idempotency_keys-r-h8-part-2',
    );
    expect(slug('See [the README](../README.md) — why')).toBe('see-the-readme--why');
    const text = '# Notes\n## Notes\n```sh\n# Notes\n```\n### Notes\n';
    expect([...anchors(text)]).toEqual(['notes', 'notes-1', 'notes-2']);
  });
});

// ── Requirement ids ───────────────────────────────────────────────────────────────────────────

/** Where ids are cited; docs/ also holds the generated diagrams (.mmd) and their page (.html). */
const citingFiles = [
  ...['src', 'test', 'tools', 'bench'].flatMap((dir) => filesUnder(dir, ['.ts', '.mjs', '.js', '.md'])),
  'README.md',
  ...filesUnder('docs', ['.md', '.mmd', '.html']),
].filter((file) => existsSync(join(root, file)));

/** The ids a text cites: `R-DL5`, `U3`, and `Invariant N` for "invariant 6", "invariants 3 and 5", "invariants 1–6". */
function citedIds(text: string): Set<string> {
  const ids = new Set<string>();
  for (const [id] of text.matchAll(/\bR-[A-Z]+\d+/g)) ids.add(id);
  for (const [id] of text.matchAll(/\bU[1-8]\b/g)) ids.add(id);
  const list = /\binvariants?\s+(\d+(?:\s*(?:,|and|or|&|–|-)\s*\d+)*)/gi;
  for (const [, numbers = ''] of text.matchAll(list)) {
    for (const part of numbers.split(/\s*(?:,|and|or|&)\s*/)) {
      const [from = 0, to = from] = part.split(/\s*[–-]\s*/).map(Number);
      for (let n = from; n <= to; n++) ids.add(`Invariant ${n}`);
    }
  }
  return ids;
}

const designText = read(design);
const idPattern = String.raw`R-[A-Z]+\d+|U[1-8]|Invariant \d+`;
/** Ids defined by a heading or list item that starts with the id in bold: `- **R-DL5** — …`. */
const defined = new Set(
  [...designText.matchAll(new RegExp(String.raw`^(?:#{1,6}|[-*])[ \t]+\*\*(${idPattern})\*\*`, 'gm'))].map(
    (match) => match[1],
  ),
);

describe(`requirement ids are defined in ${design}`, () => {
  it('every cited id is defined (each listed with one file that cites it)', () => {
    const citedBy = new Map<string, string>();
    for (const file of citingFiles) {
      for (const id of citedIds(read(file))) if (!citedBy.has(id)) citedBy.set(id, file);
    }
    const undefinedIds = [...citedBy]
      .filter(([id]) => !defined.has(id))
      .map(([id, file]) => `${id} (cited in ${file})`)
      .sort();
    expect(undefinedIds, `define these in ${design} as **ID**`).toEqual([]);
  });

  it('defines each id once, in bold at the start of a heading or list item', () => {
    const bold = [...designText.matchAll(new RegExp(String.raw`\*\*(${idPattern})\*\*`, 'g'))].map(
      (m) => m[1],
    );
    const repeated = bold.filter((id, i) => bold.indexOf(id) !== i);
    const inProse = bold.filter((id) => !defined.has(id));
    expect({ repeated, inProse }).toEqual({ repeated: [], inProse: [] });
  });

  it('reads citations as the ids they name', () => {
    const ids = citedIds('R-DL4/R-DL5 and U8; invariants 3 and 5, invariant 6; Invariants 1–2; U9, XU1');
    expect([...ids].sort()).toEqual(
      [
        'Invariant 1',
        'Invariant 2',
        'Invariant 3',
        'Invariant 5',
        'Invariant 6',
        'R-DL4',
        'R-DL5',
        'U8',
      ].sort(),
    );
  });
});
