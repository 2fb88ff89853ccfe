import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { clusterHosts, inParallel, startDaemons, startMember, withCluster } from '../lib/cluster.mjs';
import { finishRow } from '../lib/fleetReport.mjs';
import { intSetting } from '../lib/settings.mjs';

/**
 * Roster convergence across 5 gateways (`BENCH_ONLY=roster`): five `agentbridge start` daemons
 * (separate processes, the shared broker, signing on, every one trusting every other), each
 * registering N entities (mains, over its admin socket). Presence (U5): each gateway announces a
 * signed snapshot of its entities on every change and every heartbeat; a host's entries expire
 * after heartbeatMs × presenceTtlBeats without one.
 *
 * - join: daemons 1-4 run with their entities; daemon 5 is spawned (t0), registers its N once up;
 *   timed until every gateway's roster (polled over the admin sockets every 20 ms) lists all 5×N.
 *   The bound: daemon 5 announces on connect and on each registration, so the others learn its
 *   entities at once; it learns theirs at their next heartbeat, at most heartbeatMs after its
 *   roster queue is bound. Baseline: (t0 → daemon 5 ready and registered) + heartbeatMs.
 * - leave: daemon 3 is killed (SIGKILL: no goodbye); timed until no remaining roster lists its
 *   entities (and each still lists the other 4×N). Bound: its last presence + TTL, so at most
 *   the TTL (heartbeatMs × presenceTtlBeats) after the kill (at least TTL − heartbeatMs). Baseline: the TTL.
 *
 * Settings (env): BENCH_ROSTER_GATEWAYS (5), BENCH_ROSTER_ENTITIES (per gateway, 20). The
 * heartbeat and TTL are the gateways' config (defaults 5 s × 3; BENCH_GATEWAY_CONFIG to change).
 * Inboxes and control queues are deleted afterwards; the roster queues are exclusive, auto-delete.
 */

const pollMs = 20;

/** Polls every member's roster until `done(entries of our hosts, member)` holds for all; returns when. */
async function until(members, done, { timeoutMs, what }) {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const views = await Promise.all(members.map((member) => member.roster()));
    const now = performance.now();
    if (views.every((view, i) => done(view, members[i]))) return now;
    if (now > deadline) {
      const counts = views.map((view, i) => `${members[i].host}: ${view.length}`).join(', ');
      throw new Error(`roster: ${what} not reached within ${timeoutMs} ms (${counts})`);
    }
    await sleep(pollMs);
  }
}

