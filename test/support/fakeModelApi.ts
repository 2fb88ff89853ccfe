/**
 * A fake model API for driving real agent TUIs offline: one local HTTP server that speaks
 * enough of three wire protocols for a coding agent to run a turn against it.
 *
 * - Anthropic Messages (`POST /v1/messages`, SSE when `stream` is set): Claude Code with
 *   `ANTHROPIC_BASE_URL`.
 * - OpenAI Responses (`POST /v1/responses`, SSE): Codex with `openai_base_url = "<url>/v1"`.
 *   Codex first tries a WebSocket on the same path; the fake refuses the upgrade with a 426 and
 *   Codex falls back to HTTP.
 * - Gemini (`POST /v1beta/models/<model>:generateContent` and `:streamGenerateContent?alt=sse`):
 *   Gemini CLI with `GOOGLE_GEMINI_BASE_URL`.
 *
 * The script is fixed: a model turn that ends with a user prompt is answered with one call of
 * another of the agent's tools when `toolCall(prompt)` names one (an MCP tool, found in the
 * tools the request offers by the end of its name: `bridge_send` is Claude's
 * `mcp__bridge__bridge_send`), else with one call of the agent's shell tool running
 * `command(prompt)` (which makes the agent ask for permission), else with plain text; a turn
 * that ends with a tool result (the call was made, approved or denied) is answered with plain
 * text that ends the turn. Requests that
 * are not model turns (Claude's and Codex's title requests, Gemini's model router) get a reply
 * that satisfies the JSON schema they ask for. Every request is recorded.
 *
 * The wire shapes are those the CLIs pinned in package.json send and accept (read from their
 * bundles and from requests they made); they are written out here rather than taken from any
 * SDK so a test sees exactly what went over the wire.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { brotliDecompressSync, gunzipSync, inflateSync } from 'node:zlib';

export const ModelApi = {
  anthropic: 'anthropic',
  openai: 'openai',
  gemini: 'gemini',
} as const;
export type ModelApi = (typeof ModelApi)[keyof typeof ModelApi];

/** What a request was, as far as the fake could tell, and so how it was answered. */
export const RequestKind = {
  /** A model turn whose last input is a user prompt: answered with a tool call or text. */
  prompt: 'prompt',
  /** A model turn whose last input is a tool result: answered with text that ends the turn. */
  toolResult: 'tool-result',
  /** A model request that is not the conversation (title, routing): answered with JSON or text. */
  side: 'side',
  /** Anything else (health checks, refused WebSocket upgrades, unknown paths). */
  other: 'other',
} as const;
export type RequestKind = (typeof RequestKind)[keyof typeof RequestKind];

export interface RecordedRequest {
  readonly method: string;
  /** Path and query, as sent. */
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  /** The body parsed as JSON, or the raw text if it is not JSON (empty string if none). */
  readonly body: unknown;
  readonly api: ModelApi | undefined;
  readonly kind: RequestKind;
  /** For `prompt` requests: the user's text, without the context blocks the agent adds. */
  readonly prompt: string | undefined;
  /** For `prompt` requests answered with a shell call: the command the fake asked to run. */
  readonly command: string | undefined;
  /** For `prompt` requests answered with a call of another tool: that tool's full name. */
  readonly tool: string | undefined;
  /** For `tool-result` requests: the tool's output as the agent sent it back, as text. */
  readonly toolResult: string | undefined;
  /** HTTP status the fake answered with. */
  readonly status: number;
  /** When the request arrived (`Date.now()`). */
  readonly receivedAt: number;
}

/** A call of one of the tools the agent offers, named by the end of its name, and its arguments. */
export interface ToolCall {
  readonly tool: string;
  readonly args: Readonly<Record<string, unknown>>;
}

export interface FakeModelApiOptions {
  /** The tool call the fake model makes in answer to a user prompt, if any (before `command`). */
  readonly toolCall?: (prompt: string) => ToolCall | undefined;
  /**
   * The shell command the fake model asks to run in answer to a user prompt, or a function of
   * the prompt giving one (undefined: answer with plain text). Default: never run anything.
   */
  readonly command?: string | ((prompt: string) => string | undefined);
  /** Text the model answers with when it runs no command, or after a tool result. */
  readonly replyText?: string;
  /**
   * How long the model "thinks" before answering a user prompt (the agent shows itself busy
   * meanwhile), or a function of the prompt giving it. Default 0.
   */
  readonly replyDelayMs?: number | ((prompt: string) => number);
}

