import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import type { EntityActor } from '../deliver/EntityActor.js';
import { BridgeError, controlError, ErrorCode, toBridgeError } from '../errors.js';
import type { Gateway } from '../gateway/Gateway.js';
import { FlowSequence } from '../replay/FlowSequence.js';
import type { ReplayEvent } from '../replay/replayEvent.js';
import { replayTrace } from '../replay/replayTrace.js';
import { addressOf } from '../send/Router.js';
import { neutralisedJson } from '../text/neutralise.js';
import { diagramStylesheet } from '../viz/html.js';
import type { MachineGraph } from '../viz/machineGraph.js';
import { renderSvg } from '../viz/svg.js';
import { TraceMarker } from '../viz/traceMarks.js';
import { registryGraphs } from '../viz/vizFiles.js';
import { groupNameSchema, WireKind } from '../wire/envelope.js';
import { ConsoleFeed } from './ConsoleFeed.js';
import type { ConsoleSessions } from './ConsoleSessions.js';
import { consoleLoginPath } from './consoleLogin.js';
import { parseBody, readJsonBody } from './requestBody.js';

/** The cookie a console session travels in: HttpOnly, SameSite=Strict, only under /ui. */
export const consoleCookie = 'bridge_console';

/** The flows the console lists: those with an event in this last stretch. */
const flowWindowMs = 60 * 60_000;

/**
 * The page's policy: nothing from anywhere but this origin, no inline script or style, no
 * frames, no plugins, no forms posting elsewhere.
 */
const securityHeaders = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
} as const;

/** The page's files, from `ui/` in the package; read once, at start. */
const assetDir = new URL('../../ui/', import.meta.url);
const assets: Record<string, { type: string; body: Buffer }> = {
  ...Object.fromEntries(
    [
      ['/ui/', 'index.html', 'text/html; charset=utf-8'],
      ['/ui/app.js', 'app.js', 'text/javascript; charset=utf-8'],
      ['/ui/app.css', 'app.css', 'text/css; charset=utf-8'],
    ].map(([path, file, type]) => [path, { type, body: readFileSync(new URL(file as string, assetDir)) }]),
  ),
  // The state-machine diagrams look as on `agentbridge viz`'s page.
  '/ui/machines.css': { type: 'text/css; charset=utf-8', body: Buffer.from(diagramStylesheet) },
};

export interface ConsoleHandler {
  /** Serves a `/ui` request (the caller checked Host and Origin); false: not a console path. */
  handle(req: IncomingMessage, res: ServerResponse, path: string): Promise<boolean>;
  /** Ends the pages' event streams (the server is closing). */
  close(): void;
}

/** What the page may ask the gateway to do, as its operator; zod at the edge, as everywhere. */
const sendRequest = z.strictObject({ to: z.string().min(1), text: z.string().min(1) });
const broadcastRequest = z.strictObject({ text: z.string().min(1), group: groupNameSchema.optional() });
const requeueRequest = z.strictObject({ msgId: z.string().min(1).optional() });
const flowRequest = z.strictObject({
  traceId: z.string().min(1),
  /** Other hosts' slices of the flow: `agentbridge export --trace ID` files, as text. */
  exports: z.array(z.string().min(1)).max(16).default([]),
});
/** Most events of one flow the page is sent (a longer flow: `agentbridge replay` has them all). */
const maxFlowEvents = 2_000;
const ownerAnswerRequest = z.strictObject({
  worker: z.string().min(1).max(300),
  decision: z.enum(['allow', 'deny']),
  /** The request the page showed open: the one answered, whatever else opened since. */
  request: z.number().int().positive().optional(),
});
const stopRequest = z.strictObject({ gid: z.string().uuid(), waitMs: z.number().int().min(0).optional() });
const answerRequest = z.strictObject({
  main: z.string().min(1),
  askId: z.string().min(1),
  text: z.string().min(1),
});
const maxActionBytes = 1024 * 1024;

