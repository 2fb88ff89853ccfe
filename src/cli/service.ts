import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { loadConfig } from '../config/loadConfig.js';
import { BridgeError, ErrorCode } from '../errors.js';
import { systemdUnit, unitName } from '../service/systemdUnit.js';
import type { CliValues } from './cliOptions.js';
import { printResult } from './output.js';
import { selfCli } from './selfCommand.js';

/** Where systemd looks for the user's own units. */
function unitDir(env: NodeJS.ProcessEnv): string {
  const config = env.XDG_CONFIG_HOME || join(env.HOME ?? homedir(), '.config');
  return join(config, 'systemd', 'user');
}

/**
 * `agentbridge service install|uninstall [--print] [--config FILE]`: the gateway as a systemd
 * user service, with this environment's home and settings (src/service/systemdUnit.ts).
 */
export async function runService(values: CliValues, rest: string[]): Promise<number> {
  const [action, ...extra] = rest;
  if ((action !== 'install' && action !== 'uninstall') || extra.length > 0) {
    throw new BridgeError(
      ErrorCode.badRequest,
      'service takes install or uninstall: agentbridge service install [--print]',
    );
  }
  const unitFile = join(unitDir(process.env), unitName);
  const { config, file } = loadConfig({ file: values.config });
  const home = resolve(config.home);
  const envFile = join(home, 'service.env');
  if (action === 'uninstall') {
    const existed = existsSync(unitFile);
    rmSync(unitFile, { force: true });
    rmSync(envFile, { force: true });
    return printResult(values, { unit: unitFile, removed: existed }, () =>
      existed
        ? `removed ${unitFile}\nThen: systemctl --user disable --now agentbridge; systemctl --user daemon-reload`
        : `no ${unitFile} to remove`,
    );
  }
  const files = systemdUnit({
    home,
    node: process.execPath,
    cli: selfCli,
    configFile: file === undefined ? undefined : resolve(file),
    env: process.env,
    envFile,
  });
  if (values.print) {
    return printResult(values, { unit: unitFile, text: files.unit, envFile: files.envFile && envFile }, () =>
      [
        `--- ${unitFile}`,
        files.unit,
        ...(files.envFile ? [`--- ${envFile} (mode 0600; the broker URI's password)`, '…'] : []),
      ].join('\n'),
    );
  }
  mkdirSync(dirname(unitFile), { recursive: true });
  writeFileSync(unitFile, files.unit, { mode: 0o644 });
  if (files.envFile) {
    mkdirSync(home, { recursive: true, mode: 0o700 });
    writeFileSync(envFile, files.envFile, { mode: 0o600 });
  }
  return printResult(values, { unit: unitFile, envFile: files.envFile && envFile }, () =>
    [
      `wrote ${unitFile}${files.envFile ? ` and ${envFile} (0600)` : ''}`,
      'Then: systemctl --user daemon-reload && systemctl --user enable --now agentbridge',
      '      journalctl --user -u agentbridge -f      # its log',
      '      loginctl enable-linger "$USER"           # to run it without a login session, from boot',
    ].join('\n'),
  );
}
