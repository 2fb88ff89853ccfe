import { envOverrides } from '../config/loadConfig.js';

/**
 * The systemd user unit `agentbridge service install` writes: the gateway as the user's own
 * daemon, started at login (or at boot with lingering), restarted when it dies, stopped with
 * SIGTERM (a clean stop). Its settings are the BRIDGE_* variables of the install's environment;
 * a broker URI with a password goes into an EnvironmentFile of mode 0600 beside the gateway's
 * data, never into the unit. Pure: the caller writes the files.
 */

export interface UnitInput {
  /** The gateway's home, absolute. */
  home: string;
  /** The node binary and the CLI's entry point, absolute. */
  node: string;
  cli: string;
  /** `--config FILE`, absolute, if the gateway is started with one. */
  configFile?: string | undefined;
  /** The environment to take BRIDGE_* settings from. */
  env: NodeJS.ProcessEnv;
  /** Where the secret variables go (read by systemd, mode 0600). */
  envFile: string;
}

export interface UnitFiles {
  unit: string;
  /** The EnvironmentFile's text; undefined when nothing secret is set. */
  envFile: string | undefined;
}

/** Variables whose value may hold a password: kept out of the unit. */
const secret = new Set(['BRIDGE_BROKER_URI']);

export const unitName = 'agentbridge.service';

export function systemdUnit(input: UnitInput): UnitFiles {
  const settings = Object.keys(envOverrides)
    .filter((name) => name !== 'BRIDGE_HOME')
    .flatMap((name) => {
      const value = input.env[name];
      return value === undefined || value === '' ? [] : [[name, value] as const];
    });
  const plain = settings.filter(([name]) => !secret.has(name));
  const hidden = settings.filter(([name]) => secret.has(name));
  const exec = [input.node, input.cli, 'start', ...(input.configFile ? ['--config', input.configFile] : [])];
  const unit = [
    '# Written by `agentbridge service install`; `agentbridge service uninstall` removes it.',
    '[Unit]',
    `Description=bridge gateway (agentbridge), home ${input.home}`,
    'After=network-online.target',
    'Wants=network-online.target',
    '',
    '[Service]',
    'Type=simple',
    `ExecStart=${exec.map(execWord).join(' ')}`,
    `Environment=${quoted(`BRIDGE_HOME=${input.home}`)}`,
    ...plain.map(([name, value]) => `Environment=${quoted(`${name}=${value}`)}`),
    ...(hidden.length > 0 ? [`EnvironmentFile=${input.envFile}`] : []),
    // SIGTERM is the gateway's clean stop; it records what it was doing and exits 0.
    'KillSignal=SIGTERM',
    'TimeoutStopSec=30',
    'Restart=on-failure',
    'RestartSec=2',
    '',
    '[Install]',
    'WantedBy=default.target',
    '',
  ].join('\n');
  const envFile =
    hidden.length > 0
      ? `${hidden.map(([name, value]) => `${name}=${quoted(value, false)}`).join('\n')}\n`
      : undefined;
  return { unit, envFile };
}

/**
 * A value systemd reads back as it was: double-quoted, `\\` and `"` escaped, and `%` (a
 * specifier in unit files, not in an EnvironmentFile) doubled.
 */
function quoted(value: string, unitFile = true): string {
  const escaped = value.replace(/\\/g, '\\\\').replace(/"/g, '\\"');
  return `"${unitFile ? escaped.replace(/%/g, '%%') : escaped}"`;
}

/** A word of ExecStart=, where `$` also expands: written `$$`. */
function execWord(word: string): string {
  return quoted(word).replace(/\$/g, '$$$$');
}
