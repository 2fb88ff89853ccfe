import { SimulatedClock } from 'xstate';
import { loadConfig } from '../../src/config/loadConfig.js';
import type { Config } from '../../src/config/schema.js';
import { Gateway, type GatewayOptions } from '../../src/gateway/Gateway.js';
import { createLogger } from '../../src/log/logger.js';
import { openStore, type Store } from '../../src/store/openStore.js';

export interface MemoryGatewayOptions {
  /** The pane port: the injector for each registered pane. */
  createInjector: GatewayOptions['createInjector'];
  /** Changes to the default config of host `h1`. */
  config?: (config: Config) => Config;
  /** Where spawned agents start (a fake port too); none, the daemon's tmux and herdr ones. */
  launchers?: GatewayOptions['launchers'];
}

/**
 * The in-memory tier's gateway: the real send and delivery flows, composed as the daemon
 * composes them, over an in-memory event log and a simulated clock, with the pane as the
 * test's fake port. No file, no thread, no process, no broker:
 * a case is given what is recorded (by the commands it runs, kept across a stop and a boot), is
 * told a command or what a port answers, and reads the new events and the effects asked of the
 * ports. What needs real SQLite files, tmux, RabbitMQ or processes stays in the int and e2e tiers.
 */
export class MemoryGateway {
  readonly clock = new SimulatedClock();
  /** The event log, kept across `stop` and `boot` (what the next boot rebuilds from). */
  readonly store: Store = openStore({ file: ':memory:' });
  /** Every log line of level warn and above, parsed. */
  readonly logLines: Array<Record<string, unknown>> = [];
  private current: Gateway | undefined;

  constructor(private readonly options: MemoryGatewayOptions) {
    this.clock.set(1_700_000_000_000);
  }

  /** The running gateway. */
  get gateway(): Gateway {
    if (!this.current) throw new Error('the memory gateway is not booted');
    return this.current;
  }

  /** Starts a gateway on the log (again, after `stop`: it rebuilds what the log holds). */
  async boot(): Promise<Gateway> {
    const { config } = loadConfig({
      env: { BRIDGE_HOME: '/nonexistent/bridge-memory', BRIDGE_HOST_ID: 'h1' },
    });
    const gateway = new Gateway({
      config: this.options.config ? this.options.config(config) : config,
      logger: createLogger({
        level: 'warn',
        destination: { write: (line: string) => void this.logLines.push(JSON.parse(line)) },
      }),
      clock: this.clock,
      createInjector: this.options.createInjector,
      eventLog: this.store,
      ...(this.options.launchers ? { launchers: this.options.launchers } : {}),
    });
    await gateway.start();
    this.current = gateway;
    return gateway;
  }

  /**
   * Lets effects run and their writes commit: rounds of commit and a turn of the event loop,
   * enough for a few messages to go through every step of their delivery one after another.
   */
  async settle(): Promise<void> {
    for (let i = 0; i < 20; i++) {
      await this.gateway.store.batch.flush();
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /** Moves the clock on by `ms` and lets what that fires run. */
  async advance(ms: number): Promise<void> {
    this.clock.increment(ms);
    await this.settle();
  }

  /** Rows of a query on the log. */
  events(sql: string): unknown[] {
    return this.store.db.prepare(sql).all();
  }

  /** The states one delivery passed through, in order. */
  deliveryTrail(msgId: string): string[] {
    return (
      this.events(
        `SELECT to_state FROM event_log WHERE msg_id = '${msgId}' AND actor_kind = 'delivery' ORDER BY hlc`,
      ) as Array<{ to_state: string }>
    ).map((row) => row.to_state);
  }

  /** Stops the gateway; the log stays for the next boot. */
  async stop(): Promise<void> {
    await this.current?.stop();
    this.current = undefined;
  }

  async close(): Promise<void> {
    await this.stop();
    await this.store.close();
  }
}