/**
 * The operator console at `/ui`, on the MCP server's loopback port: the page and its files,
 * the login that turns an `agentbridge console` code into a session cookie, and the page's API, which
 * reads the gateway (and later acts on it) as the session's operator.
 */
export function createConsoleHandler(gateway: Gateway, sessions: ConsoleSessions): ConsoleHandler {
  const operatorOf = (req: IncomingMessage): EntityActor | undefined => {
    const gid = sessions.operatorOf(cookieOf(req, consoleCookie));
    if (gid === undefined) return undefined;
    const entity = gateway.directory.byGidOrUndefined(gid);
    if (entity?.record.kind === 'operator') return entity;
    sessions.forgetOperator(gid); // deregistered since it logged in
    return undefined;
  };

  /**
   * What the open pages are kept up to date with, over their event streams: each read once per
   * period for all of them, sent when it changed (the entity shown and a message followed are
   * the page's own requests).
   */
  const feed = new ConsoleFeed(
    [
      { name: 'roster', everyMs: 1_000, read: () => gateway.services.status.roster() },
      { name: 'asks', everyMs: 1_000, read: () => pendingAsks(gateway) },
      { name: 'overview', everyMs: 2_000, read: () => gateway.services.status.overview() },
      { name: 'flows', everyMs: 5_000, read: () => gateway.services.status.recentFlows(flowWindowMs) },
      { name: 'dlq', everyMs: 5_000, read: () => latestDeadLetters(gateway) },
    ],
    gateway.logger,
  );

  /** A console action: the operator's, through the gateway's own API (as the CLI and MCP call it). */
  const actions: Record<string, (operator: EntityActor, body: unknown) => Promise<unknown>> = {
    '/ui/api/send': async (operator, body) => {
      const { to, text } = parseBody(sendRequest, body);
      const { handover, ...outcome } = await gateway.services.sends.send(operator, {
        kind: WireKind.send,
        to,
        text,
      });
      handover?.confirm();
      gateway.logger.info({ operator: operator.record.name, to, msgId: outcome.msgId }, 'console: sent');
      return outcome;
    },
    '/ui/api/broadcast': async (operator, body) => {
      const request = parseBody(broadcastRequest, body);
      return gateway.services.router.broadcast(operator, request);
    },
    /**
     * Answers an ASK held for a main here, the person at the console standing in for the main:
     * the ASK's delivery is handed over `via: console`, `by` the operator (in the log, on the
     * ask's trace), and the ANSWER goes out as the main's, as bridge_answer would send it.
     */
    '/ui/api/answer': async (operator, body) => {
      const { main, askId, text } = parseBody(answerRequest, body);
      const entity = gateway.directory.find(main);
      if (entity?.record.kind !== 'main') {
        throw new BridgeError(
          ErrorCode.unknownRecipient,
          `no main "${main}" on ${gateway.host}: pick one from the asks list`,
        );
      }
      const handover = await entity.takeForConsole(askId, operator.gid);
      try {
        const outcome = await gateway.services.asks.answer(entity, askId, text);
        handover?.confirm();
        feed.refresh('asks');
        gateway.logger.info(
          {
            operator: operator.record.name,
            main: entity.record.name,
            askId,
            status: outcome.status,
            traceId: outcome.traceId,
          },
          'console: answered an ask for a main',
        );
        return outcome;
      } catch (err) {
        handover?.giveBack();
        throw err;
      }
    },
    /**
     * One flow's timeline: `agentbridge replay`'s merge of this host's log with the other hosts'
     * exports the operator gives, each actor re-run through the current machines.
     */
    '/ui/api/flow': async (_operator, body) => {
      const { traceId, exports } = parseBody(flowRequest, body);
      return flowTimeline(gateway.store.file, traceId, exports);
    },
    /** Stops an agent started with spawn, on any host, by the rules bridge_stop follows. */
    '/ui/api/stop': async (operator, body) => {
      const { gid, waitMs } = parseBody(stopRequest, body);
      const outcome = await gateway.services.spawnRequests.stopSpawned(operator, gid, waitMs ?? 20_000);
      feed.refresh('roster');
      if (outcome.result && !outcome.result.ok)
        throw controlError(outcome.result.code, outcome.result.message);
      gateway.logger.info({ operator: operator.record.name, gid }, 'console: stopped a spawned agent');
      return outcome;
    },
    /** The owner's answer to a permission request of a worker's agent (one behind an agent host). */
    '/ui/api/owner-answer': async (operator, body) => {
      const { worker, decision, request } = parseBody(ownerAnswerRequest, body);
      const answer = await gateway.services.ownerAnswers.answer(
        worker,
        decision,
        `${operator.record.name} (console)`,
        request,
        { entity: () => operator, waitMs: 20_000 },
      );
      feed.refresh('roster');
      gateway.logger.info(
        { operator: operator.record.name, ...answer },
        "console: answered a worker's agent",
      );
      return answer;
    },
    '/ui/api/dlq/requeue': async (operator, body) => {
      const { msgId } = parseBody(requeueRequest, body);
      const result = await gateway.services.deadLetters.requeueDeadLetters(msgId, false);
      feed.refresh('dlq');
      gateway.logger.info(
        { operator: operator.record.name, msgId, ...result },
        'console: requeued dead letters',
      );
      return result;
    },
  };

  return {
    async handle(req, res, path) {
      if (path === '/ui') return redirect(res, '/ui/');
      if (!path.startsWith('/ui/')) return false;
      if (path === consoleLoginPath) return login(req, res);
      const asset = assets[path];
      if (asset && path !== '/ui/') return send(res, 200, asset.type, asset.body);

      const operator = operatorOf(req);
      if (!operator) return refuseUnauthenticated(res, path);
      if (path === '/ui/') return send(res, 200, assets['/ui/']!.type, assets['/ui/']!.body);
      if (req.method === 'POST' && req.headers.origin === undefined) {
        // A browser always sends Origin on a POST; without it, it did not come from the page.
        return sendJson(res, 403, { error: 'a console action needs the Origin header its page sends' });
      }
      if (path === '/ui/api/me') return sendJson(res, 200, addressOf(operator, gateway.host));
      if (path === '/ui/api/roster') return sendJson(res, 200, gateway.services.status.roster());
      if (path === '/ui/api/dlq') return answer(res, async () => latestDeadLetters(gateway));
      if (path === '/ui/api/asks') return sendJson(res, 200, pendingAsks(gateway));
      if (path === '/ui/api/overview') return answer(res, () => gateway.services.status.overview());
      if (path === '/ui/api/flows')
        return answer(res, async () => gateway.services.status.recentFlows(flowWindowMs));
      if (path === '/ui/api/entity') {
        const gid = new URL(req.url ?? '/', 'http://console').searchParams.get('gid') ?? '';
        return answer(res, async () => entityDetail(gateway, gid));
      }
      if (path === '/ui/api/message') {
        const msgId = new URL(req.url ?? '/', 'http://console').searchParams.get('msgId') ?? '';
        return answer(res, () => gateway.services.messageStatus(undefined, msgId));
      }
      const action = actions[path];
      if (action) {
        if (req.method !== 'POST')
          return sendJson(res, 405, {
            error: { code: ErrorCode.badRequest, message: `${path} takes a POST` },
          });
        return answer(res, async () =>
          action(operator, await readJsonBody(req, { maxBytes: maxActionBytes })),
        );
      }
      if (path === '/ui/api/events') return events(req, res);
      if (path === '/ui/api/logout' && req.method === 'POST') {
        sessions.end(cookieOf(req, consoleCookie) ?? '');
        res.setHeader('set-cookie', expiredCookie());
        return sendJson(res, 200, { ok: true });
      }
      return sendJson(res, 404, { error: `no console endpoint ${path}` });
    },
    close: () => feed.close(),
  };

  function login(req: IncomingMessage, res: ServerResponse): boolean {
    const code = new URL(req.url ?? '/', 'http://console').searchParams.get('code') ?? '';
    const redeemed = sessions.redeem(code);
    if (!redeemed) {
      gateway.logger.warn(
        { remote: req.socket.remoteAddress },
        'console login refused: unknown, used or expired code',
      );
      return sendPage(
        res,
        401,
        'This login link is unknown, used or expired. Run `agentbridge console` on the gateway host for a new one (each link works once, for 5 minutes).',
      );
    }
    const operator = gateway.directory.byGidOrUndefined(redeemed.operator);
    gateway.logger.info({ operator: operator?.record.name }, 'console login');
    res.setHeader('set-cookie', `${consoleCookie}=${redeemed.session}; HttpOnly; SameSite=Strict; Path=/ui`);
    return redirect(res, '/ui/');
  }

  /** Server-sent events: every topic of the feed now, then again whenever it changed. */
  function events(req: IncomingMessage, res: ServerResponse): boolean {
    res.writeHead(200, {
      ...securityHeaders,
      'content-type': 'text/event-stream; charset=utf-8',
      connection: 'keep-alive',
    });
    feed.subscribe(res, () => operatorOf(req) !== undefined);
    return true;
  }
}

