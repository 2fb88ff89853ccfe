/**
 * What a herdr server can do, read from its `ping`: herdr has no capability handshake and no
 * method list, so the release each feature arrived in (see the list in `herdrProtocol.ts`)
 * decides.
 */

/** What one herdr server can do, as the injector uses it; read from its `ping`. */
export interface HerdrFeatures {
  /** What `ping` said; undefined when the server refused `ping`. */
  readonly version: string | undefined;
  readonly protocol: number | undefined;
  /** `agent.prompt` that refuses a blocked agent without typing (`agent_blocked`): 0.8.2 on. */
  readonly agentPrompt: boolean;
  /** `session.snapshot`: 0.7.2 on. */
  readonly sessionSnapshot: boolean;
}

/** A server that refused `ping`: only what every herdr has (pane.get, pane.read, pane.send_input). */
export const LEGACY_HERDR_FEATURES: HerdrFeatures = {
  version: undefined,
  protocol: undefined,
  agentPrompt: false,
  sessionSnapshot: false,
};

/** herdr release, and the protocol number it shipped with, from which each feature is there. */
const FEATURE_SINCE = {
  agentPrompt: { version: [0, 8, 2], protocol: 20 },
  sessionSnapshot: { version: [0, 7, 2], protocol: 16 },
} as const;

function atLeast(version: readonly number[], since: readonly number[]): boolean {
  for (let i = 0; i < since.length; i++) {
    const have = version[i] ?? 0;
    const want = since[i] ?? 0;
    if (have !== want) return have > want;
  }
  return true;
}

/**
 * The features of a server from its `pong`. herdr numbers releases `MAJOR.MINOR.PATCH` (a
 * preview build adds a suffix); a version that does not parse falls back to the protocol
 * number. A feature wrongly assumed is caught at its first use: herdr answers
 * `invalid_request` for a method it does not know, and the caller drops the feature.
 */
export function herdrFeatures(pong: { readonly version: string; readonly protocol: number }): HerdrFeatures {
  const parsed = /^v?(\d+)\.(\d+)\.(\d+)/.exec(pong.version.trim());
  const version = parsed === null ? undefined : [Number(parsed[1]), Number(parsed[2]), Number(parsed[3])];
  const has = (since: { readonly version: readonly number[]; readonly protocol: number }): boolean =>
    version === undefined ? pong.protocol >= since.protocol : atLeast(version, since.version);
  return {
    version: pong.version,
    protocol: pong.protocol,
    agentPrompt: has(FEATURE_SINCE.agentPrompt),
    sessionSnapshot: has(FEATURE_SINCE.sessionSnapshot),
  };
}
