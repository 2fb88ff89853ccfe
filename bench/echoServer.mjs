// The transport floor's server: parses a JSON POST body and answers it back as JSON. Started by
// bench/run.mjs as its own process; prints {"port"} on stdout once it listens; exits on SIGTERM.
import { createServer } from 'node:http';

const server = createServer((req, res) => {
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => {
    const body = JSON.stringify({ echo: JSON.parse(Buffer.concat(chunks).toString('utf8')) });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
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