/**
 * One entity of the roster: its entry and, for one of this host's, its latest deliveries with
 * their states (an entity of another host: that host's console has them).
 */
function entityDetail(gateway: Gateway, gid: string): Record<string, unknown> {
  const entry = gateway.services.status.roster().find((candidate) => candidate.gid === gid);
  if (!entry) {
    throw new BridgeError(ErrorCode.unknownRecipient, `no entity ${gid} in the roster; it may have left`);
  }
  const local = gateway.directory.byGidOrUndefined(gid) !== undefined;
  return { entry, local, deliveries: local ? gateway.services.status.recentDeliveries(gid) : null };
}

/** The machines' graphs, built on the first flow a page asks for. */
let graphs: readonly MachineGraph[] | undefined;

/**
 * A flow's merged timeline and sequence diagram (each up to its first maxFlowEvents rows), what
 * the re-run found, and the state-machine diagrams of the machines it went through, its
 * transitions and states marked (as `agentbridge viz --trace` draws them).
 */
function flowTimeline(
  storeFile: string,
  traceId: string,
  exports: readonly string[],
): Record<string, unknown> {
  graphs ??= registryGraphs();
  const dir = exports.length > 0 ? mkdtempSync(join(tmpdir(), 'bridge-console-flow-')) : undefined;
  try {
    const files = exports.map((text, i) => {
      const file = join(dir as string, `export-${i}.jsonl`);
      writeFileSync(file, text);
      return file;
    });
    const events: ReplayEvent[] = [];
    const sequence = new FlowSequence();
    const marker = new TraceMarker(traceId, graphs);
    const summary = replayTrace({
      sources: [storeFile, ...files],
      traceId,
      onEvent: (event) => {
        marker.add(event);
        if (events.length >= maxFlowEvents) return;
        events.push(event);
        sequence.add(event);
      },
    });
    const marks = marker.result();
    const machines = graphs.flatMap((graph) => {
      const used = marks.machines.get(graph.kind);
      return used ? [{ kind: graph.kind, svg: renderSvg(graph, { traceId, marks: used }) }] : [];
    });
    return {
      traceId,
      hosts: summary.hosts,
      events,
      total: summary.events,
      divergences: summary.divergences,
      sequence: sequence.result(),
      machines,
      unmatched: marks.unmatched,
    };
  } finally {
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
}

/** How many dead letters the page shows, and how many of the DLQ's (oldest first) are read for them. */
const dlqShown = 200;
const dlqScan = 2_000;
/** The DLQ is read again when its depth changed, and at least this often. */
const dlqMaxAgeMs = 60_000;

/**
 * The newest dead letters, newest first, each with its sender when its body is an envelope, and
 * how far the read reached (the page says so).
 */
async function latestDeadLetters(gateway: Gateway): Promise<Record<string, unknown>> {
  const latest = await gateway.services.deadLetters.latestDeadLetters(dlqShown, dlqScan, dlqMaxAgeMs);
  const letters = latest.letters.map((letter) => ({ ...letter, from: senderOf(letter.body) }));
  return { ...latest, letters, scanLimit: dlqScan };
}

/** Whom a dead letter's body says it is from: only loosely an envelope (it may be anything). */
const senderShape = z.object({ from: z.object({ name: z.string(), host: z.string() }).optional() });

/** `name@host` of a dead letter's sender, '' when its envelope names none, or a note that it is no envelope. */
function senderOf(body: string): string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return '(not an envelope)';
  }
  const shape = senderShape.safeParse(parsed);
  if (!shape.success) return '(not an envelope)';
  return shape.data.from ? `${shape.data.from.name}@${shape.data.from.host}` : '';
}

