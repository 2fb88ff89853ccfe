import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { controlSpec, inboxName } from '#bridge/federation/topology';
import { adminRoutes } from '#bridge/interfaces/adminProtocol';
import { initKeys } from '#bridge/security/keys';
import { addTrust } from '#bridge/security/TrustStore';
import { deleteQueues } from './broker.mjs';
import { adminClient, startDaemon } from './daemon.mjs';
import { createTeardown } from './processes.mjs';

/** @typedef {import('./processes.mjs').Teardown} Teardown */

/**
 * Several gateways federated through the shared broker, for the fleet scenarios (latency,
 * broadcast, roster): unique host ids, a home each, every gateway trusting every other's key
 * (signing stays on, as in production), and a teardown that stops them and deletes every queue
 * they leave on the broker (the inboxes of the entities registered through `register`, and
 * `control.<host>`), also when the run fails.
 */

/**
 * Host ids `bench-<tag>-<i>-<suffix>`, unique per call.
 * @param {string} tag
 * @param {number} count
 */
export function clusterHosts(tag, count) {
  const suffix = randomBytes(3).toString('hex');
  return Array.from({ length: count }, (_, i) => `bench-${tag}-${i + 1}-${suffix}`);
}

/**
 * Gives each member (`{ host, home }`) a signing key and every other member's public key, as
 * `agentbridge keys init` and `agentbridge trust add` would.
 * @param {Array<{ host: string, home: string }>} members
 */
export function trustAll(members) {
  const keys = members.map((member) => initKeys(member.home));
  for (const [i, member] of members.entries()) {
    for (const [j, other] of members.entries()) {
      if (i !== j) addTrust(member.home, other.host, keys[j].publicKeyString);
    }
  }
}

/**
 * Runs `body(teardown, queues)` with a teardown that always runs afterwards (and, until then,
 * on the run's timeout or a signal): `queues` is the list of broker queues deleted last.
 * @template T
 * @param {string} brokerUri
 * @param {(teardown: Teardown, queues: Set<string>) => Promise<T>} body
 * @returns {Promise<T>}
 */
export async function withCluster(brokerUri, body) {
  const teardown = createTeardown();
  /** @type {Set<string>} */
  const queues = new Set();
  teardown.add(() => deleteQueues(brokerUri, [...queues]));
  try {
    return await body(teardown, queues);
  } finally {
    await teardown.run();
  }
}

/**
 * Starts `agentbridge start` daemons (separate OS processes) for `hosts`, each with its home under
 * `dir/name`, federated to `brokerUri`, trusting each other. Returns one handle per daemon:
 * the daemon (startDaemon's), its host, an admin client, `register(name, kind, groups)` and
 * `roster()` over the admin socket, and `kill()` (SIGKILL: a crash, no goodbye). `started`
 * (optional) is called with each handle as soon as it is up.
 * @param {{ dir: string, name: string, hosts: string[], brokerUri: string, configFile?: string, teardown: Teardown, queues: Set<string>, trust?: string[], start?: string[], cpuProfDir?: string }} options
 */
export async function startDaemons({
  dir,
  name,
  hosts,
  brokerUri,
  configFile,
  teardown,
  queues,
  trust = hosts,
  start = hosts,
  cpuProfDir,
}) {
  const members = trust.map((host) => ({ host, home: join(dir, name, host) }));
  trustAll(members);
  const handles = [];
  for (const host of start)
    handles.push(await startMember({ dir, name, host, brokerUri, configFile, teardown, queues, cpuProfDir }));
  return handles;
}

/** The CPU profile file of daemon `host` of cluster `name`, under cpuProfDir. */
export const profileName = (name, host) => `${name}-${host}.cpuprofile`;

/**
 * One daemon of a cluster whose keys `startDaemons` (or `trustAll`) already set up.
 * @param {{ dir: string, name: string, host: string, brokerUri: string, configFile?: string, teardown: Teardown, queues: Set<string>, cpuProfDir?: string }} options
 */
export async function startMember({ dir, name, host, brokerUri, configFile, teardown, queues, cpuProfDir }) {
  queues.add(controlSpec(host).name);
  const daemon = await startDaemon({
    home: join(dir, name, host),
    configFile,
    ...(cpuProfDir ? { cpuProf: { dir: cpuProfDir, name: profileName(name, host) } } : {}),
    env: { BRIDGE_HOST_ID: host, BRIDGE_BROKER_URI: brokerUri },
  });
  let killed = false;
  teardown.add(async () => {
    if (killed) await daemon.process.stop();
    else await daemon.stop();
  });
  const admin = adminClient(daemon.adminSocket);
  teardown.add(() => admin.close());
  return {
    host,
    daemon,
    admin,
    /**
     * Registers over the admin socket; the entity's inbox is deleted at teardown.
     * @param {string} entityName
     * @param {string} [kind]
     * @param {string[]} [groups]
     */
    async register(entityName, kind = 'main', groups) {
      const registration = await admin.call(adminRoutes.register, {
        kind,
        name: entityName,
        ...(groups ? { groups } : {}),
      });
      queues.add(inboxName(registration.gid));
      return registration;
    },
    roster: () => admin.call(adminRoutes.roster, {}),
    async kill() {
      killed = true;
      daemon.process.child.kill('SIGKILL');
      await daemon.process.exited;
    },
  };
}

/**
 * Runs `task(i)` for i in [0, count) with at most `concurrency` at once; `onDone(done)` after each.
 * @template T
 * @param {number} count
 * @param {number} concurrency
 * @param {(i: number) => Promise<T>} task
 * @param {(done: number) => void} [onDone]
 * @returns {Promise<T[]>}
 */
export async function inParallel(count, concurrency, task, onDone = () => {}) {
  let next = 0;
  let done = 0;
  const results = new Array(count);
  const lane = async () => {
    while (next < count) {
      const i = next++;
      results[i] = await task(i);
      onDone(++done);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, lane));
  return results;
}
