/**
 * A WebSocket on a unix socket as a pair of line streams, for a JSON-RPC peer that reads and
 * writes one JSON message a line (jsonRpcPeer.ts): each text frame in is a line, each line out a
 * frame. Codex's app-server speaks so on `--listen unix://PATH` (one JSON-RPC message per text
 * frame, after an HTTP upgrade), where a person's TUI (`codex --remote unix://PATH`) can join it.
 */
import { PassThrough, Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import WebSocket from 'ws';

export interface WebSocketLines {
  readonly input: PassThrough;
  readonly output: Writable;
  /** Resolves with why the socket closed. */
  readonly closed: Promise<string>;
  close(): void;
}

/** The longest frame read: a message body is at most 1 MiB, a turn's items more. */
const maxFrameBytes = 16 * 1024 * 1024;

function open(socketPath: string): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws+unix://${socketPath}:/`, { maxPayload: maxFrameBytes });
    ws.once('open', () => {
      ws.off('error', reject);
      resolve(ws);
    });
    ws.once('error', reject);
  });
}

const retryMs = 100;

/**
 * Connects to `socketPath`, trying again every 100 ms while the server is not listening yet,
 * until `timeoutMs` has passed or `gone` settles (the server's process exited).
 */
export async function connectWebSocketLines(
  socketPath: string,
  timeoutMs: number,
  gone: Promise<unknown>,
): Promise<WebSocketLines> {
  let exited = false;
  gone.catch(() => undefined).finally(() => (exited = true));
  let ws: WebSocket | undefined;
  for (let tries = Math.ceil(timeoutMs / retryMs); ; tries--) {
    try {
      ws = await open(socketPath);
      break;
    } catch (err) {
      if (exited || tries <= 0)
        throw new Error(`nothing answers at ${socketPath}: ${(err as Error).message}`);
      await sleep(retryMs);
    }
  }
  const socket = ws;
  const input = new PassThrough();
  socket.on('message', (data: WebSocket.RawData, isBinary: boolean) => {
    if (!isBinary) input.write(`${data.toString()}\n`);
  });
  const output = new Writable({
    write(chunk: Buffer | string, _encoding, done) {
      for (const line of chunk.toString().split('\n')) if (line !== '') socket.send(line);
      done();
    },
  });
  const closed = new Promise<string>((resolve) => {
    socket.once('close', (code: number, reason: Buffer) => {
      input.end();
      resolve(`the app-server closed its socket (${code}${reason.length > 0 ? `: ${reason}` : ''})`);
    });
  });
  socket.on('error', () => socket.terminate());
  return { input, output, closed, close: () => socket.close() };
}
