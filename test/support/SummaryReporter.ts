import type { Reporter, TestModule } from 'vitest/node';

/** Prints the plain closing line CI reads: `N passed, N failed, N skipped`. */
export default class SummaryReporter implements Reporter {
  private line = '';

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
    this.line = `${passed} passed, ${failed} failed, ${skipped} skipped`;
    // The default reporter prints its own summary after this hook; print ours last.
    process.once('beforeExit', () => process.stdout.write(`\n${this.line}\n`));
  }
}
