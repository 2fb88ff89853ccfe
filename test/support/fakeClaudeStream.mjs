// A stand-in for Claude Code's headless stream-json mode, for the agent host's int tests (the real
// one is in test/e2e/claudeStreamWorker.e2e.test.ts): user messages as JSON lines on stdin, the
// session as JSON lines on stdout. A turn opens with an init; each message is replayed
// (`--replay-user-messages`) when it is taken: the one a turn starts with a moment after the
// init, one that came meanwhile at the running turn's next inference boundary, joining that turn.
// What a turn does depends on its first message's words: "slow" → its answer after 800 ms;
// "permission" → a can_use_tool control request, answered by the host; "ignore" → the message
// is never taken (no replay). Every taken message's text is written to stderr as `TAKEN <text>`.
import { createInterface } from 'node:readline';

const write = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const textOf = (message) => message.message.content.map((block) => block.text).join('');
let busy = false;
/** Messages that came while a turn ran: taken at its next boundary. */
const waiting = [];
const answers = new Map();

const take = (message) => {
  process.stderr.write(`TAKEN ${textOf(message)}\n`);
  write({ type: 'user', isReplay: true, message: message.message, session_id: 'fake-claude-session' });
};

async function turn(first) {
  busy = true;
  // As Claude Code 2.1 does: each turn opens with an init, and the message it starts with is
  // replayed with the model's first answer.
  write({
    type: 'system',
    subtype: 'init',
    session_id: 'fake-claude-session',
    claude_code_version: '0.0-fake',
  });
  await sleep(50);
  take(first);
  const text = textOf(first);
  if (text.includes('slow')) await sleep(800);
  if (text.includes('permission')) {
    const requestId = `req-${Date.now()}`;
    const answered = new Promise((resolve) => answers.set(requestId, resolve));
    write({
      type: 'control_request',
      request_id: requestId,
      request: { subtype: 'can_use_tool', tool_name: 'Bash', input: { command: 'touch PWNED' } },
    });
    const response = await answered;
    write({
      type: 'assistant',
      message: { content: [{ type: 'text', text: `permission: ${response.behavior}` }] },
    });
  }
  // The next inference boundary: whatever came meanwhile joins this turn.
  while (waiting.length > 0) take(waiting.shift());
  write({ type: 'assistant', message: { content: [{ type: 'text', text: `done: ${text.slice(0, 40)}` }] } });
  write({ type: 'result', subtype: 'success', session_id: 'fake-claude-session' });
  busy = false;
}

createInterface({ input: process.stdin }).on('line', (line) => {
  const message = JSON.parse(line);
  if (message.type === 'control_response') {
    answers.get(message.response.request_id)?.(message.response.response);
    return;
  }
  if (message.type !== 'user') return;
  if (textOf(message).includes('ignore')) return;
  if (busy) waiting.push(message);
  else void turn(message);
});