export interface FakeModelApi {
  /** Base URL, `http://127.0.0.1:<port>` (no trailing slash, no `/v1`). */
  readonly url: string;
  /** Every request received so far, oldest first. */
  readonly requests: readonly RecordedRequest[];
  /** User prompts that reached the model as new turns, oldest first, optionally for one API. */
  prompts(api?: ModelApi): string[];
  /** Stops the server, cutting any open connection. */
  close(): Promise<void>;
}

/** Starts the fake on 127.0.0.1 with an ephemeral port. */
export async function startFakeModelApi(options: FakeModelApiOptions = {}): Promise<FakeModelApi> {
  const requests: RecordedRequest[] = [];
  const commandFor = (prompt: string): string | undefined =>
    typeof options.command === 'function' ? options.command(prompt) : options.command;
  const script: Script = {
    commandFor,
    toolCallFor: options.toolCall ?? (() => undefined),
    replyText: options.replyText ?? 'Done.',
  };
  const delayFor = (prompt: string): number =>
    typeof options.replyDelayMs === 'function' ? options.replyDelayMs(prompt) : (options.replyDelayMs ?? 0);

  const closing = new AbortController();
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const receivedAt = Date.now();
    const { record, send } = route(script, req, await readBody(req), res);
    // Recorded on arrival, so a test sees the prompt while the agent is still waiting.
    requests.push({ ...record, receivedAt });
    const delay = record.kind === RequestKind.prompt ? delayFor(record.prompt ?? '') : 0;
    if (delay > 0) {
      // `close` cuts a pending delay short: the connection is gone by then, nothing to send.
      const cut = await sleep(delay, false, { signal: closing.signal }).catch(() => true);
      if (cut) return;
    }
    send();
  };
  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      // A body that cannot be read or decoded: the agent sees a 400 and the test a record of it.
      requests.push({
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: String(err),
        api: undefined,
        kind: RequestKind.other,
        prompt: undefined,
        command: undefined,
        tool: undefined,
        toolResult: undefined,
        status: 400,
        receivedAt: Date.now(),
      });
      if (!res.headersSent)
        sendJson(res, 400, { error: { type: 'invalid_request_error', message: String(err) } });
      else res.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    prompts(api?: ModelApi): string[] {
      return requests
        .filter((r) => r.kind === RequestKind.prompt && (api === undefined || r.api === api))
        .map((r) => r.prompt ?? '');
    },
    close(): Promise<void> {
      closing.abort();
      return new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}

interface Script {
  readonly commandFor: (prompt: string) => string | undefined;
  readonly toolCallFor: (prompt: string) => ToolCall | undefined;
  readonly replyText: string;
}

/** What the fake decided to say for one model request. */
type Reply =
  | { readonly type: 'shell'; readonly command: string }
  | { readonly type: 'call'; readonly name: string; readonly args: Readonly<Record<string, unknown>> }
  /** Codex's code mode: a script for its `exec` tool that calls the tool (see `openaiTurn`). */
  | { readonly type: 'code'; readonly tool: string; readonly source: string }
  | { readonly type: 'text'; readonly text: string };

interface Turn {
  readonly kind: RequestKind;
  readonly prompt: string | undefined;
  readonly reply: Reply;
  readonly toolResult?: string;
}

/** The request body as text, decompressed if the client compressed it. */
async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const body = Buffer.concat(chunks);
  switch (req.headers['content-encoding']) {
    case 'gzip':
      return gunzipSync(body).toString('utf8');
    case 'br':
      return brotliDecompressSync(body).toString('utf8');
    case 'deflate':
      return inflateSync(body).toString('utf8');
    default:
      return body.toString('utf8');
  }
}

