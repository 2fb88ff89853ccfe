import type { Config } from '../config/schema.js';
import { ErrorCode } from '../errors.js';
import type { SpawnContext } from '../machines/spawnMachine.js';
import { describeIssues, nameRule, smuggledRunKeys, spawnRequestSchema } from '../wire/envelope.js';

/** Whether this host takes a spawn request: the entity name it launches under, or why not. */
export type SpawnAdmission =
  | { readonly ok: true; readonly name: string }
  | { readonly ok: false; readonly code: ErrorCode; readonly message: string };

/** What the host knows when it decides. */
export interface SpawnHost {
  readonly host: string;
  readonly profiles: Config['profiles'];
  hasName(name: string): boolean;
  /** The spawn header of the kept SPAWN, as it came (undefined: none kept). */
  readonly keptRequest: object | undefined;
}

/**
 * Checks a spawn request against this host's profiles and picks the entity name. The host owns
 * its profiles: a request that carries anything to run is refused, whatever it names.
 */
export function admitSpawn(
  asked: Pick<SpawnContext, 'requestId' | 'profile' | 'name' | 'groups'>,
  here: SpawnHost,
): SpawnAdmission {
  const refuse = (code: ErrorCode, message: string): SpawnAdmission => ({ ok: false, code, message });
  const request = spawnRequestSchema.safeParse({
    requestId: asked.requestId,
    profile: asked.profile,
    ...(asked.name === undefined ? {} : { name: asked.name }),
    groups: asked.groups,
  });
  if (!request.success) {
    return refuse(
      ErrorCode.badRequest,
      `${here.host} cannot use this spawn request: ${describeIssues(request.error)}`,
    );
  }
  const smuggled = smuggledRunKeys(here.keptRequest);
  if (smuggled.length > 0) {
    return refuse(
      ErrorCode.spawnRefused,
      `the request carries ${smuggled.join(', ')}: a requester names a profile only, never a command; ` +
        `${here.host} runs what its own profiles say (config \`profiles\`)`,
    );
  }
  if (!Object.hasOwn(here.profiles, asked.profile)) {
    const known = Object.keys(here.profiles);
    return refuse(
      ErrorCode.unknownProfile,
      `${here.host} has no profile "${asked.profile}"; ` +
        (known.length > 0
          ? `its profiles: ${known.join(', ')}`
          : 'it has no profiles configured (config `profiles`)'),
    );
  }
  const name = asked.name ?? `${asked.profile}-${asked.requestId.slice(-6)}`;
  if (!spawnRequestSchema.shape.name.safeParse(name).success) {
    return refuse(
      ErrorCode.badRequest,
      `profile "${asked.profile}" makes no entity name by default: name the agent (${nameRule})`,
    );
  }
  if (here.hasName(name)) {
    return refuse(
      ErrorCode.nameTaken,
      `an entity named "${name}" already runs on ${here.host}; pick another name`,
    );
  }
  return { ok: true, name };
}