/** The ASKs held for this host's mains, not drained yet: what the console may answer. */
function pendingAsks(gateway: Gateway): Array<Record<string, unknown>> {
  const asks: Array<Record<string, unknown>> = [];
  for (const entity of gateway.directory.all()) {
    if (entity.record.kind !== 'main') continue;
    for (const ask of entity.heldOf(WireKind.ask)) {
      asks.push({
        main: entity.record.name,
        askId: ask.msgId,
        traceId: ask.traceId,
        turnId: ask.turnId,
        from: ask.from,
        text: ask.text,
        expiresAt: ask.expiresAt,
      });
    }
  }
  return asks;
}

/** Runs an API call: its result as JSON, or its refusal with the stable code and what to do. */
async function answer(res: ServerResponse, call: () => Promise<unknown>): Promise<boolean> {
  try {
    return sendJson(res, 200, await call());
  } catch (err) {
    const error = toBridgeError(err);
    return sendJson(res, statusOf(error.code), { error: error.toJSON() });
  }
}

function statusOf(code: string): number {
  if (code === ErrorCode.internal) return 500;
  if (code === ErrorCode.textTooLarge) return 413;
  if (code === ErrorCode.brokerUnavailable || code === ErrorCode.notAvailable) return 503;
  return 400;
}

function cookieOf(req: IncomingMessage, name: string): string | undefined {
  const header = req.headers.cookie;
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const [key, ...value] = part.trim().split('=');
    if (key === name) return value.join('=');
  }
  return undefined;
}

