#!/usr/bin/env node
import { BridgeError, ErrorCode, toBridgeError } from '../errors.js';
import { type CliValues, parseCli } from './cliOptions.js';
import { writeHuman, writeJson } from './output.js';

const usage = `agentbridge — cross-host messaging for AI coding agents

Usage:
  agentbridge start [--config FILE]                       run the gateway (foreground)
  agentbridge register --kind worker|main|orchestrator|operator --name NAME
                  [--tmux TARGET [--tmux-socket PATH] | --herdr-pane ID | --agent-socket PATH [--busy steer|queue]]
                  [--group G]...                      register an entity; prints its gid and token
  agentbridge agent-host --socket PATH [--protocol acp|claude-stream|codex-app-server] [--cwd DIR] -- AGENT [ARG]...
                                                      run an agent behind its own protocol (acp: gemini --acp,
                                                      opencode acp; claude-stream: claude; codex-app-server:
                                                      codex app-server) in this terminal, which mirrors its
                                                      session; register it with --agent-socket PATH
  agentbridge deregister NAME|GID                          remove an entity (its undelivered messages are dead-lettered)
  agentbridge connect claude|codex|gemini --as main|worker|orchestrator NAME [--scope user|project] [--print]
                  [--tmux TARGET | --herdr-pane ID]   register NAME and write that agent's MCP config for it,
                                                      bridge's tools allowed; --print shows what it would write
  agentbridge disconnect claude|codex|gemini [--scope user|project]
                                                      undo connect: the agent's files as they were, NAME deregistered
  agentbridge doctor                                       check what this install needs (tmux, the home's modes,
                                                      the port, the broker and its setup, peers' trust and
                                                      clocks, agent configs), each failure with its fix
  agentbridge service install|uninstall [--print] [--config FILE]
                                                      the gateway as a systemd user service (this home and settings)
  agentbridge send TO TEXT [--reply-to MSGID] [--wait MS] [--wait-for queued|submitted] [--idempotency-key KEY]
                  [--busy steer|queue]                send as the entity whose token is in BRIDGE_TOKEN (or --token);
                                                      --busy: into a running turn, or after it
  agentbridge broadcast TEXT [--group G]                   announce to everyone (or one group), as that entity
  agentbridge drain [--max N] [--wait MS]                  collect messages held for that entity; with --wait and
                                                      none held, wait up to MS for one (a long poll)
  agentbridge spawn HOST PROFILE [--brief TEXT] [--name NAME] [--group G]... [--wait MS] [--idempotency-key KEY]
                                                      start an agent on HOST from one of HOST's profiles,
                                                      as that entity (the result comes back to it)
  agentbridge stop GID [--wait MS]                         stop an agent started with spawn
  agentbridge approve|deny WORKER[@HOST] [--request N] [--wait MS] [--token T]
                                                      answer a permission request of a worker's agent
                                                      (one behind an agent host): allow it once, or deny it;
                                                      a spawned worker on another host, as the entity that
                                                      spawned it (its token in BRIDGE_TOKEN or --token)
  agentbridge dlq list [--max N] | show MSGID | requeue (MSGID | --all) [--force]
                                                      the broker's dead letters, with their reasons
  agentbridge roster                                       who is reachable
  agentbridge console [--name NAME]                        a one-time login URL for the operator console (/ui),
                                                      as operator NAME (default "operator", registered if new)
  agentbridge status [MSGID]                               the gateway's state; with MSGID, where that message
                                                      (sent from this gateway) is: its receipts' stages
  agentbridge export --trace ID [--db FILE] [--out FILE]   this host's slice of a flow as a portable file
  agentbridge replay --trace ID LOG... [--mermaid] [--no-check] [--progress]
                                                      merge hosts' logs (events.db or exports) into one
                                                      causal timeline; re-run every actor through the
                                                      current machines and report divergences (exit 1)
  agentbridge viz [--out DIR] [--trace ID LOG...]          every state machine as Mermaid (DIR/<machine>.mmd) and
                                                      one offline HTML page (DIR/index.html), default DIR
                                                      ./bridge-viz; with --trace, the flow's transitions
                                                      marked with counts, from its hosts' logs
  agentbridge keys init [--force] | show                   this gateway's signing (ed25519) and sealing (x25519)
                                                      keys (in BRIDGE_HOME/keys)
  agentbridge keys rotate | retire [KEY_ID] [--force]    a new sealing key (the old kept to open what was sealed
                                                      to it; peers learn it from PRESENCE), then drop the old
  agentbridge trust add HOST KEYS | remove HOST [KEY] | list
                                                      the peers' public keys this gateway trusts (KEYS:
                                                      ed25519:…,x25519:… as keys show prints them on HOST)
  agentbridge broker setup [--delete-legacy]               declare the shared exchanges and bridge.dlq once,
                                                      as the broker operator (login from BRIDGE_BROKER_URI)
  agentbridge broker provision HOST [--apply] [--vhost /] [--password-file F] [--node NODE] [--read-dlq]
                                                      rabbitmqctl commands for HOST's own least-privilege
                                                      broker login (printed; run with --apply)

Every command takes --json (machine-readable output), --config FILE, and --token for send/drain.
Environment: BRIDGE_CONFIG, BRIDGE_HOME (default ./.bridge), BRIDGE_HOST_ID, BRIDGE_BROKER_URI,
BRIDGE_MCP_PORT (default 7433), BRIDGE_TOKEN.`;