export const rosterScenario = {
  name: 'roster',
  title: 'roster convergence across 5 gateway daemons: join and expiry',
  steps: 4,
  timeoutMs: 120_000,
  async run(ctx) {
    const settings = {
      gateways: intSetting('BENCH_ROSTER_GATEWAYS', 5, 2),
      entities: intSetting('BENCH_ROSTER_ENTITIES', 20, 1),
    };
    const { heartbeatMs, presenceTtlBeats } = ctx.gatewayConfig.broker;
    const ttlMs = heartbeatMs * presenceTtlBeats;
    const { dir, brokerUri, gatewayConfigFile, progress } = ctx;
    const total = settings.gateways * settings.entities;
    const result = await withCluster(brokerUri, async (teardown, queues) => {
      const hosts = clusterHosts('roster', settings.gateways);
      const ours = new Set(hosts);
      const common = { dir, name: 'roster', brokerUri, configFile: gatewayConfigFile, teardown, queues };
      const registerAll = (member) =>
        inParallel(settings.entities, 4, (i) => member.register(`e${i}`, 'main'));

      progress.step(
        `roster: start ${settings.gateways - 1} daemons, ${settings.entities} entities each`,
        settings.gateways - 1,
      );
      const first = await startDaemons({ ...common, hosts, start: hosts.slice(0, -1) });
      for (const [i, member] of first.entries()) {
        await registerAll(member);
        progress.update(i + 1);
      }

      progress.step(`roster: start daemon ${settings.gateways}, wait for ${total} entries everywhere`);
      const t0 = performance.now();
      // gateways ≥ 2, so there is a last host.
      const last = await startMember({ ...common, host: /** @type {string} */ (hosts.at(-1)) });
      const readyMs = performance.now() - t0;
      await registerAll(last);
      const registeredMs = performance.now() - t0;
      const members = [...first, last];
      const complete = (expectedHosts) => (view) => {
        const seen = view.filter((entry) => ours.has(entry.host));
        return (
          seen.length === expectedHosts.size * settings.entities &&
          [...expectedHosts].every(
            (host) => seen.filter((entry) => entry.host === host).length === settings.entities,
          )
        );
      };
      const joinedAt = await until(members, complete(ours), {
        timeoutMs: registeredMs + heartbeatMs * 3 + 10_000,
        what: `all ${total} entries everywhere`,
      });
      const joinMs = joinedAt - t0;
      console.error(
        `roster: join converged ${Math.round(joinMs)} ms after the last start ` +
          `(ready ${Math.round(readyMs)} ms, registered ${Math.round(registeredMs)} ms; bound ${Math.round(registeredMs + heartbeatMs)} ms)`,
      );

      const victimIndex = Math.min(2, members.length - 1);
      const victim = members[victimIndex];
      progress.step(
        `roster: kill daemon ${victimIndex + 1}, wait for its entries to expire (TTL ${ttlMs} ms)`,
      );
      const survivors = members.filter((member) => member !== victim);
      const remaining = new Set(hosts.filter((host) => host !== victim.host));
      const killedAt = performance.now();
      await victim.kill();
      const expiredAt = await until(survivors, complete(remaining), {
        timeoutMs: ttlMs + heartbeatMs * 2 + 10_000,
        what: `${victim.host} expired everywhere`,
      });
      const leaveMs = expiredAt - killedAt;
      console.error(
        `roster: ${victim.host} expired everywhere ${Math.round(leaveMs)} ms after the kill (TTL ${ttlMs} ms)`,
      );
      progress.step('roster: stop the daemons, delete the queues');
      return { joinMs, readyMs, registeredMs, leaveMs, victim: victim.host, hosts };
    });

    const rounded = (ms) => Math.round(ms) / 1000;
    const label = `roster: ${settings.gateways} daemons × ${settings.entities} entities`;
    const joinBound = result.registeredMs + heartbeatMs;
    return {
      settings: { ...settings, heartbeatMs, presenceTtlBeats, ttlMs, pollMs },
      rows: [
        {
          metric: `join: last start → all ${total} entries on every gateway`,
          gateway: rounded(result.joinMs),
          baseline: rounded(joinBound),
          baselineLabel: 'bound: registered + 1 heartbeat',
          target: { op: '<', value: rounded(joinBound) },
        },
        {
          metric: 'leave: kill -9 → its entries gone from every roster',
          gateway: rounded(result.leaveMs),
          baseline: rounded(ttlMs),
          baselineLabel: `bound: TTL (${presenceTtlBeats} × ${heartbeatMs} ms heartbeat)`,
          target: { op: '<', value: rounded(ttlMs + pollMs) },
        },
      ].map((row) => finishRow({ label, unit: 's', better: 'lower', ...row })),
      measures: [
        `${settings.gateways} \`agentbridge start\` daemons (separate processes, one broker, signing on, all trusting each other), ${settings.entities} mains registered on each over its admin socket; every roster read over the admin sockets (\`agentbridge roster\`’s route) every ${pollMs} ms.`,
        `join: from spawning the last daemon (ready after ${rounded(result.readyMs)} s, its ${settings.entities} entities registered after ${rounded(result.registeredMs)} s) until all ${settings.gateways} rosters list all ${total} entities; the bound is that time plus one heartbeat (${heartbeatMs} ms): the others learn the newcomer’s entities from its announcements at once, it learns theirs from their next heartbeat.`,
        `leave: daemon ${result.victim} killed with SIGKILL (no goodbye); from the kill until no remaining roster lists it (each still lists the others’ ${total - settings.entities}). Entries expire at their host’s last presence + TTL (${presenceTtlBeats} × ${heartbeatMs} ms = ${ttlMs} ms), so between TTL − 1 heartbeat and TTL after the kill, plus the ${pollMs} ms poll.`,
      ],
      check: `every roster listed exactly the ${total} entities of the run’s hosts after the join, and the other ${total - settings.entities} after the kill`,
      raw: result,
    };
  },
};
