#!/usr/bin/env node
// A stand-in for a coding agent in a pane: it reads the lines the gateway types into its
// terminal and answers each message through MCP with bridge_reply, as an agent would.
// Env: BRIDGE_MCP_URL, BRIDGE_TOKEN; optional BRIDGE_REPLY_PREFIX (default "done: ") and
// BRIDGE_LIST_TOOLS_AFTER_MS: list the tools that long after connecting, as an agent whose MCP
// client is slow to come up; a message that comes before is answered "no tools yet: ", as a
// real agent would have no bridge tool to answer it with.
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { fetchWithOwnSignal } from '../test/support/ownSignalFetch.mjs';

const url = process.env.BRIDGE_MCP_URL;
const token = process.env.BRIDGE_TOKEN;
const prefix = process.env.BRIDGE_REPLY_PREFIX ?? 'done: ';
if (!url || !token) {
  console.error('standInAgent: set BRIDGE_MCP_URL and BRIDGE_TOKEN');
  process.exit(2);
}

const injected = /^\[bridge (\w+) from (\S+) msg ([0-9a-f-]{36})(?: re [0-9a-f-]{36})?\] (.*)$/;

async function connect() {
  const client = new Client({ name: 'stand-in-agent', version: '1.0.0' });
  await client.connect(
    // Checked above: the script exits without BRIDGE_MCP_URL.
    new StreamableHTTPClientTransport(new URL(/** @type {string} */ (url)), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
      fetch: fetchWithOwnSignal(),
    }),
  );
  return client;
}

let client = await connect();
let listed = process.env.BRIDGE_LIST_TOOLS_AFTER_MS === undefined;
if (!listed) {
  setTimeout(() => {
    void client.listTools().then(() => {
      listed = true;
      console.log('stand-in agent listed the tools');
    });
  }, Number(process.env.BRIDGE_LIST_TOOLS_AFTER_MS));
}
console.log('stand-in agent ready');
for await (const line of createInterface({ input: process.stdin, terminal: false })) {
  const match = injected.exec(line.trim());
  if (!match) continue;
  const [, kind, from, msgId, text] = match;
  if (kind !== 'SEND') continue;
  const args = {
    to: from,
    text: `${listed ? prefix : 'no tools yet: '}${text}`,
    in_reply_to: msgId,
    idempotency_key: `reply-${msgId}`,
  };
  for (let attempt = 0; ; attempt++) {
    try {
      const result = await client.callTool({ name: 'bridge_reply', arguments: args });
      console.log(result.isError ? `reply refused: ${result.content?.[0]?.text}` : `replied to ${from}`);
      break;
    } catch (err) {
      if (attempt >= 20) throw err;
      await new Promise((r) => setTimeout(r, 250));
      client = await connect().catch(() => client);
    }
  }
}
