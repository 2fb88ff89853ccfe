// The MCP SDK floors' server: an McpServer with one tool shaped like bridge_send (a zod input and
// output schema, a text and a structured result) that echoes its arguments and does nothing else,
// served over the SDK's Streamable HTTP transport in the variant named by argv[2]:
//   session-sse    a session per initialize, one McpServer per session, responses as SSE streams
//                  (how the gateway serves MCP today);
//   session-json   the same with `enableJsonResponse` (a tool result comes back as one JSON body);
//   stateless-json no sessions: a new McpServer and transport for every request (the SDK's
//                  stateless pattern), JSON responses.
// Started by bench/lib/floors.mjs as its own process; prints {"port"} on stdout once it listens;
// exits on SIGTERM.
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import { z } from 'zod';

const variants = ['session-sse', 'session-json', 'stateless-json'];

const variant = process.argv[2];
if (!variants.includes(variant)) {
  process.stderr.write(`mcpEchoServer: expected one of ${variants.join(', ')}, got ${variant}\n`);
  process.exit(2);
}

const jsonSchemaValidator = new AjvJsonSchemaValidator();
const echoTool = {
  description: 'Echoes its arguments.',
  inputSchema: { to: z.string().min(1), text: z.string().min(1) },
  outputSchema: { to: z.string(), text: z.string(), at: z.number() },
};

function echoServer() {
  const server = new McpServer({ name: 'echo', version: '1.0.0' }, { jsonSchemaValidator });
  server.registerTool('bridge_send', echoTool, async ({ to, text }) => {
    const structured = { to, text, at: Date.now() };
    return { content: [{ type: 'text', text: JSON.stringify(structured) }], structuredContent: structured };
  });
  return server;
}

const sessions = new Map();

async function handle(req, res, body) {
  if (variant === 'stateless-json') {
    const server = echoServer();
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
    });
    res.once('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    return transport.handleRequest(req, res, body);
  }
  const id = req.headers['mcp-session-id'];
  if (typeof id === 'string') {
    const transport = sessions.get(id);
    if (!transport) {
      res.writeHead(404).end();
      return;
    }
    return transport.handleRequest(req, res, body);
  }
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    enableJsonResponse: variant === 'session-json',
    onsessioninitialized: (sessionId) => sessions.set(sessionId, transport),
  });
  transport.onclose = () => sessions.delete(transport.sessionId);
  await echoServer().connect(transport);
  return transport.handleRequest(req, res, body);
}

const server = createServer(async (req, res) => {
  try {
    let body;
    if (req.method === 'POST') {
      const chunks = [];
      for await (const chunk of req) chunks.push(chunk);
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    }
    await handle(req, res, body);
  } catch (err) {
    process.stderr.write(`mcpEchoServer: ${err.stack}\n`);
    if (!res.headersSent) res.writeHead(500);
    res.end();
  }
});

server.listen(0, '127.0.0.1', () => {
  process.stdout.write(
    `${JSON.stringify({ port: /** @type {import('node:net').AddressInfo} */ (server.address()).port })}\n`,
  );
});

process.once('SIGTERM', () => {
  server.closeAllConnections();
  server.close(() => process.exit(0));
});
