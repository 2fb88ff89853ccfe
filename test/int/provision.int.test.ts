import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import amqp, { type ChannelModel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/loadConfig.js';
import { type Daemon, startDaemon } from '../../src/daemon/startDaemon.js';
import type { GatewayPermissions } from '../../src/federation/permissions.js';
import { inboxName } from '../../src/federation/topology.js';
import { silentLogger } from '../../src/log/logger.js';
import { initKeys } from '../../src/security/keys.js';
import { addTrust } from '../../src/security/TrustStore.js';
import { uniqueHostId } from '../support/broker.js';
import { runCli } from '../support/GatewayProcess.js';
import { startTlsBroker, type TlsBroker } from '../support/tlsBroker.js';
import { waitFor } from '../support/waitFor.js';

// `agentbridge broker provision HOST --apply` against a private RabbitMQ node (the shared one's
// users are left alone): each gateway logs in as its own least-privilege user over amqps.

interface ProvisionJson {
  user: string;
  password: string | null;
  applied: boolean;
  userExisted: boolean | null;
  entities: { gid: string; name: string }[];
  permissions: GatewayPermissions;
  commands: string[];
}

interface Host {
  hostId: string;
  home: string;
  gid: string;
  token: string;
  daemon?: Daemon | undefined;
  login?: ProvisionJson;
}

/** Any AMQP error code (403 ACCESS_REFUSED) a failed operation closed its channel with. */
async function refusal(connection: ChannelModel, operation: (c: amqp.Channel) => Promise<unknown>) {
  const channel = await connection.createChannel();
  let closedWith: Error | undefined;
  channel.on('error', (err: Error) => {
    closedWith = err;
  });
  try {
    await operation(channel);
    return 'allowed';
  } catch (err) {
    // The channel's error carries the broker's code and text (basic.get rejects with less).
    const cause = (closedWith ?? err) as { code?: number; message?: string };
    return `${cause.code}: ${cause.message}`;
  } finally {
    await channel.close().catch(() => {});
  }
}

/** A connection logged in as a provisioned gateway's user, over amqps. */
async function connectAs(login: ProvisionJson): Promise<ChannelModel> {
  return amqp.connect(broker.amqpsUri(login.user, login.password ?? ''), {
    ca: [readFileSync(broker.files.ca.cert)],
    servername: 'localhost',
  });
}

let broker: TlsBroker;

describe('agentbridge broker provision: one least-privilege login per gateway', () => {
  const hosts: Host[] = [];

  /** Boots a gateway on `home`; federated as `login` when given, else single-host. */
  const boot = async (host: Host, login?: ProvisionJson) => {
    const env: NodeJS.ProcessEnv = {
      BRIDGE_HOME: host.home,
      BRIDGE_HOST_ID: host.hostId,
      BRIDGE_MCP_PORT: '0',
    };
    const { config } = loadConfig({ env });
    return startDaemon({
      config: login
        ? {
            ...config,
            broker: {
              ...config.broker,
              uris: [broker.amqpsUri(login.user, login.password ?? '')],
              tls: { ca: broker.files.ca.cert, servername: 'localhost' },
              heartbeatMs: 300,
            },
          }
        : config,
      logger: silentLogger(),
    });
  };

  const provision = async (host: Host, extra: string[] = []): Promise<ProvisionJson> => {
    const result = await runCli(
      ['broker', 'provision', host.hostId, '--apply', '--node', broker.nodeName, '--json', ...extra],
      { BRIDGE_HOME: host.home, BRIDGE_HOST_ID: host.hostId },
    );
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    return JSON.parse(result.stdout) as ProvisionJson;
  };

  beforeAll(async () => {
    // A bare node: the shared topology is the operator's to set up, and the test does it.
    broker = await startTlsBroker({ setup: false });
    // Two hosts, each with one registered entity (registered single-host: no broker needed),
    // keys, and each other's public key in their trust stores (invariant 6).
    for (const [prefix, name] of [
      ['prov-a', 'alice'],
      ['prov-b', 'bob'],
    ] as const) {
      const host: Host = {
        hostId: uniqueHostId(prefix),
        home: mkdtempSync(join(tmpdir(), 'bridge-prov-')),
        gid: '',
        token: '',
      };
      const daemon = await boot(host);
      const registration = await daemon.gateway.services.registrations.register({
        kind: 'main',
        name,
        groups: ['ops'],
      });
      await daemon.stop();
      host.gid = registration.gid;
      host.token = registration.token;
      hosts.push(host);
    }
    const [a, b] = hosts as [Host, Host];
    const keyA = initKeys(a.home).trustString;
    const keyB = initKeys(b.home).trustString;
    addTrust(a.home, b.hostId, keyB);
    addTrust(b.home, a.hostId, keyA);
  }, 120_000);

  afterAll(async () => {
    for (const host of hosts) await host.daemon?.stop().catch(() => {});
    for (const host of hosts) {
      if (host.login) await broker?.rabbitmqctl('delete_user', host.login.user).catch(() => {});
      rmSync(host.home, { recursive: true, force: true });
    }
    await broker?.stop();
  }, 60_000);

  it('a gateway login cannot make the shared topology: the gateway refuses to start until `agentbridge broker setup`', async () => {
    const [a, b] = hosts as [Host, Host];
    a.login = await provision(a);
    b.login = await provision(b);
    const refused = await boot(a, a.login).then(
      (daemon) => daemon.stop().then(() => 'started'),
      (err: unknown) => err,
    );
    expect(refused).toMatchObject({
      code: 'BROKER_NOT_SET_UP',
      message: expect.stringContaining('run `agentbridge broker setup`'),
    });
    // `agentbridge broker setup` with a gateway's login is refused by the broker, and says whose job it is.
    const configFile = join(a.home, 'setup-as-gateway.json');
    writeFileSync(
      configFile,
      JSON.stringify({ broker: { tls: { ca: broker.files.ca.cert, servername: 'localhost' } } }),
    );
    const asGateway = await runCli(['broker', 'setup', '--config', configFile], {
      BRIDGE_HOME: a.home,
      BRIDGE_BROKER_URI: broker.amqpsUri(a.login.user, a.login.password ?? ''),
    });
    expect(asGateway.code).toBe(1);
    expect(asGateway.stderr).toMatch(
      /BROKER_NOT_SET_UP: agentbridge broker setup failed declaring exchange bridge\.msg \(topic\): .*403.*ACCESS_REFUSED.*run setup with the operator \(administrator\) login/,
    );

    // The operator (here guest on the node's own loopback listener) sets it up once.
    const setup = await runCli(['broker', 'setup', '--json'], {
      BRIDGE_HOME: a.home,
      BRIDGE_BROKER_URI: broker.amqpUri,
    });
    expect(setup.stderr).toBe('');
    expect(setup.code).toBe(0);
    expect(JSON.parse(setup.stdout)).toMatchObject({
      exchanges: [
        { name: 'bridge.msg', type: 'topic' },
        { name: 'bridge.roster', type: 'topic' },
        { name: 'bridge.control.topic', type: 'topic' },
        { name: 'bridge.dlx', type: 'fanout' },
      ],
      queue: 'bridge.dlq',
      legacyControl: 'absent',
    });
    // An earlier release's direct bridge.control is reported, and removed when asked.
    const setupAgain = (extra: string[]) =>
      runCli(['broker', 'setup', '--json', ...extra], {
        BRIDGE_HOME: a.home,
        BRIDGE_BROKER_URI: broker.amqpUri,
      });
    const operator = await amqp.connect(broker.amqpUri);
    try {
      const channel = await operator.createChannel();
      await channel.assertExchange('bridge.control', 'direct', { durable: true });
      await channel.close();
      expect(JSON.parse((await setupAgain([])).stdout)).toMatchObject({ legacyControl: 'present' });
      expect(JSON.parse((await setupAgain(['--delete-legacy'])).stdout)).toMatchObject({
        legacyControl: 'deleted',
      });
      expect(await refusal(operator, (c) => c.checkExchange('bridge.control'))).toMatch(
        /^404: .*NOT_FOUND - no exchange 'bridge\.control' in vhost/,
      );
      expect(await refusal(operator, (c) => c.checkExchange('bridge.control.topic'))).toBe('allowed');
    } finally {
      await operator.close().catch(() => {});
    }

    // Its own login could not have declared it: no configure on shared names.
    const asA = await connectAs(a.login);
    try {
      expect(await refusal(asA, (c) => c.assertExchange('bridge.msg', 'topic', { durable: true }))).toMatch(
        /^403: .*ACCESS_REFUSED - access to exchange 'bridge\.msg' in vhost '\/' refused for user 'bridge-prov-a/,
      );
      expect(await refusal(asA, (c) => c.assertQueue('bridge.dlq', { durable: true }))).toMatch(
        /^403: .*ACCESS_REFUSED - access to queue 'bridge\.dlq' in vhost '\/' refused for user/,
      );
    } finally {
      await asA.close().catch(() => {});
    }
    expect(b.login.user).toBe(`bridge-${b.hostId}`);
  });

  it('applies a login per gateway; each works as itself and cannot consume the other inbox', async () => {
    const [a, b] = hosts as [Host, Host];
    if (!a.login || !b.login) throw new Error('runs after the setup test');
    expect(a.login).toMatchObject({ user: `bridge-${a.hostId}`, applied: true, userExisted: false });
    expect(a.login.entities).toEqual([{ gid: a.gid, name: 'alice' }]);
    expect(a.login.password).toMatch(/^[A-Za-z0-9_-]{32}$/);
    const users = await broker.rabbitmqctl('list_users', '-q', '--formatter', 'json');
    expect(JSON.parse(users).map((u: { user: string }) => u.user)).toEqual(
      expect.arrayContaining([a.login.user, b.login.user]),
    );

    // Both gateways start as their own users: they check the shared topology, declare their
    // queues, consume their inboxes, and see each other's presence.
    a.daemon = await boot(a, a.login);
    b.daemon = await boot(b, b.login);
    for (const host of [a, b]) {
      await waitFor(`${host.hostId} connected`, async () => {
        const broker = (await host.daemon?.gateway.services.status.status())?.broker as
          | { state: string }
          | undefined;
        return broker?.state === 'connected' ? true : undefined;
      });
    }
    await waitFor('alice sees bob in the roster', () =>
      a.daemon?.gateway.services.status.roster().some((e) => e.gid === b.gid) ? true : undefined,
    );
    await waitFor('bob sees alice in the roster', () =>
      b.daemon?.gateway.services.status.roster().some((e) => e.gid === a.gid) ? true : undefined,
    );

    // A publishes to B's inbox (and B's gateway, consuming as its own user, gets it).
    const alice = a.daemon.gateway.directory.authenticate(a.token);
    const bob = b.daemon.gateway.directory.authenticate(b.token);
    if (!alice || !bob) throw new Error('tokens did not authenticate');
    const sent = await a.daemon.gateway.services.sends.send(alice, {
      kind: 'SEND',
      to: `bob@${b.hostId}`,
      text: 'over amqps',
    });
    expect(sent.msgId).toBeTruthy();
    const received = await waitFor('bob receives it', async () => {
      const handover = await b.daemon?.gateway.services.drains.drain(bob);
      if (!handover || handover.envelopes.length === 0) {
        handover?.giveBack();
        return undefined;
      }
      handover.confirm();
      return handover.envelopes;
    });
    expect(received.map((e) => e.text)).toEqual(['over amqps']);

    // `agentbridge dlq` through a gateway whose login may not read bridge.dlq says whose it is.
    await expect(a.daemon.gateway.services.deadLetters.listDeadLetters(10)).rejects.toMatchObject({
      code: 'FORBIDDEN',
      message: expect.stringContaining(`agentbridge broker provision ${a.hostId} --read-dlq --apply`),
    });

    // A connection logged in as A's user is refused B's inbox by the broker itself.
    const asA = await connectAs(a.login);
    try {
      const consumeB = await refusal(asA, (c) => c.consume(inboxName(b.gid), () => {}));
      expect(consumeB).toMatch(
        /^403: .*ACCESS_REFUSED - access to queue 'agent\..*\.inbox' in vhost '\/' refused for user/,
      );
      expect(consumeB).toContain(inboxName(b.gid));
      // Nor can it get around that by binding its own inbox to B's gid (topic permissions),
      // read the shared DLQ, or declare someone else's queue.
      expect(await refusal(asA, (c) => c.bindQueue(inboxName(a.gid), 'bridge.msg', b.gid))).toMatch(
        /^403: .*ACCESS_REFUSED - access to topic '.*' in exchange 'bridge\.msg' in vhost '\/' refused for user/,
      );
      expect(await refusal(asA, (c) => c.get('bridge.dlq'))).toMatch(/^403: .*ACCESS_REFUSED/);
      expect(await refusal(asA, (c) => c.assertQueue(`control.${b.hostId}`, { durable: true }))).toMatch(
        /^403: .*ACCESS_REFUSED/,
      );
      // What it does need still works: binding its own inbox to its own gid.
      expect(await refusal(asA, (c) => c.bindQueue(inboxName(a.gid), 'bridge.msg', a.gid))).toBe('allowed');
    } finally {
      await asA.close().catch(() => {});
    }
  });

  it("a gateway login cannot read dead letters, bind to another host's control key, or delete shared exchanges", async () => {
    const [a, b] = hosts as [Host, Host];
    if (!a.login || !b.login) throw new Error('runs after the setup test');
    const asA = await connectAs(a.login);
    const ownControl = `control.${a.hostId}`;
    try {
      // Every host's dead letters: neither by binding one of its queues to the fanout
      // bridge.dlx (read on the exchange), nor by consuming bridge.dlq.
      expect
        .soft(await refusal(asA, (c) => c.bindQueue(ownControl, 'bridge.dlx', '')))
        .toMatch(
          /^403: .*ACCESS_REFUSED - access to exchange 'bridge\.dlx' in vhost '\/' refused for user 'bridge-prov-a/,
        );
      expect
        .soft(await refusal(asA, (c) => c.consume('bridge.dlq', () => {})))
        .toMatch(/^403: .*ACCESS_REFUSED - access to queue 'bridge\.dlq' in vhost '\/' refused for user/);
      // Another host's SPAWNs and receipts: binding its own control queue to B's key is
      // refused by the topic permission on bridge.control.topic.
      expect
        .soft(
          await refusal(asA, (c) => c.bindQueue(ownControl, 'bridge.control.topic', `control.${b.hostId}`)),
        )
        .toMatch(
          /^403: .*ACCESS_REFUSED - access to topic 'control\.prov-b.*' in exchange 'bridge\.control\.topic' in vhost '\/' refused for user/,
        );
      expect
        .soft(await refusal(asA, (c) => c.bindQueue(ownControl, 'bridge.control.topic', 'control.#')))
        .toMatch(
          /^403: .*ACCESS_REFUSED - access to topic 'control\.#' in exchange 'bridge\.control\.topic'/,
        );
      // The shared exchanges and the DLQ stay: no configure, so no delete.
      for (const exchange of ['bridge.msg', 'bridge.roster', 'bridge.control.topic', 'bridge.dlx']) {
        expect
          .soft(await refusal(asA, (c) => c.deleteExchange(exchange)), exchange)
          .toMatch(
            new RegExp(
              `^403: .*ACCESS_REFUSED - access to exchange '${exchange.replace(/\./g, '\\.')}' in vhost`,
            ),
          );
      }
      expect
        .soft(await refusal(asA, (c) => c.deleteQueue('bridge.dlq')))
        .toMatch(/^403: .*ACCESS_REFUSED - access to queue 'bridge\.dlq' in vhost '\/' refused for user/);
      // What it needs still works: its own control key, and dead-lettering with a reason.
      expect(await refusal(asA, (c) => c.bindQueue(ownControl, 'bridge.control.topic', ownControl))).toBe(
        'allowed',
      );
      const confirm = await asA.createConfirmChannel();
      await new Promise<void>((resolve, reject) =>
        confirm.publish('bridge.dlx', 'x', Buffer.from('{}'), { messageId: `dl-${a.hostId}` }, (err) =>
          err ? reject(err) : resolve(),
        ),
      );
      await confirm.close();
      // The operator (not the gateway) reads it.
      const operator = await amqp.connect(broker.amqpUri);
      try {
        const channel = await operator.createChannel();
        const found = await waitFor('the dead letter in bridge.dlq', async () => {
          for (;;) {
            const message = await channel.get('bridge.dlq', { noAck: false });
            if (message === false) return undefined;
            if (message.properties.messageId === `dl-${a.hostId}`) {
              channel.ack(message);
              return true;
            }
          }
        });
        expect(found).toBe(true);
      } finally {
        await operator.close().catch(() => {});
      }
    } finally {
      await asA.close().catch(() => {});
    }
  });

  it('an entity registered later is refused until provision is re-run; the password stays', async () => {
    const [a] = hosts as [Host, Host];
    if (!a.daemon || !a.login) throw new Error('runs after the first test');
    // The running gateway's login does not cover the new inbox: the broker refuses it, and
    // the error says what to do.
    await expect(
      a.daemon.gateway.services.registrations.register({ kind: 'main', name: 'carol' }),
    ).rejects.toMatchObject({
      code: 'CONSUMER_REFUSED',
      message: expect.stringContaining(`agentbridge broker provision ${a.hostId} --apply`),
    });
    await a.daemon.stop();
    a.daemon = undefined;

    const again = await provision(a);
    const carol = again.entities.find((e) => e.name === 'carol');
    expect(carol).toBeDefined();
    expect(again).toMatchObject({ user: a.login.user, userExisted: true, password: null });
    expect(again.permissions.read).toContain(inboxName(carol?.gid ?? '').replace(/\./g, '\\.'));
    expect(again.commands.some((c) => /add_user|change_password/.test(c))).toBe(false);

    // Restarted with the same (kept) password, it now consumes both inboxes.
    a.daemon = await boot(a, a.login);
    await waitFor('reconnected with both inboxes', async () => {
      const status = (await a.daemon?.gateway.services.status.status())?.broker as
        | { state: string; inboxes: Record<string, number | undefined> }
        | undefined;
      return status?.state === 'connected' && status.inboxes.carol === 0 ? true : undefined;
    });
  });
});
