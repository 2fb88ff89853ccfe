// A stand-in ACP agent for the agent host's int tests (the real one, Gemini CLI over ACP, is in
// test/e2e/acpWorker.e2e.test.ts): newline-delimited JSON-RPC on stdio. What it does with a
// prompt depends on the prompt's words: "refuse" → an error; "permission" → it asks for one
// (session/request_permission) and ends the turn with the answer; "slow" → its first update after
// 800 ms; "silent" → no update, the turn just ends; "hang" → nothing at all; anything else → one message chunk, then
// end_turn. Each prompt's text is written to stderr as `PROMPT <text>`.
import { createInterface } from 'node:readline';

const write = (message) => process.stdout.write(`${JSON.stringify({ jsonrpc: '2.0', ...message })}\n`);
const sessionId = 'fake-session-1';
let nextId = 1;
const waiting = new Map();
const ask = (method, params) =>
  new Promise((resolve) => {
    const id = nextId++;
    waiting.set(id, resolve);
    write({ id, method, params });
  });
const update = (text) =>
  write({
    method: 'session/update',
    params: { sessionId, update: { sessionUpdate: 'agent_message_chunk', content: { type: 'text', text } } },
  });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function prompt(id, params) {
  const text = params.prompt.map((block) => block.text).join('');
  process.stderr.write(`PROMPT ${text}\n`);
  if (text.includes('refuse')) return write({ id, error: { code: -32000, message: 'refused by the fake' } });
  if (text.includes('permission')) {
    const answer = await ask('session/request_permission', {
      sessionId,
      toolCall: { toolCallId: 't1', title: 'touch PWNED', kind: 'execute' },
      options: [
        { optionId: 'allow', name: 'Allow', kind: 'allow_once' },
        { optionId: 'reject', name: 'Reject', kind: 'reject_once' },
      ],
    });
    update(`permission: ${JSON.stringify(answer.outcome)}`);
    return write({ id, result: { stopReason: 'end_turn' } });
  }
  if (text.includes('hang')) return;
  if (text.includes('slow')) await sleep(800);
  if (!text.includes('silent')) update(`done: ${text.slice(0, 40)}`);
  write({ id, result: { stopReason: 'end_turn' } });
}

createInterface({ input: process.stdin }).on('line', (line) => {
  const message = JSON.parse(line);
  if (message.method === undefined) {
    waiting.get(message.id)?.(message.result);
    waiting.delete(message.id);
    return;
  }
  if (message.method === 'initialize') {
    write({
      id: message.id,
      result: { protocolVersion: 1, agentInfo: { name: 'fake-acp', version: '1.0' }, agentCapabilities: {} },
    });
  } else if (message.method === 'session/new') {
    write({ id: message.id, result: { sessionId } });
  } else if (message.method === 'session/prompt') {
    void prompt(message.id, message.params);
  } else if (message.id !== undefined) {
    write({ id: message.id, error: { code: -32601, message: `no ${message.method}` } });
  }
});
