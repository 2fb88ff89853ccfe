import { performance } from 'node:perf_hooks';
import { fleetRatioNote, renderFleet } from '../lib/fleetReport.mjs';
import { commandLine, loadAverage, machineInfo } from '../lib/report.mjs';
import { broadcastScenario } from './broadcast.mjs';
import { idleScenario } from './idle.mjs';
import { latencyScenario } from './latency.mjs';
import { quorumScenario } from './quorum.mjs';
import { rosterScenario } from './roster.mjs';
import { scaleScenario } from './scale.mjs';

/**
 * The fleet scenarios (issue 7): latency at a fixed rate, 10,000 entities on one gateway,
 * broadcast to 1,000 inboxes, roster convergence across 5 gateways; and quorum vs classic
 * inboxes on a 3-node cluster. Each is selected by its name
 * in BENCH_ONLY, runs on its own (own gateways, own temp dirs under the run's, own queues, all
 * removed afterwards) and returns rows of (gateway figure, baseline or target, ratio) that
 * bench/lib/fleetReport.mjs writes into a section of bench/results.md and the `fleet` key of
 * bench/results.json, keeping the rows of the scenarios that did not run.
 *
 * A scenario: { name, title, steps (progress-bar steps it takes, about), timeoutMs (its share of
 * BENCH_TIMEOUT_MS), run(ctx) → { settings, rows, measures, check?, notes?, raw? } }, where ctx
 * has the run's dir, brokerUri, gatewayConfig(File), deliveryTimeoutMs, textBytes, cpuProfDir
 * and progress (bench/lib/progress.mjs).
 */
export const fleetScenarios = [
  latencyScenario,
  scaleScenario,
  broadcastScenario,
  rosterScenario,
  quorumScenario,
  idleScenario,
];

export const fleetNames = fleetScenarios.map((scenario) => scenario.name);

const wantedOf = (wanted) => fleetScenarios.filter((scenario) => wanted.includes(scenario.name));

/** The share of BENCH_TIMEOUT_MS the wanted fleet scenarios need (`only`: BENCH_ONLY's value). */
export function fleetTimeoutMs(only) {
  const wanted = only.split(',').map((part) => part.trim());
  return wantedOf(wanted).reduce((sum, scenario) => sum + scenario.timeoutMs, 0);
}

/** How many progress-bar steps the wanted fleet scenarios take (about). */
export function fleetSteps(wanted) {
  return wantedOf(wanted).reduce((sum, scenario) => sum + scenario.steps, 0);
}

/** Runs the wanted fleet scenarios one after the other; returns { [name]: result }. */
export async function runFleet(wanted, ctx) {
  const results = {};
  for (const scenario of wantedOf(wanted)) {
    const started = performance.now();
    const loadAtStart = loadAverage();
    const outcome = await scenario.run(ctx);
    results[scenario.name] = {
      name: scenario.name,
      title: scenario.title,
      date: new Date().toISOString(),
      command: commandLine(),
      durationSeconds: Math.round((performance.now() - started) / 100) / 10,
      machine: machineInfo(ctx.dir, loadAtStart),
      ...outcome,
    };
    console.error(`\n${renderFleet(outcome.rows)}\n`);
  }
  return results;
}

/** The fleet rows of `results` as terminal text. */
export function renderFleetResults(results) {
  return `${renderFleet(Object.values(results).flatMap((result) => result.rows))}\n\n${fleetRatioNote}`;
}