function expiredCookie(): string {
  return `${consoleCookie}=; HttpOnly; SameSite=Strict; Path=/ui; Max-Age=0`;
}

function refuseUnauthenticated(res: ServerResponse, path: string): boolean {
  const message =
    'Not logged in (no console session, or it ended). Run `agentbridge console` on the gateway host and open the URL it prints.';
  if (path.startsWith('/ui/api/')) return sendJson(res, 401, { error: message });
  return sendPage(res, 401, message);
}

function redirect(res: ServerResponse, location: string): boolean {
  res.writeHead(303, { ...securityHeaders, location });
  res.end();
  return true;
}

function send(res: ServerResponse, status: number, type: string, body: Buffer | string): boolean {
  res.writeHead(status, { ...securityHeaders, 'content-type': type });
  res.end(body);
  return true;
}

/** The page shows the strings it is sent as they are (as text): none may act or reorder what is shown. */
function sendJson(res: ServerResponse, status: number, body: unknown): boolean {
  return send(res, status, 'application/json; charset=utf-8', neutralisedJson(body));
}

/** A page of one paragraph (a refusal), with the same policy as the console. */
function sendPage(res: ServerResponse, status: number, message: string): boolean {
  const escaped = message.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  return send(
    res,
    status,
    'text/html; charset=utf-8',
    `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>agentbridge console</title><link rel="icon" href="data:,">` +
      `<link rel="stylesheet" href="/ui/app.css"></head><body><main><h1>agentbridge console</h1><p>${escaped}</p></main></body></html>`,
  );
}
