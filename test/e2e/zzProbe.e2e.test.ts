import { it } from 'vitest';
import { testBrokerUri, uniqueHostId, deleteQueues } from '../support/broker.js';
import { GatewayProcess } from '../support/gatewayProcess.js';
import { callTool, connectMcp } from '../support/mcpClient.js';

it('probe', async () => {
  const mk = (p: string, sync: string) => new GatewayProcess({ hostId: uniqueHostId(p), env: { BRIDGE_BROKER_URI: testBrokerUri }, config: { broker: { heartbeatMs: 1000, presenceTtlBeats: 30 }, store: { synchronous: sync } } });
  for (const sync of ['NORMAL', 'FULL']) {
    const a = mk('pa', sync); const b = mk('pb', sync);
    await a.start(); await b.start();
    const t = JSON.parse((await b.cli(['register', '--kind', 'main', '--name', 'inbox', '--json'])).stdout);
    const s = JSON.parse((await a.cli(['register', '--kind', 'main', '--name', 'src', '--json'])).stdout);
    const l = JSON.parse((await a.cli(['register', '--kind', 'main', '--name', 'loc', '--json'])).stdout);
    const c = await connectMcp(a.mcpUrl, s.token);
    for (const [label, to] of [['remote-gid', t.gid], ['local', 'loc'], ['roster', 'roster']] as const) {
      const times: number[] = [];
      for (let i = 0; i < 200; i++) {
        const t0 = performance.now();
        if (to === 'roster') await callTool(c, 'bridge_drain', {});
        else {
          const r = await callTool(c, 'bridge_send', { to, text: `x-${i}`, idempotency_key: `${label}-${i}` });
          if (r.isError) throw new Error(JSON.stringify(r.content));
        }
        times.push(performance.now() - t0);
      }
      times.sort((x, y) => x - y);
      console.log(sync, label, 'p50', times[100]?.toFixed(1), 'p90', times[180]?.toFixed(1), 'mean', (times.reduce((x, y) => x + y) / 200).toFixed(1));
    }
    await c.close(); await a.dispose(); await b.dispose();
    await deleteQueues([`agent.${t.gid}.inbox`, `agent.${s.gid}.inbox`, `agent.${l.gid}.inbox`, `control.${a.hostId}`, `control.${b.hostId}`]);
  }
}, 120000);