async function main(argv: string[]): Promise<number> {
  let parsed: ReturnType<typeof parseCli>;
  try {
    parsed = parseCli(argv);
  } catch (err) {
    throw new BridgeError(ErrorCode.badRequest, `${(err as Error).message}; see \`agentbridge help\``, {
      cause: err,
    });
  }
  const { values, positionals } = parsed;
  const [command, ...rest] = positionals;
  if (values.help || command === undefined || command === 'help') {
    writeHuman(process.stdout, usage);
    return 0;
  }
  const load = Object.hasOwn(commands, command) ? commands[command] : undefined;
  if (load === undefined)
    throw new BridgeError(ErrorCode.badRequest, `unknown command "${command}"; see \`agentbridge help\``);
  return (await load())(values, rest);
}

type Command = (values: CliValues, rest: string[]) => number | Promise<number>;

/**
 * Each command's module, loaded when it runs: a client command (register, send, status...) does
 * not load the gateway, so it starts in a fraction of the time `start` takes.
 */
const commands: Record<string, () => Promise<Command>> = {
  start: async () => (await import('./start.js')).runStart,
  register: async () => (await import('./commands.js')).runRegister,
  'agent-host': async () => (await import('./agentHost.js')).runAgentHost,
  deregister: async () => (await import('./commands.js')).runDeregister,
  connect: async () => (await import('./connect.js')).runConnect,
  service: async () => (await import('./service.js')).runService,
  doctor: async () => (await import('./doctor.js')).runDoctor,
  disconnect: async () => (await import('./connect.js')).runDisconnect,
  send: async () => (await import('./commands.js')).runSend,
  drain: async () => (await import('./commands.js')).runDrain,
  spawn: async () => (await import('./commands.js')).runSpawn,
  stop: async () => (await import('./commands.js')).runStop,
  approve: async () => (await import('./commands.js')).runOwnerAnswer('allow'),
  deny: async () => (await import('./commands.js')).runOwnerAnswer('deny'),
  broadcast: async () => (await import('./commands.js')).runBroadcast,
  dlq: async () => (await import('./commands.js')).runDlq,
  console: async () => (await import('./commands.js')).runConsole,
  roster: async () => (await import('./commands.js')).runRoster,
  status: async () => (await import('./commands.js')).runStatus,
  export: async () => (await import('./replay.js')).runExport,
  replay: async () => (await import('./replay.js')).runReplay,
  // Logs as positionals or as --db (several allowed).
  viz: async () => {
    const { runViz } = await import('./viz.js');
    return (values, rest) => runViz(values, [...rest, ...(values.db ?? [])]);
  },
  keys: async () => (await import('./security.js')).runKeys,
  trust: async () => (await import('./security.js')).runTrust,
  broker: async () => (await import('./provision.js')).runBroker,
};

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    const error = toBridgeError(err);
    const json = process.argv.includes('--json');
    // The message may quote someone else's text (a peer's refusal, a broker's error).
    if (json) writeJson(process.stdout, { ok: false, error: error.toJSON() });
    else writeHuman(process.stderr, `agentbridge: ${error.code}: ${error.message}`);
    process.exitCode = exitCodeFor(error.code);
  },
);

/**
 * Exit 2 for what the operator must fix before anything can work: bad usage, and bad local
 * state (the config, the keys, the trust store, a damaged event log, a home others can reach); 1 for
 * refused or failed.
 */
const exitTwo: ReadonlySet<ErrorCode> = new Set([
  ErrorCode.badRequest,
  ErrorCode.badConfig,
  ErrorCode.badStore,
  ErrorCode.badKey,
  ErrorCode.keyInsecure,
  ErrorCode.badTrustStore,
  ErrorCode.homeInsecure,
]);

function exitCodeFor(code: ErrorCode): number {
  return exitTwo.has(code) ? 2 : 1;
}
