/**
 * JSON-RPC 2.0 over newline-delimited JSON, both ways: the framing of the Agent Client Protocol
 * on an agent's stdio ("messages are delimited by newlines and MUST NOT contain embedded
 * newlines", agentclientprotocol.com/protocol/transports). Requests we send are answered by id;
 * requests and notifications the agent sends go to the handlers given. A line longer than the
 * cap is dropped (the agent's output is bounded before it is parsed).
 */
import type { Readable, Writable } from 'node:stream';
import { createLineSplitter } from '../text/lineSplitter.js';

export interface JsonRpcError {
  code: number;
  message: string;
  data?: unknown;
}

/** A request of ours the peer answered with an error. */
export class JsonRpcRemoteError extends Error {
  constructor(
    readonly method: string,
    readonly error: JsonRpcError,
  ) {
    super(`${method}: ${error.message} (code ${error.code})`);
  }
}

export interface JsonRpcHandlers {
  /** A request from the peer: resolve with the result, or reject to answer with an error. */
  request(method: string, params: unknown): Promise<unknown>;
  notification(method: string, params: unknown): void;
  /** A line that is not JSON-RPC (or is too long): said once per line, never fatal. */
  badLine(reason: string): void;
}

export interface JsonRpcPeer {
  request(method: string, params: unknown): Promise<unknown>;
  notify(method: string, params: unknown): void;
  /** Rejects every request still waiting (the peer is gone). */
  close(reason: string): void;
}

interface Waiting {
  method: string;
  resolve(result: unknown): void;
  reject(err: Error): void;
}

export function createJsonRpcPeer(
  input: Readable,
  output: Writable,
  handlers: JsonRpcHandlers,
  maxLineChars = 16 * 1024 * 1024,
): JsonRpcPeer {
  const waiting = new Map<number, Waiting>();
  let nextId = 1;
  let closed: string | undefined;
  const splitter = createLineSplitter(maxLineChars);
  const write = (message: Record<string, unknown>): void => {
    if (closed === undefined) output.write(`${JSON.stringify({ jsonrpc: '2.0', ...message })}\n`);
  };

  const answer = (id: unknown, method: string, params: unknown): void => {
    handlers.request(method, params).then(
      (result) => write({ id, result: result ?? null }),
      (err: unknown) =>
        write({ id, error: { code: -32603, message: err instanceof Error ? err.message : String(err) } }),
    );
  };

  const receive = (line: string): void => {
    let message: Record<string, unknown>;
    try {
      const parsed: unknown = JSON.parse(line);
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
        throw new Error('not an object');
      message = parsed as Record<string, unknown>;
    } catch {
      handlers.badLine(`not JSON: ${line.slice(0, 120)}`);
      return;
    }
    const { id, method } = message;
    if (typeof method === 'string') {
      if (id === undefined || id === null) handlers.notification(method, message.params);
      else answer(id, method, message.params);
      return;
    }
    const pending = typeof id === 'number' ? waiting.get(id) : undefined;
    if (!pending) {
      handlers.badLine(`an answer to no request of ours (id ${JSON.stringify(id)})`);
      return;
    }
    waiting.delete(id as number);
    if (message.error !== undefined)
      pending.reject(new JsonRpcRemoteError(pending.method, message.error as JsonRpcError));
    else pending.resolve(message.result);
  };

  input.setEncoding('utf8');
  input.on('data', (chunk: string) => {
    for (const line of splitter.push(chunk)) receive(line);
    if (splitter.takeOverflow())
      handlers.badLine(`a line longer than ${maxLineChars} characters was dropped`);
  });

  return {
    request(method, params) {
      if (closed !== undefined) return Promise.reject(new Error(`${method}: ${closed}`));
      const id = nextId++;
      return new Promise((resolve, reject) => {
        waiting.set(id, { method, resolve, reject });
        write({ id, method, params });
      });
    },
    notify(method, params) {
      write({ method, params });
    },
    close(reason) {
      if (closed !== undefined) return;
      closed = reason;
      for (const pending of waiting.values()) pending.reject(new Error(`${pending.method}: ${reason}`));
      waiting.clear();
    },
  };
}
