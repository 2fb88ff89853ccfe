import { z } from 'zod';
import { BusyPolicy, busyPolicySchema, DeliveryPath } from '../wire/agentHost.js';
import { groupsSchema, hostIdPattern } from '../wire/envelope.js';
import { agents } from './agents.js';
import { parseAuthority } from './authority.js';

/**
 * The gateway's configuration. Every key has a default, so no file at all gives the embedded
 * single-host mode. Objects are strict: a misspelt key is an error, not a silent default.
 */
export const hostIdSchema = z
  .string()
  .regex(hostIdPattern, 'a host id is 1-63 letters, digits, ".", "_" or "-"');

export const logLevels = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;

/**
 * TLS for `amqps://` (R-H2). Paths to PEM files, read when the gateway starts. The broker's
 * certificate is always verified: `ca` replaces the system's CAs (a private broker's CA), and
 * `servername` is the name checked against it when the URI's host is not that name.
 */
export const brokerTlsSchema = z
  .strictObject({
    /** CA certificate(s) the broker's certificate must chain to; default: Node's bundled CAs. */
    ca: z.string().min(1).optional(),
    /** Client certificate, for brokers that ask for one (`ssl_options.verify = verify_peer`). */
    cert: z.string().min(1).optional(),
    /** The client certificate's private key. */
    key: z.string().min(1).optional(),
    /** Name the broker's certificate must carry (SNI and verification); default: the URI's host. */
    servername: z.string().min(1).optional(),
  })
  .superRefine((tls, ctx) => {
    if ((tls.cert === undefined) !== (tls.key === undefined)) {
      ctx.addIssue({
        code: 'custom',
        path: [tls.cert === undefined ? 'cert' : 'key'],
        message: 'a client certificate needs both broker.tls.cert and broker.tls.key',
      });
    }
  });
export type BrokerTlsConfig = z.output<typeof brokerTlsSchema>;

export const profileNamePattern = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** One spawn profile: how this host starts an agent of that kind. */
export const profileSchema = z.strictObject({
  /** Shell command run in the new window or pane (the agent). */
  command: z.string().min(1),
  /** Working directory; with `repo`, the clone goes here (one subdirectory per agent). */
  cwd: z.string().min(1).optional(),
  /** A git repository to clone for each spawned agent (and `ref` to check out). */
  repo: z.strictObject({ url: z.string().min(1), ref: z.string().min(1).optional() }).optional(),
  /** Where the agent runs: a tmux window, or a herdr tab. */
  injector: z.enum(['tmux', 'herdr']).default('tmux'),
  kind: z.enum(['worker', 'main', 'orchestrator']).default('worker'),
  groups: groupsSchema.default([]),
  /**
   * The agent the command starts (claude, codex, gemini): it then comes connected to this
   * gateway as the spawned entity, bridge's tools allowed (src/connect/agentConfigs.ts,
   * spawnConnection); the command must then start that agent, its flags are appended.
   */
  agent: z.enum(agents).optional(),
  /** Extra environment for the agent (besides BRIDGE_MCP_URL, BRIDGE_TOKEN, …). */
  env: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/), z.string()).default({}),
  /**
   * How messages reach the agent: typed into its terminal (`terminal`), or over its own
   * protocol (`acp`, `claude-stream`, `codex-app-server`): the window then runs `agentbridge
   * agent-host` with the command as its agent, and mirrors the session.
   */
  path: z
    .enum([DeliveryPath.terminal, DeliveryPath.acp, DeliveryPath.claudeStream, DeliveryPath.codexAppServer])
    .default(DeliveryPath.terminal),
  /** On a path that takes a message mid-turn: steer it in, or queue it (else `delivery.busy`). */
  busy: busyPolicySchema.optional(),
});
export type Profile = z.output<typeof profileSchema>;

/** The nodes of a comma-separated broker URI list; none for an empty one (single-host). */
export function splitUris(list: string): string[] {
  return list
    .split(',')
    .map((uri) => uri.trim())
    .filter((uri) => uri !== '');
}