function parseJson(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

/** How the fake answers one request: what to record, and the reply to send (maybe later). */
interface Answer {
  readonly record: Omit<RecordedRequest, 'receivedAt'>;
  readonly send: () => void;
}

function route(script: Script, req: IncomingMessage, raw: string, res: ServerResponse): Answer {
  const method = req.method ?? '';
  const url = req.url ?? '';
  const path = url.split('?')[0] ?? '';
  const body = parseJson(raw);
  const answer = (api: ModelApi | undefined, status: number, send: () => void, turn?: Turn): Answer => ({
    record: {
      method,
      url,
      headers: req.headers,
      body,
      api,
      kind: turn?.kind ?? RequestKind.other,
      prompt: turn?.prompt,
      command: turn?.reply.type === 'shell' ? turn.reply.command : undefined,
      tool:
        turn?.reply.type === 'call'
          ? turn.reply.name
          : turn?.reply.type === 'code'
            ? `exec: ${turn.reply.tool}`
            : undefined,
      toolResult: turn?.toolResult,
      status,
    },
    send,
  });

  if (method === 'POST' && path === '/v1/messages') {
    const turn = anthropicTurn(script, asRecord(body));
    return answer(ModelApi.anthropic, 200, () => sendAnthropic(res, asRecord(body), turn.reply), turn);
  }
  if (method === 'POST' && path === '/v1/messages/count_tokens') {
    return answer(ModelApi.anthropic, 200, () => sendJson(res, 200, { input_tokens: 1 }));
  }
  if (method === 'POST' && path === '/v1/responses') {
    const turn = openaiTurn(script, asRecord(body));
    return answer(ModelApi.openai, 200, () => sendOpenai(res, turn.reply), turn);
  }
  if (path === '/v1/responses' && req.headers.upgrade !== undefined) {
    // Codex prefers a WebSocket. Refused with 426 it falls back to HTTP + SSE (all this fake
    // speaks) after one attempt; a 404 costs five retries with backoff on every turn.
    return answer(ModelApi.openai, 426, () =>
      sendJson(res, 426, {
        error: { type: 'upgrade_required', message: 'The fake model API speaks no WebSocket' },
      }),
    );
  }
  const gemini = /^\/v1(?:beta|alpha)?\/models\/([^/:]+):(generateContent|streamGenerateContent)$/.exec(path);
  if (method === 'POST' && gemini) {
    const turn = geminiTurn(script, asRecord(body));
    const stream = gemini[2] === 'streamGenerateContent';
    return answer(
      ModelApi.gemini,
      200,
      () => sendGemini(res, turn.reply, stream, gemini[1] ?? 'gemini'),
      turn,
    );
  }
  if (method === 'POST' && /^\/v1(?:beta|alpha)?\/models\/[^/:]+:countTokens$/.test(path)) {
    return answer(ModelApi.gemini, 200, () => sendJson(res, 200, { totalTokens: 1 }));
  }
  if ((method === 'HEAD' || method === 'GET') && path === '/') {
    // Claude Code probes the base URL before its first request.
    return answer(undefined, 200, () =>
      res
        .writeHead(200, { 'content-type': 'text/plain' })
        .end(method === 'HEAD' ? undefined : 'fake model api\n'),
    );
  }
  return answer(undefined, 404, () =>
    sendJson(res, 404, {
      type: 'error',
      error: { type: 'not_found_error', code: 404, message: `The fake model API has no ${method} ${path}` },
    }),
  );
}

/** Blocks the agents add around the user's words: Claude's reminders, Gemini's session context. */
function isAddedContext(text: string): boolean {
  return /^\s*<(system-reminder|session_context|environment_context)>/.test(text);
}

/**
 * The reply for a turn whose last input is a user prompt, given the names of the tools the
 * request offers. A call of a tool the agent does not offer is answered in text that says so
 * (the agent shows it; the test's wait for the call's effect fails with it on screen).
 */
function promptTurn(
  script: Script,
  prompt: string,
  offered: readonly string[],
  viaCode?: (call: ToolCall) => Reply,
): Turn {
  const turn = (reply: Reply): Turn => ({ kind: RequestKind.prompt, prompt, reply });
  const call = script.toolCallFor(prompt);
  if (call !== undefined) {
    const name = offered.find((n) => n === call.tool) ?? offered.find((n) => n.endsWith(call.tool));
    if (name !== undefined) return turn({ type: 'call', name, args: call.args });
    if (viaCode !== undefined) return turn(viaCode(call));
    return turn({ type: 'text', text: `No tool named ${call.tool} is offered (${offered.join(', ')})` });
  }
  const command = script.commandFor(prompt);
  return turn(command === undefined ? { type: 'text', text: script.replyText } : { type: 'shell', command });
}

function toolResultTurn(script: Script, toolResult: string): Turn {
  return {
    kind: RequestKind.toolResult,
    prompt: undefined,
    reply: { type: 'text', text: script.replyText },
    toolResult,
  };
}

/** A tool output as text: a string as it is, content parts' texts joined, anything else as JSON. */
function textOf(output: unknown): string {
  if (typeof output === 'string') return output;
  const parts = asArray(output).map(asRecord);
  if (parts.length > 0 && parts.every((p) => typeof p.text === 'string'))
    return parts.map((p) => p.text as string).join('\n');
  return JSON.stringify(output ?? null);
}

function sideTurn(schema: unknown): Turn {
  const text = schema === undefined ? 'OK' : JSON.stringify(sampleOf(schema));
  return { kind: RequestKind.side, prompt: undefined, reply: { type: 'text', text } };
}

// ---------------------------------------------------------------- Anthropic Messages

/** Claude Code's conversation requests carry its tools; title and other side requests do not. */
function anthropicTurn(script: Script, body: Record<string, unknown>): Turn {
  const tools = asArray(body.tools).map(asRecord);
  const format = asRecord(asRecord(body.output_config).format);
  if (!tools.some((t) => t.name === 'Bash')) return sideTurn(format.schema);
  const lastUser = asArray(body.messages)
    .map(asRecord)
    .filter((m) => m.role === 'user')
    .at(-1);
  const content = lastUser?.content;
  const blocks =
    typeof content === 'string' ? [{ type: 'text', text: content }] : asArray(content).map(asRecord);
  const result = blocks.find((b) => b.type === 'tool_result');
  if (result !== undefined) return toolResultTurn(script, textOf(result.content));
  const prompt = blocks
    .filter((b) => b.type === 'text' && typeof b.text === 'string')
    .map((b) => b.text as string)
    .filter((text) => !isAddedContext(text))
    .join('\n');
  return promptTurn(
    script,
    prompt,
    tools.map((t) => String(t.name)),
  );
}

function sendAnthropic(res: ServerResponse, body: Record<string, unknown>, reply: Reply): void {
  const model = typeof body.model === 'string' ? body.model : 'claude-fake';
  const id = `msg_${randomUUID().replaceAll('-', '')}`;
  const toolUse = (name: string, input: unknown) => ({
    type: 'tool_use' as const,
    id: `toolu_${randomUUID().replaceAll('-', '')}`,
    name,
    input,
  });
  const block =
    reply.type === 'shell'
      ? toolUse('Bash', { command: reply.command, description: 'Run the requested command' })
      : reply.type === 'call'
        ? toolUse(reply.name, reply.args)
        : { type: 'text' as const, text: textOfReply(reply) };
  const stopReason = block.type === 'text' ? 'end_turn' : 'tool_use';
  const usage = {
    input_tokens: 10,
    output_tokens: 10,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
  };
  if (body.stream !== true) {
    sendJson(res, 200, {
      id,
      type: 'message',
      role: 'assistant',
      model,
      content: [block],
      stop_reason: stopReason,
      stop_sequence: null,
      usage,
    });
    return;
  }
  const events: [string, unknown][] = [
    [
      'message_start',
      {
        type: 'message_start',
        message: {
          id,
          type: 'message',
          role: 'assistant',
          model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { ...usage, output_tokens: 1 },
        },
      },
    ],
  ];
  if (block.type === 'tool_use') {
    events.push(
      [
        'content_block_start',
        {
          type: 'content_block_start',
          index: 0,
          content_block: { type: 'tool_use', id: block.id, name: block.name, input: {} },
        },
      ],
      [
        'content_block_delta',
        {
          type: 'content_block_delta',
          index: 0,
          delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input) },
        },
      ],
    );
  } else {
    events.push(
      [
        'content_block_start',
        { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
      ],
      [
        'content_block_delta',
        { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: block.text } },
      ],
    );
  }
  events.push(
    ['content_block_stop', { type: 'content_block_stop', index: 0 }],
    [
      'message_delta',
      {
        type: 'message_delta',
        delta: { stop_reason: stopReason, stop_sequence: null },
        usage: { output_tokens: 10 },
      },
    ],
    ['message_stop', { type: 'message_stop' }],
  );
  sendSse(res, events);
}

