// A stand-in for Codex CLI's app-server on a unix socket (`app-server --listen unix://PATH`), for
// the agent host's int tests (the real one is in test/e2e/nativeWorkers.e2e.test.ts): JSON-RPC,
// one message per WebSocket text frame, to every client connected (the host, and a "person's
// TUI" a test connects beside it). What it does:
//   initialize → {userAgent}; thread/start → {thread: {id}}; thread/name/set → {};
//   turn/start → {turn: {id}}, then turn/started to every client, and turn/completed when the
//     turn ends: after 800 ms if its text says "slow", at once otherwise;
//   turn/steer {expectedTurnId} → {turnId} while that turn runs, else an error.
// Every input taken is written to stderr as `TAKEN <text>`.
import { createServer } from 'node:http';
import { WebSocketServer } from 'ws';

const listen = process.argv[process.argv.indexOf('--listen') + 1] ?? '';
if (!listen.startsWith('unix://')) {
  process.stderr.write('this stand-in listens on unix://PATH only\n');
  process.exit(2);
}
const http = createServer();
const server = new WebSocketServer({ server: http });
http.listen(listen.slice('unix://'.length));
const clients = new Set();
const threadId = 'fake-thread-1';
let running; // { id, ending }
let turns = 0;

const textOf = (input) => (input ?? []).map((item) => item.text ?? '').join('');
const notifyAll = (method, params) => {
  for (const client of clients) client.send(JSON.stringify({ method, params }));
};

function startTurn(text) {
  const id = `turn-${++turns}`;
  running = { id };
  notifyAll('turn/started', { threadId, turn: { id, status: 'inProgress' } });
  running.ending = setTimeout(
    () => {
      running = undefined;
      notifyAll('item/completed', { item: { type: 'agentMessage', text: `done: ${text.slice(0, 40)}` } });
      notifyAll('turn/completed', { threadId, turn: { id, status: 'completed' } });
    },
    text.includes('slow') ? 800 : 20,
  );
  return id;
}

server.on('connection', (socket) => {
  clients.add(socket);
  socket.on('close', () => clients.delete(socket));
  socket.on('message', (data) => {
    const { id, method, params } = JSON.parse(String(data));
    if (id === undefined) return; // a notification (initialized)
    const answer = (result) => socket.send(JSON.stringify({ id, result }));
    const refuse = (message) => socket.send(JSON.stringify({ id, error: { code: -32600, message } }));
    switch (method) {
      case 'initialize':
        return answer({ userAgent: `${params.clientInfo.name}/0.0-fake (stand-in)` });
      case 'thread/start':
        return answer({ thread: { id: threadId } });
      case 'thread/name/set':
        return answer({});
      case 'turn/start': {
        const text = textOf(params.input);
        process.stderr.write(`TAKEN ${text}\n`);
        return answer({ turn: { id: startTurn(text), status: 'inProgress' } });
      }
      case 'turn/steer':
        if (!running || running.id !== params.expectedTurnId) return refuse('no such turn running');
        process.stderr.write(`TAKEN ${textOf(params.input)}\n`);
        return answer({ turnId: running.id });
      default:
        return refuse(`unknown method ${method}`);
    }
  });
});
process.on('SIGTERM', () => {
  server.close();
  http.close();
  process.exit(0);
});
