import { writeFileSync } from 'node:fs';
import { relative } from 'node:path';
import type { Reporter, TestModule } from 'vitest/node';

/** How many of the slowest files the time table lists. */
const slowestShown = 15;

interface Span {
  start: number;
  end: number;
}

/**
 * Prints where the run's time went, then the plain closing line CI reads: `N passed, N failed,
 * N skipped`. The time table has, per project, its wall time (first file started to last file
 * ended), the files' own times added up and its file and test counts; then the slowest files.
 * With BRIDGE_TEST_TIMES set, the run's wall time in seconds is written to that file (.ci/run
 * puts it beside install, lint and build).
 */
export default class SummaryReporter implements Reporter {
  private readonly spans = new Map<string, Span>();
  private readonly startedAt = Date.now();

  onTestModuleStart(module: TestModule): void {
    this.spans.set(module.moduleId, { start: Date.now(), end: Date.now() });
  }

  onTestModuleEnd(module: TestModule): void {
    const span = this.spans.get(module.moduleId);
    if (span) span.end = Date.now();
  }

  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    for (const module of testModules) {
      for (const test of module.children.allTests()) {
        const state = test.result().state;
        if (state === 'passed') passed++;
        else if (state === 'failed') failed++;
        else skipped++;
      }
      if (module.state() === 'failed' && [...module.children.allTests()].length === 0) failed++;
    }
    const wallSeconds = (Date.now() - this.startedAt) / 1000;
    const table = this.timeTable(testModules, wallSeconds);
    const line = `${passed} passed, ${failed} failed, ${skipped} skipped`;
    if (process.env.BRIDGE_TEST_TIMES)
      writeFileSync(process.env.BRIDGE_TEST_TIMES, `${wallSeconds.toFixed(0)}\n`);
    // The default reporter prints its own summary after this hook; print ours last.
    process.once('beforeExit', () => process.stdout.write(`\n${table}\n\n${line}\n`));
  }

  private timeTable(modules: ReadonlyArray<TestModule>, wallSeconds: number): string {
    const files = modules.map((module) => ({
      project: module.project.name,
      file: relative(process.cwd(), module.moduleId),
      tests: [...module.children.allTests()].length,
      seconds: this.secondsOf(module),
      span: this.spans.get(module.moduleId),
    }));
    const projects = [...new Set(files.map((f) => f.project))].map((project) => {
      const mine = files.filter((f) => f.project === project);
      const spans = mine.flatMap((f) => (f.span ? [f.span] : []));
      const wall =
        spans.length === 0
          ? 0
          : (Math.max(...spans.map((s) => s.end)) - Math.min(...spans.map((s) => s.start))) / 1000;
      const own = mine.reduce((sum, f) => sum + f.seconds, 0);
      const tests = mine.reduce((sum, f) => sum + f.tests, 0);
      return [project, wall.toFixed(0), own.toFixed(0), String(mine.length), String(tests)];
    });
    const slowest = [...files]
      .sort((a, b) => b.seconds - a.seconds)
      .slice(0, slowestShown)
      .map((f) => [f.file, f.project, f.seconds.toFixed(1), String(f.tests)]);
    return [
      `time per project (vitest wall ${wallSeconds.toFixed(0)} s)`,
      columns([['project', 'wall s', 'files own s', 'files', 'tests'], ...projects]),
      '',
      `the ${slowestShown} slowest files`,
      columns([['file', 'project', 's', 'tests'], ...slowest]),
    ].join('\n');
  }

  /** The file's own time: its import and setup, then its tests and hooks. */
  private secondsOf(module: TestModule): number {
    const d = module.diagnostic();
    return (
      (d.environmentSetupDuration + d.prepareDuration + d.collectDuration + d.setupDuration + d.duration) /
      1000
    );
  }
}

/** Rows as aligned columns, the first left-aligned, the rest right-aligned. */
function columns(rows: string[][]): string {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((row) => (row[i] ?? '').length))) ?? [];
  return rows
    .map((row) =>
      row
        .map((cell, i) => (i === 0 ? cell.padEnd(widths[i] ?? 0) : cell.padStart(widths[i] ?? 0)))
        .join('  '),
    )
    .join('\n');
}