// ---------------------------------------------------------------- OpenAI Responses

const openaiOutputTypes = new Set(['function_call_output', 'custom_tool_call_output']);

/**
 * Codex's conversation requests have no `text.format`; its title request asks for a JSON schema.
 * The last input item that is a user message or a tool output tells what the turn is answering
 * (Codex appends developer messages and configuration items after the prompt).
 */
function openaiTurn(script: Script, body: Record<string, unknown>): Turn {
  const format = asRecord(asRecord(body.text).format);
  if (format.type === 'json_schema') return sideTurn(format.schema);
  const last = asArray(body.input)
    .map(asRecord)
    .filter(
      (item) => (item.type === 'message' && item.role === 'user') || openaiOutputTypes.has(String(item.type)),
    )
    .at(-1);
  if (last === undefined) return sideTurn(undefined);
  if (last.type !== 'message') return toolResultTurn(script, textOf(last.output));
  const prompt = asArray(last.content)
    .map(asRecord)
    .filter((part) => part.type === 'input_text' && typeof part.text === 'string')
    .map((part) => part.text as string)
    .filter((text) => !isAddedContext(text))
    .join('\n');
  const tools = openaiTools(body);
  return promptTurn(
    script,
    prompt,
    tools.functions,
    tools.codeMode ? (call) => ({ type: 'code', tool: call.tool, source: execSource(call) }) : undefined,
  );
}