/** A broker URI without its password, for messages and logs. */
export function redactUri(uri: string): string {
  return uri.replace(/\/\/([^:@/]*):[^@/]*@/, '//$1:***@');
}

export const configSchema = z.strictObject({
  /** This gateway's host id; defaults to the machine's hostname. */
  hostId: hostIdSchema.optional(),
  /** Data directory: event log, admin socket. */
  home: z.string().min(1).default('./.bridge'),
  broker: z
    .strictObject({
      /**
       * amqp(s):// URI of the federation broker, or several separated by commas (the nodes of a
       * cluster, as BRIDGE_BROKER_URI gives them); shorthand for `uris`. Unset means single-host.
       */
      uri: z.string().optional(),
      /** The broker's nodes (R-TOP3): the gateway is on one, and moves to another when it is lost. */
      uris: z.array(z.string()).min(1, 'lists at least one broker node').optional(),
      /**
       * The deployment this gateway belongs to: the gateways that trust each other. Broadcasts
       * and PRESENCE travel under its routing keys, so deployments that share a broker (even one
       * vhost) never reach each other's inboxes or rosters. Give every team its own (and, better,
       * its own vhost); gateways of one deployment must all name the same.
       */
      deployment: z
        .string()
        .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'is lower-case letters, digits and "-" (no dots), at most 63')
        .default('default'),
      /** classic queues (one broker) or quorum queues (a cluster, R-TOP2). */
      queueMode: z.enum(['classic', 'quorum']).default('classic'),
      /** Inbox cap (x-max-length): overflow is refused to the sender and dead-lettered (R-H1). */
      inboxMaxLength: z.number().int().min(1).default(10_000),
      /** Unacked messages per inbox consumer. */
      prefetch: z.number().int().min(1).max(65_535).default(200),
      /** Presence heartbeat (U5). */
      heartbeatMs: z.number().int().min(100).default(5_000),
      /** A host's roster entries expire after this many missed heartbeats. */
      presenceTtlBeats: z.number().int().min(1).default(3),
      /** AMQP heartbeat asked of the broker (unless the URI has `heartbeat=`): a silent link is noticed in ~2 beats. */
      heartbeatSeconds: z.number().int().min(0).max(600).default(5),
      /** Upper bound on opening the connection to the broker. */
      connectTimeoutMs: z.number().int().min(100).default(10_000),
      /**
       * After losing its node, how long a gateway retries an inbox or control lock it finds in use
       * before it takes it for another gateway's (its own lost connection may hold it until the
       * cluster declares that node down: net_ticktime, 60 s by default).
       */
      lockGraceMs: z.number().int().min(0).default(90_000),
      /**
       * How long a remote send waits for the broker's confirm before it fails as
       * BROKER_UNAVAILABLE; later sends to that recipient then fail at once until the broker
       * answers (a cluster without its majority holds quorum-queue messages unconfirmed).
       */
      confirmTimeoutMs: z.number().int().min(100).default(5_000),
      /** Reconnect backoff: first delay and cap. */
      retryBaseMs: z.number().int().min(1).default(500),
      retryMaxMs: z.number().int().min(1).default(15_000),
      /** amqps:// only: what verifies the broker and, optionally, identifies this gateway to it (R-H2). */
      tls: brokerTlsSchema.optional(),
    })
    .superRefine((broker, ctx) => {
      if (broker.uri !== undefined && broker.uris !== undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['uris'],
          message: 'and broker.uri are both set; keep one (uri is shorthand for a one-node uris)',
        });
      }
      const [key, nodes] = broker.uris ? ['uris', broker.uris] : ['uri', splitUris(broker.uri ?? '')];
      for (const uri of nodes) {
        if (!/^amqps?:\/\/[^,\s]+$/.test(uri)) {
          ctx.addIssue({
            code: 'custom',
            path: [key],
            message: `"${redactUri(uri)}" is no broker URI: each starts with amqp:// or amqps:// (several are separated by commas)`,
          });
        } else if (broker.tls && !uri.startsWith('amqps://')) {
          ctx.addIssue({
            code: 'custom',
            path: ['tls'],
            message: `is set but broker.${key} has a plain amqp:// URI; use amqps:// so the connection is encrypted`,
          });
        }
      }
    })
    .transform(({ uri, uris, ...broker }) => ({ ...broker, uris: uris ?? splitUris(uri ?? '') }))
    .prefault({}),
  mcp: z
    .strictObject({
      host: z.string().min(1).default('127.0.0.1'),
      port: z.number().int().min(0).max(65535).default(7433),
      /**
       * Names besides loopback (and the bind address) that the HTTP server answers to, in `Host`
       * and in a browser's `Origin` (R-H7): `host` (at the gateway's port) or `host:port` (behind
       * a proxy). Anything else is refused 403, which is what stops DNS rebinding.
       */
      allowedHosts: z
        .array(
          z.string().transform((text, ctx) => {
            const authority = parseAuthority(text);
            if (authority) return authority;
            ctx.addIssue({
              code: 'custom',
              message: `${JSON.stringify(text)} is not host or host:port (e.g. "bridge.lan" or "bridge.lan:8443")`,
            });
            return z.NEVER;
          }),
        )
        .default([]),
      /**
       * Open MCP sessions one entity may hold (each costs a transport and an MCP server); an
       * initialize beyond it closes that entity's least recently used session.
       */
      maxSessionsPerEntity: z.number().int().min(1).max(10_000).default(16),
      /**
       * How a tool call's result comes back: `json`, one `application/json` body (the cheaper,
       * measured in bench/results.md), or `sse`, an event stream per call. Either way nudges come
       * on the session's GET stream, and a parked call is an open request.
       */
      responses: z.enum(['json', 'sse']).default('json'),
      /**
       * Most HTTP connections open at once (each a file descriptor); one more is closed at once
       * and counted (bridge_http_connections_dropped_total). Keep it under the process's open-file
       * limit (`ulimit -n`, often 1024) less what the gateway holds besides.
       */
      maxConnections: z.number().int().min(16).default(768),
      /** A session with no request open and none for this long is closed (its client has gone). */
      sessionIdleMs: z
        .number()
        .int()
        .min(1_000)
        .default(30 * 60_000),
    })
    .prefault({}),
  limits: z
    .strictObject({
      /** Largest message text accepted, in UTF-8 bytes. */
      maxTextBytes: z
        .number()
        .int()
        .min(1)
        .max(16 * 1024 * 1024)
        .default(64 * 1024),
      /**
       * Most text bytes the undelivered messages of one inbox may hold on its gateway (with
       * broker.inboxMaxLength messages): beyond it a same-host sender gets INBOX_FULL and the
       * broker stops delivering to the gateway (R-H1).
       */
      inboxMaxBytes: z
        .number()
        .int()
        .min(1024)
        .default(16 * 1024 * 1024),
      /** Longest an open bridge_send may wait for its reply. */
      maxWaitMs: z.number().int().min(0).default(600_000),
      /** Most messages one bridge_drain returns. */
      maxDrain: z.number().int().min(1).default(100),
      /**
       * Tool calls one entity may have parked open at once: drains with wait_ms, asks, sends
       * with wait_ms or wait_for. One more is refused with TOO_MANY_PARKED (R-H8).
       */
      maxParkedPerEntity: z.number().int().min(1).default(64),
      /** The same, for all the entities of this gateway together. */
      maxParked: z.number().int().min(1).default(512),
      /**
       * The share of every inbox cap (broker.inboxMaxLength, limits.inboxMaxBytes) one sender's
       * undelivered messages may take: past it that sender gets INBOX_SHARE_FULL, so no one
       * sender fills an inbox, or every inbox with broadcasts (R-H8). 1 turns it off.
       */
      senderInboxShare: z.number().gt(0).max(1).default(0.25),
      /**
       * Most entities a peer's PRESENCE may announce (U5, R-H8); one announcing more is ignored
       * whole. Also the most this gateway announces without a loud warning.
       */
      maxPresenceEntries: z.number().int().min(1).default(10_000),
      /**
       * Largest PRESENCE read at all, in bytes: a bigger one is refused before it is verified or
       * parsed. Default: maxPresenceEntries × 512 (an entry with a few groups is ~200).
       */
      maxPresenceBytes: z
        .number()
        .int()
        .min(1024)
        .max(128 * 1024 * 1024)
        .optional(),
    })
    .prefault({}),
  delivery: z
    .strictObject({
      /** How long an undelivered message lives before it is dead-lettered as expired. */
      ttlMs: z
        .number()
        .int()
        .min(1)
        .default(24 * 60 * 60 * 1000),
      /** Injection attempts before a message is dead-lettered as delivery-limit. */
      maxAttempts: z.number().int().min(1).default(5),
      /** First retry delay after a failed injection; doubles per attempt. */
      retryBaseMs: z.number().int().min(1).default(500),
      /** Lines of pane output searched when recovering an interrupted injection (R-DL5). */
      captureLines: z.number().int().min(10).default(500),
      /** How often a pane that cannot take a message (a dialog, half-typed input, a busy agent) is looked at again. */
      paneRecheckMs: z.number().int().min(10).default(1_000),
      /** Verified submission (R-DL6): how long a paste may take to show in the agent's input… */
      showTimeoutMs: z.number().int().min(10).default(2_000),
      /** …how long the agent may take to clear its input after an Enter… */
      submitTimeoutMs: z.number().int().min(10).default(1_500),
      /** …how long an agent whose cleared input is no proof (Gemini CLI) may take to show the message in its transcript or queue… */
      proofTimeoutMs: z.number().int().min(10).default(5_000),
      /** …how often the pane is read meanwhile… */
      pollMs: z.number().int().min(1).default(25),
      /** The least pause between a paste into an agent TUI and its Enter (the agent table's own pause applies when longer). */
      enterPauseMs: z.number().int().min(0).max(60_000).default(0),
      /** …and how many Enters, at most, before the attempt counts as not submitted. */
      enterAttempts: z.number().int().min(1).max(10).default(3),
      /** How long a pane whose program just changed (a TUI restarted) is held before it is read as a line reader. */
      programSettleMs: z.number().int().min(0).max(60_000).default(1_500),
      /** Longest a bridge_send with wait_for waits for the stage it names (R-RC1). */
      receiptWaitMs: z.number().int().min(0).default(120_000),
      /**
       * A message for a worker whose agent takes one mid-turn (Claude stream-json, Codex
       * app-server), while it is in a turn: `steer` hands it into the turn, `queue` holds it
       * until the turn ends. A worker's `register --busy` and a message's `busy` come first.
       */
      busy: busyPolicySchema.default(BusyPolicy.steer),
    })
    .prefault({}),
  ask: z
    .strictObject({
      /** How long a bridge_ask waits for its answer when the call names no timeout_ms. */
      defaultTimeoutMs: z.number().int().min(1).default(300_000),
    })
    .prefault({}),
  remind: z
    .strictObject({
      /** Nudge entities that pull their messages (mains, orchestrators) while messages wait (U3). */
      enabled: z.boolean().default(true),
      /** First nudge this long after a message starts waiting; then doubling… */
      firstMs: z.number().int().min(1).default(60_000),
      /** …up to this interval. */
      maxMs: z
        .number()
        .int()
        .min(1)
        .default(30 * 60_000),
    })
    .prefault({}),
  spawn: z
    .strictObject({
      /** tmux server socket (`tmux -S`) and session that spawned agents' windows go in. */
      tmuxSocket: z.string().min(1).optional(),
      tmuxSession: z
        .string()
        .regex(/^[A-Za-z0-9._-]{1,64}$/)
        .default('bridge'),
      /** herdr workspace for spawned agents' tabs; default: herdr's active workspace. */
      herdrWorkspace: z.string().min(1).optional(),
      /** Where repositories named by profiles are cloned, one directory per spawned agent. */
      workspaces: z.string().min(1).optional(),
      /** How long bridge_spawn / bridge_stop wait for the result when the call names no wait_ms. */
      waitMs: z.number().int().min(0).default(60_000),
      /** A SPAWN not taken by its host within this long is dead-lettered as expired. */
      requestTtlMs: z
        .number()
        .int()
        .min(1_000)
        .default(10 * 60_000),
    })
    .prefault({}),
  /**
   * What this host can run when asked to spawn (U4): the host owns its profiles; a requester
   * names one, never a command.
   */
  profiles: z
    .record(
      z.string().regex(profileNamePattern, 'a profile name is 1-64 letters, digits, ".", "_" or "-"'),
      profileSchema,
    )
    .default({}),
  store: z
    .strictObject({
      /** SQLite `synchronous` pragma; FULL syncs the WAL on every commit (power-loss safe). */
      synchronous: z.enum(['FULL', 'NORMAL']).default('FULL'),
    })
    .prefault({}),
  herdr: z
    .strictObject({
      /** herdr's socket; defaults to HERDR_SOCKET_PATH or $XDG_CONFIG_HOME/herdr/herdr.sock. */
      socketPath: z.string().optional(),
    })
    .prefault({}),
  security: z
    .strictObject({
      /**
       * `required`: every message and PRESENCE this gateway publishes is signed with its key,
       * and nothing unsigned or signed by a host outside the trust store is accepted
       * (invariant 6). `off` turns both off (benchmarks; a closed test network).
       */
      signing: z.enum(['required', 'off']).default('required'),
      /**
       * `required`: the text of every message that carries one (SEND, REPLY, ASK, ANSWER,
       * BROADCAST, SPAWN, …) is sealed to the hosts that may read it before it reaches the
       * broker, and one that arrives unsealed is dead-lettered (issue 34). `off` publishes them
       * unsealed (sealed ones that arrive are still opened); signing off turns it off too.
       */
      encryption: z.enum(['required', 'off']).default('required'),
      /** How long a validly signed message from a sender not yet in the roster waits for it. */
      unknownSenderGraceMs: z.number().int().min(0).default(5_000),
      /** Messages stamped further than this in the future, or older than their TTL plus this, are refused. */
      maxClockSkewMs: z
        .number()
        .int()
        .min(1_000)
        .default(5 * 60_000),
    })
    .prefault({}),
  log: z
    .strictObject({
      level: z.enum(logLevels).default('info'),
      /**
       * A warning peers can repeat every heartbeat (an ignored PRESENCE) is written once per
       * peer and reason per this window, with the count left out; the metric counts them all.
       */
      repeatWindowMs: z
        .number()
        .int()
        .min(0)
        .default(10 * 60_000),
    })
    .prefault({}),
  metrics: z
    .strictObject({
      /**
       * /metrics also shows Node's own (event-loop delay, GC pauses, heap, CPU): for profiling.
       * Off by default, since its event-loop monitor wakes an idle gateway every 10 ms.
       */
      runtime: z.boolean().default(false),
    })
    .prefault({}),
});

export type ConfigInput = z.input<typeof configSchema>;
export type Config = z.output<typeof configSchema> & { hostId: string };

/**
 * The directories where spawned agents work (their repositories): `spawn.workspaces` (default
 * `<home>/workspaces`) and every profile's own `cwd`.
 */
export function agentDirs(config: Pick<Config, 'home' | 'spawn' | 'profiles'>): string[] {
  return [workspacesDir(config), ...Object.values(config.profiles).flatMap((p) => (p.cwd ? [p.cwd] : []))];
}

/** Where a profile's repository is cloned when the profile names no `cwd`. */
export function workspacesDir(config: Pick<Config, 'home' | 'spawn'>): string {
  return config.spawn.workspaces ?? `${config.home}/workspaces`;
}
