// A memory probe, not a benchmark: floods a main with same-host messages from another main on a
// single-host gateway (default config, a temp home) and prints what was queued and refused and
// the gateway's RSS and events.db size before and after. Run against another checkout's build to
// compare (its test support starts its own dist/):
//   npx tsx tools/floodProbe.ts [ROOT=.] [COUNT=8000] [BYTES=8192]
import { statSync } from 'node:fs';
import { join, resolve } from 'node:path';

const [root = '.', countArg = '8000', bytesArg = '8192'] = process.argv.slice(2);
const repo = resolve(root);
const { GatewayProcess } = (await import(
  join(repo, 'test/support/GatewayProcess.ts')
)) as typeof import('../test/support/GatewayProcess.js');
const { callTool, connectMcp } = (await import(
  join(repo, 'test/support/mcpClient.ts')
)) as typeof import('../test/support/mcpClient.js');
const { rssMb } = await import('../test/support/processMemory.js');

const gateway = new GatewayProcess({});
await gateway.start();
const register = async (name: string) =>
  JSON.parse((await gateway.cli(['register', '--kind', 'main', '--name', name, '--json'])).stdout) as {
    token: string;
  };
const flood = await register('flood');
await register('sink');
const client = await connectMcp(gateway.mcpUrl, flood.token);
const dbMb = () => Math.round((statSync(join(gateway.home, 'events.db')).size / 1048576) * 10) / 10;
const pid = gateway.pid as number;
const before = { rssMb: Math.round(rssMb(pid)), eventsDbMb: dbMb() };
const text = 'x'.repeat(Number(bytesArg));
const outcomes: Record<string, number> = {};
const started = Date.now();
for (let i = 0; i < Number(countArg); i++) {
  const r = await callTool(client, 'bridge_send', { to: 'sink', text: `${i} ${text}` });
  const outcome = r.isError ? ((r.structuredContent?.error as { code?: string })?.code ?? 'error') : 'queued';
  outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
}
await new Promise((done) => setTimeout(done, 2_000));
console.log(
  JSON.stringify({
    root: repo,
    sent: Number(countArg),
    bytes: Number(bytesArg),
    outcomes,
    seconds: (Date.now() - started) / 1000,
    before,
    after: { rssMb: Math.round(rssMb(pid)), eventsDbMb: dbMb() },
  }),
);
await client.close();
await gateway.dispose();