/**
 * The tools a Responses request offers: function tools by name, in `tools` or (Codex 0.171) in
 * an `additional_tools` input item, grouped in namespaces. Codex's code mode offers a custom
 * `exec` tool instead of its MCP tools: the model calls them from a script it runs, as
 * `tools.mcp__bridge__bridge_send(args)` (the MCP servers are listed as "deferred" namespaces).
 */
function openaiTools(body: Record<string, unknown>): { functions: string[]; codeMode: boolean } {
  const listed = [
    ...asArray(body.tools),
    ...asArray(body.input)
      .map(asRecord)
      .filter((item) => item.type === 'additional_tools')
      .flatMap((item) => asArray(item.tools)),
  ].map(asRecord);
  const flat = listed.flatMap((tool) =>
    tool.type === 'namespace' ? asArray(tool.tools).map(asRecord) : [tool],
  );
  return {
    functions: flat.filter((t) => t.type === 'function').map((t) => String(t.name)),
    codeMode: flat.some((t) => t.type === 'custom' && t.name === 'exec'),
  };
}

/** A code-mode script that finds the tool by the end of its name, calls it and returns its result. */
function execSource(call: ToolCall): string {
  return [
    `const found = ALL_TOOLS.find((t) => t.name.endsWith(${JSON.stringify(call.tool)}));`,
    `if (!found) { text('No tool named ${call.tool}'); exit(); }`,
    `const result = await tools[found.name](${JSON.stringify(call.args)});`,
    'text(JSON.stringify(result));',
  ].join('\n');
}

function sendOpenai(res: ServerResponse, reply: Reply): void {
  const responseId = `resp_${randomUUID().replaceAll('-', '')}`;
  const functionCall = (name: string, args: unknown) => ({
    type: 'function_call',
    id: `fc_${randomUUID().replaceAll('-', '')}`,
    call_id: `call_${randomUUID().replaceAll('-', '')}`,
    name,
    arguments: JSON.stringify(args),
    status: 'completed',
  });
  const item =
    reply.type === 'shell'
      ? functionCall('exec_command', {
          cmd: reply.command,
          // Without escalation Codex would run the command in its sandbox without asking.
          sandbox_permissions: 'require_escalated',
          justification: 'Do you want to run the requested command?',
        })
      : reply.type === 'call'
        ? functionCall(reply.name, reply.args)
        : reply.type === 'code'
          ? {
              type: 'custom_tool_call',
              id: `ctc_${randomUUID().replaceAll('-', '')}`,
              call_id: `call_${randomUUID().replaceAll('-', '')}`,
              name: 'exec',
              input: reply.source,
              status: 'completed',
            }
          : {
              type: 'message',
              id: `msg_${randomUUID().replaceAll('-', '')}`,
              role: 'assistant',
              status: 'completed',
              content: [{ type: 'output_text', text: reply.text, annotations: [] }],
            };
  const response = (status: string, output: unknown[]) => ({
    id: responseId,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    status,
    model: 'fake',
    output,
    usage:
      status === 'completed'
        ? {
            input_tokens: 10,
            input_tokens_details: { cached_tokens: 0 },
            output_tokens: 10,
            output_tokens_details: { reasoning_tokens: 0 },
            total_tokens: 20,
          }
        : null,
  });
  const events: [string, unknown][] = [
    ['response.created', { type: 'response.created', response: response('in_progress', []) }],
    ['response.output_item.added', { type: 'response.output_item.added', output_index: 0, item }],
  ];
  if (reply.type === 'text')
    events.push([
      'response.output_text.delta',
      {
        type: 'response.output_text.delta',
        item_id: item.id,
        output_index: 0,
        content_index: 0,
        delta: reply.text,
      },
    ]);
  events.push(
    ['response.output_item.done', { type: 'response.output_item.done', output_index: 0, item }],
    ['response.completed', { type: 'response.completed', response: response('completed', [item]) }],
  );
  sendSse(res, events);
}

