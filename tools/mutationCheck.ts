/**
 * The unit tier's mutation check (`npm run mutation`): disables one rule of the send and
 * delivery paths at a time, in the source, runs the unit project, and says which cases failed.
 * A rule whose disabling no unit case notices is reported, and the run exits 1. The source is
 * restored after each run, also when the run is interrupted.
 *
 *   npm run mutation                 every mutation
 *   npm run mutation -- fifo dedup   the ones named
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { constants, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

interface Mutation {
  /** What the mutation disables. */
  readonly rule: string;
  readonly file: string;
  /** Each a text that occurs once in the file, and what it becomes (two where a rule is kept twice). */
  readonly changes: ReadonlyArray<{ readonly from: string; readonly to: string }>;
}

const mutations: Record<string, Mutation> = {
  fifo: {
    rule: 'FIFO: a head in flight keeps the messages behind it waiting',
    file: 'src/machines/nextInjection.ts',
    changes: [{ from: "return { verdict: 'wait', why: 'head-in-flight' };", to: 'continue;' }],
  },
  dialogHold: {
    rule: 'the dialog hold: a delivery the pane deferred waits until the pane is ready',
    file: 'src/deliver/Delivery.ts',
    changes: [
      {
        from: "if (hold === undefined) cell.send({ type: 'delivery.paneReady' });",
        to: "if (hold === undefined || hold !== undefined) cell.send({ type: 'delivery.paneReady' });",
      },
    ],
  },
  dialogReading: {
    rule: 'the dialog hold: a pane that shows a dialog is held',
    file: 'src/panes/verifiedSubmission.ts',
    changes: [
      {
        from: 'if (dialog !== null) {\n    return {\n      reason: DeferReason.blocked,',
        to: 'if (dialog === "never") {\n    return {\n      reason: DeferReason.blocked,',
      },
    ],
  },
  forwardOnly: {
    rule: 'receipts move a send forward only (here: a typed send takes a stale queued)',
    file: 'src/machines/sendMachine.ts',
    changes: [
      {
        from: "typed: { on: { 'send.receipt': receiptTransitions(ReceiptStage.typed) } },",
        to: "typed: { on: { 'send.receipt': receiptTransitions(null) } },",
      },
    ],
  },
  dedup: {
    rule: 'dedup by msgId: a message an entity already has (in memory or in the log) is a duplicate',
    file: 'src/deliver/EntityActor.ts',
    changes: [
      {
        from: 'if (this.deliveries.has(envelope.msgId)) {',
        to: 'if (this.deliveries.has(envelope.msgId) && false) {',
      },
      {
        from: '    if (head) {\n      // Dead-lettered here once',
        to: '    if (head && false) {\n      // Dead-lettered here once',
      },
    ],
  },
};

const root = join(import.meta.dirname, '..');
const wanted = process.argv.slice(2);
const unknown = wanted.filter((name) => !(name in mutations));
if (unknown.length > 0) {
  console.error(
    `mutationCheck: no mutation ${unknown.join(', ')}; there are ${Object.keys(mutations).join(', ')}`,
  );
  process.exit(2);
}

/** How long one unit run may take: a mutation can make a case loop forever. */
const runTimeoutMs = 300_000;

/** The unit cases that failed, from vitest's JSON report; undefined if the run left none. */
async function failedCases(): Promise<string[] | undefined> {
  const report = join(mkdtempSync(join(tmpdir(), 'bridge-mutation-')), 'report.json');
  // Its own process group, so a run that does not end is stopped whole.
  const run = spawn(
    'npx',
    ['vitest', 'run', '--project', 'unit', '--reporter', 'json', '--outputFile', report],
    {
      cwd: root,
      stdio: 'ignore',
      detached: true,
    },
  );
  const timer = setTimeout(() => process.kill(-(run.pid as number), 'SIGKILL'), runTimeoutMs);
  await new Promise((resolve) => run.once('exit', resolve));
  clearTimeout(timer);
  if (!existsSync(report)) return undefined;
  const results = JSON.parse(readFileSync(report, 'utf8')) as {
    testResults: Array<{
      name: string;
      status: string;
      message?: string;
      assertionResults: Array<{ fullName: string; status: string }>;
    }>;
  };
  rmSync(dirname(report), { recursive: true, force: true });
  // A file that did not load (the mutated source does not compile) proves nothing.
  const unloaded = results.testResults.find(
    (file) => file.status === 'failed' && file.assertionResults.length === 0,
  );
  if (unloaded) throw new Error(`${unloaded.name} did not run: ${unloaded.message ?? 'no message'}`);
  return results.testResults.flatMap((file) =>
    file.assertionResults
      .filter((test) => test.status === 'failed')
      .map((test) => `${file.name.slice(root.length + 1)} > ${test.fullName}`),
  );
}

/** Puts back the file being mutated, if one is. */
let restoreCurrent: (() => void) | undefined;
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.on(signal, () => {
    restoreCurrent?.();
    process.exit(128 + constants.signals[signal]);
  });
}

let unnoticed = 0;
for (const [name, mutation] of Object.entries(mutations)) {
  if (wanted.length > 0 && !wanted.includes(name)) continue;
  const path = join(root, mutation.file);
  const original = readFileSync(path, 'utf8');
  const { changes } = mutation;
  for (const change of changes) {
    const at = original.indexOf(change.from);
    if (at < 0 || original.indexOf(change.from, at + 1) >= 0) {
      console.error(
        `mutationCheck: ${name}: the text to change is not in ${mutation.file} exactly once; update the mutation`,
      );
      process.exit(2);
    }
  }
  const restore = () => {
    writeFileSync(path, original);
    restoreCurrent = undefined;
  };
  restoreCurrent = restore;
  const started = Date.now();
  writeFileSync(
    path,
    changes.reduce((text, change) => text.replace(change.from, change.to), original),
  );
  let failed: string[] | undefined;
  try {
    failed = await failedCases();
  } finally {
    restore();
  }
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  if (failed === undefined) {
    console.log(
      `\n${name}: the unit run left no report after ${seconds} s (a case looped past ${runTimeoutMs / 1000} s, or vitest crashed); run it by hand with the change to see why`,
    );
    unnoticed++;
    continue;
  }
  console.log(
    `\n${name} (${mutation.rule}; ${mutation.file}): ${failed.length} unit cases fail (${seconds} s)`,
  );
  for (const line of failed.slice(0, 8)) console.log(`  ${line}`);
  if (failed.length > 8) console.log(`  … and ${failed.length - 8} more`);
  if (failed.length === 0) unnoticed++;
}
if (unnoticed > 0) {
  console.log(`\n${unnoticed} mutation(s) no unit case noticed`);
  process.exit(1);
}
console.log('\nevery mutation made a unit case fail');
