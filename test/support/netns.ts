import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';

/** Runs `ip …` (root is needed: network namespaces and veth pairs). */
export function ip(...args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('ip', args, { timeout: 10_000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`ip ${args.join(' ')} failed: ${stderr.trim() || err.message}`));
      else resolve(stdout);
    });
  });
}

/** One veth pair between the root namespace and the test's namespace, a /30 of its own. */
export interface VethLink {
  /** Interface in the root namespace, and its address. */
  readonly hostIf: string;
  readonly hostAddr: string;
  /** Interface inside the namespace, and its address. */
  readonly nsIf: string;
  readonly nsAddr: string;
}

/**
 * A TCP forwarder in the test process: listens on `listenHost:listenPort` and pipes every
 * connection to `targetHost:targetPort`. Either side closing or failing closes the other, so a
 * peer that goes away (as the broker decides after missed heartbeats) is seen by both ends.
 */
export class TcpForwarder {
  /** Connections accepted so far. */
  accepted = 0;
  /** Each open forwarded connection's two ends. */
  private readonly pairs = new Set<{ client: Socket; upstream: Socket }>();

  private constructor(private readonly server: Server) {}

  static async start(
    listenHost: string,
    listenPort: number,
    targetHost: string,
    targetPort: number,
  ): Promise<TcpForwarder> {
    const server = createServer({ noDelay: true });
    const forwarder = new TcpForwarder(server);
    server.on('connection', (client) => {
      forwarder.accepted++;
      const upstream = connect({ host: targetHost, port: targetPort, noDelay: true });
      const pair = { client, upstream };
      forwarder.pairs.add(pair);
      for (const socket of [client, upstream]) {
        socket.on('error', () => {});
        socket.on('close', () => {
          forwarder.pairs.delete(pair);
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream);
      upstream.pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(listenPort, listenHost, () => {
        server.off('error', reject);
        resolve();
      });
    });
    return forwarder;
  }

  /** The port it listens on (the one it was given, or the one the system chose for 0). */
  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  /**
   * Withholds what the target sends back on every open connection (its answers, confirms and
   * heartbeats), while what the client sends still reaches it: a broker that takes frames and
   * answers none. `release` delivers what was withheld and forwards again.
   */
  hold(): void {
    for (const { client, upstream } of this.pairs) {
      upstream.unpipe(client);
      upstream.pause();
    }
  }

  release(): void {
    for (const { client, upstream } of this.pairs) upstream.pipe(client);
  }

  /** Stops listening and drops every forwarded connection. */
  async close(): Promise<void> {
    for (const { client, upstream } of this.pairs) {
      client.destroy();
      upstream.destroy();
    }
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/**
 * A network namespace with two veth pairs to the root namespace, standing in for another
 * machine: `wan` carries its broker traffic (the link a partition cuts), `lan` is how the
 * test's MCP clients (its "local agents") reach it, and stays up. Inside, only `lo` and the
 * two veth ends exist, so the root namespace's 127.0.0.1 (where the broker listens) is
 * reachable only through a forwarder on `wan.hostAddr`.
 */
export class NetNamespace {
  readonly name: string;
  readonly wan: VethLink;
  readonly lan: VethLink;
  private created = false;
  private readonly forwarders: TcpForwarder[] = [];

  private constructor(name: string, wan: VethLink, lan: VethLink) {
    this.name = name;
    this.wan = wan;
    this.lan = lan;
  }

  /** Creates the namespace and both links, addressed and up. Cleans up after itself on failure. */
  static async create(): Promise<NetNamespace> {
    await sweepStale();
    const id = randomBytes(3).toString('hex');
    const subnet = await freeSubnet();
    const link = (tag: string, base: number): VethLink => ({
      hostIf: `bp${tag}${id}h`,
      nsIf: `bp${tag}${id}n`,
      hostAddr: `10.213.${subnet}.${base + 1}`,
      nsAddr: `10.213.${subnet}.${base + 2}`,
    });
    const ns = new NetNamespace(`bridge-part-${process.pid}-${id}`, link('w', 0), link('l', 4));
    try {
      await ip('netns', 'add', ns.name);
      ns.created = true;
      await ns.exec('ip', 'link', 'set', 'lo', 'up');
      for (const l of [ns.wan, ns.lan]) {
        await ip('link', 'add', l.hostIf, 'type', 'veth', 'peer', 'name', l.nsIf);
        await ip('link', 'set', l.nsIf, 'netns', ns.name);
        await ip('addr', 'add', `${l.hostAddr}/30`, 'dev', l.hostIf);
        await ip('link', 'set', l.hostIf, 'up');
        await ns.exec('ip', 'addr', 'add', `${l.nsAddr}/30`, 'dev', l.nsIf);
        await ns.exec('ip', 'link', 'set', l.nsIf, 'up');
      }
    } catch (err) {
      await ns.destroy().catch(() => {});
      throw err;
    }
    return ns;
  }

  /** The prefix that runs a command inside the namespace (`ip netns exec` execs it: same pid). */
  get wrap(): string[] {
    return ['ip', 'netns', 'exec', this.name];
  }

  exec(...command: string[]): Promise<string> {
    return ip('netns', 'exec', this.name, ...command);
  }

  /**
   * Forwards `wan.hostAddr:port` to `127.0.0.1:port` in the root namespace, so the namespace
   * reaches a loopback-only service (the broker) over the wan link. The service sees a
   * loopback peer, so a loopback-only login (RabbitMQ's guest) still works.
   */
  async forward(port: number): Promise<TcpForwarder> {
    const forwarder = await TcpForwarder.start(this.wan.hostAddr, port, '127.0.0.1', port);
    this.forwarders.push(forwarder);
    return forwarder;
  }

  /**
   * A silent partition of the wan link: its root-side end goes down, so the namespace's end
   * loses carrier and drops what it sends (no error, no RST, no route change in there),
   * and nothing from the root side reaches it.
   */
  async cut(): Promise<void> {
    await ip('link', 'set', this.wan.hostIf, 'down');
  }

  /** Brings the wan link back (its connected route returns with it). */
  async restore(): Promise<void> {
    await ip('link', 'set', this.wan.hostIf, 'up');
  }

  /** Closes the forwarders and deletes both veth pairs and the namespace. Safe to call twice. */
  async destroy(): Promise<void> {
    for (const forwarder of this.forwarders.splice(0)) await forwarder.close().catch(() => {});
    for (const l of [this.wan, this.lan]) {
      // Deleting one end deletes the pair; the namespace's end may be the one left.
      await ip('link', 'del', l.hostIf).catch(() => {});
    }
    if (this.created) {
      await ip('netns', 'del', this.name).catch(() => {});
      this.created = false;
    }
  }
}

/**
 * Deletes namespaces an earlier test process left behind (killed before its cleanup ran): those
 * named `bridge-part-<pid>-…` whose pid is gone. Their veth pairs go with them.
 */
async function sweepStale(): Promise<void> {
  const list = await ip('netns', 'list').catch(() => '');
  for (const line of list.split('\n')) {
    const match = /^(bridge-part-(\d+)-[0-9a-f]+)/.exec(line);
    if (!match || alive(Number(match[2]))) continue;
    await ip('netns', 'del', match[1] as string).catch(() => {});
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** A third octet X with no 10.213.X.* address on this machine yet. */
async function freeSubnet(): Promise<number> {
  const used = await ip('-4', '-o', 'addr', 'show');
  for (let attempt = 0; attempt < 100; attempt++) {
    const x = 1 + Math.floor(Math.random() * 254);
    if (!used.includes(`10.213.${x}.`)) return x;
  }
  throw new Error('no free 10.213.X.0/24 for the test namespace');
}