// ---------------------------------------------------------------- Gemini

/** Gemini CLI's conversation requests declare its shell tool; the model router's do not. */
function geminiTurn(script: Script, body: Record<string, unknown>): Turn {
  const declarations = asArray(body.tools).flatMap((t) =>
    asArray(asRecord(t).functionDeclarations).map(asRecord),
  );
  const config = asRecord(body.generationConfig);
  if (!declarations.some((d) => d.name === 'run_shell_command'))
    return sideTurn(config.responseJsonSchema ?? config.responseSchema);
  const lastUser = asArray(body.contents)
    .map(asRecord)
    .filter((c) => c.role === 'user')
    .at(-1);
  const parts = asArray(lastUser?.parts).map(asRecord);
  const result = parts.find((p) => p.functionResponse !== undefined);
  if (result !== undefined) return toolResultTurn(script, textOf(asRecord(result.functionResponse).response));
  const prompt = parts
    .filter((p) => typeof p.text === 'string')
    .map((p) => p.text as string)
    .filter((text) => !isAddedContext(text))
    .join('\n');
  return promptTurn(
    script,
    prompt,
    declarations.map((d) => String(d.name)),
  );
}

function sendGemini(res: ServerResponse, reply: Reply, stream: boolean, model: string): void {
  const part =
    reply.type === 'shell'
      ? {
          functionCall: {
            name: 'run_shell_command',
            args: { command: reply.command, description: 'Run the requested command' },
          },
        }
      : reply.type === 'call'
        ? { functionCall: { name: reply.name, args: reply.args } }
        : { text: textOfReply(reply) };
  const chunk = {
    candidates: [{ content: { role: 'model', parts: [part] }, finishReason: 'STOP', index: 0 }],
    usageMetadata: { promptTokenCount: 10, candidatesTokenCount: 10, totalTokenCount: 20 },
    modelVersion: model,
    responseId: randomUUID(),
  };
  if (!stream) {
    sendJson(res, 200, chunk);
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.end(`data: ${JSON.stringify(chunk)}\r\n\r\n`);
}

// ---------------------------------------------------------------- shared

/** A text reply's text; only Codex is answered in code (`openaiTurn`), any other API in words. */
function textOfReply(reply: Extract<Reply, { type: 'text' | 'code' }>): string {
  return reply.type === 'text' ? reply.text : `Code mode is Codex's: ${reply.tool}`;
}

function sendJson(res: ServerResponse, status: number, value: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value));
}

function sendSse(res: ServerResponse, events: readonly [string, unknown][]): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.end(events.map(([event, data]) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`).join(''));
}

function asRecord(value: unknown): Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};
}

function asArray(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}

/**
 * A small value that satisfies a JSON schema of the kinds the agents send for side requests
 * (an object of strings and numbers). Gemini spells types in upper case.
 */
export function sampleOf(schema: unknown): unknown {
  const s = asRecord(schema);
  const enumValues = asArray(s.enum);
  if (enumValues.length > 0) return enumValues[0];
  const type = String(Array.isArray(s.type) ? s.type[0] : (s.type ?? 'object')).toLowerCase();
  switch (type) {
    case 'object': {
      const properties = asRecord(s.properties);
      return Object.fromEntries(Object.entries(properties).map(([key, value]) => [key, sampleOf(value)]));
    }
    case 'array':
      return [];
    case 'string': {
      const max = typeof s.maxLength === 'number' ? s.maxLength : 64;
      return 'Fake title'.slice(0, Math.max(1, max));
    }
    case 'integer':
    case 'number':
      return typeof s.minimum === 'number' ? s.minimum : 1;
    case 'boolean':
      return false;
    default:
      return null;
  }
}
