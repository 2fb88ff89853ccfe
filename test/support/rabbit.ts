import { execFile } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import amqp from 'amqplib';
import { brokerUri } from './federation.js';

function rabbitmqctl(...args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('rabbitmqctl', args, { timeout: 120_000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`rabbitmqctl ${args.join(' ')} failed: ${stderr || err.message}`));
      else resolve(stdout);
    });
  });
}

/** Stops the broker's application (connections drop, the node stays up). */
export async function stopBroker(): Promise<void> {
  await rabbitmqctl('stop_app');
}

/** Starts it again and waits until it takes connections. Safe to call when it is running. */
export async function startBroker(): Promise<void> {
  await rabbitmqctl('start_app');
  await rabbitmqctl('await_startup');
  await sleep(200);
}

/**
 * Makes the broker close, with 406 PRECONDITION_FAILED, the channel of every consumer of
 * `queues`, as it closes one whose delivery outlived `consumer_timeout`: the channel process is
 * handed an ack for a delivery tag it never sent. Returns how many channels it closed.
 */
export async function closeConsumerChannels(queues: readonly string[]): Promise<number> {
  const names = queues.map((q) => `<<"${q}">>`).join(', ');
  const out = await rabbitmqctl(
    'eval',
    `Names = [${names}], ` +
      'Pids = lists:usort([proplists:get_value(channel_pid, C) || C <- rabbit_amqqueue:consumers_all(<<"/">>), lists:member(element(4, proplists:get_value(queue_name, C)), Names)]), ' +
      "[rabbit_channel:do(P, {'basic.ack', 16#7fffffff, false}) || P <- Pids], length(Pids).",
  );
  return Number(out.trim());
}

/** Up to this many queues are asked about one by one over AMQP; more, in one listing. */
const askedOneByOne = 20;

/**
 * Consumers of each queue, as the broker counts them (absent: no such queue). A few queues are
 * asked about over AMQP (a passive declare each): tests poll this, and a `rabbitmqctl` per poll
 * would boot an Erlang VM each time and list every queue on the shared broker. Thousands of
 * queues, and those a passive declare cannot see (none such, or exclusive to another
 * connection: 404, 405), are read from one `rabbitmqctl list_queues`.
 */
export async function consumerCounts(queues: readonly string[]): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  const unseen = queues.length > askedOneByOne ? [...queues] : await askEach(queues, counts);
  if (unseen.length === 0) return counts;
  const out = await rabbitmqctl('list_queues', '--quiet', '--no-table-headers', 'name', 'consumers');
  const wanted = new Set(unseen);
  for (const line of out.split('\n')) {
    const [name, consumers] = line.trim().split(/\s+/);
    if (name && wanted.has(name)) counts.set(name, Number(consumers));
  }
  return counts;
}

/** Puts each queue's consumer count in `counts` by a passive declare; returns those it could not. */
async function askEach(queues: readonly string[], counts: Map<string, number>): Promise<string[]> {
  const unseen: string[] = [];
  const connection = await amqp.connect(brokerUri);
  const open = async () => {
    const channel = await connection.createChannel();
    channel.on('error', () => {});
    return channel;
  };
  try {
    let channel = await open();
    for (const queue of queues) {
      try {
        counts.set(queue, (await channel.checkQueue(queue)).consumerCount);
      } catch {
        // Refused: the broker closed the channel.
        unseen.push(queue);
        channel = await open();
      }
    }
  } finally {
    await connection.close().catch(() => undefined);
  }
  return unseen;
}

/**
 * Sets one of RabbitMQ's broker-wide settings (`rabbit`'s application env, in ms) for channels
 * opened from now on (a running channel's timers read it as they rearm); returns the value it
 * had, for `restoreRabbitSetting` in a `finally`: the broker is shared.
 */
export async function setRabbitSetting(key: RabbitSetting, ms: number): Promise<string> {
  const before = (await rabbitmqctl('eval', `application:get_env(rabbit, ${key}).`)).trim();
  await rabbitmqctl('eval', `application:set_env(rabbit, ${key}, ${ms}).`);
  return before;
}

/** Puts back what `setRabbitSetting` returned (`{ok,N}` or `undefined`). */
export async function restoreRabbitSetting(key: RabbitSetting, before: string): Promise<void> {
  const value = /^\{ok,(\d+)\}$/.exec(before)?.[1];
  if (value) await rabbitmqctl('eval', `application:set_env(rabbit, ${key}, ${value}).`);
  else await rabbitmqctl('eval', `application:unset_env(rabbit, ${key}).`);
}

/**
 * The settings tests change: `consumer_timeout` (default 30 minutes) and how often a channel
 * looks at its consumers' deliveries against it, `channel_tick_interval` (default 60 s).
 */
export type RabbitSetting = 'consumer_timeout' | 'channel_tick_interval';

/**
 * A vhost of the test's own on the shared broker, the test login (guest) allowed everything in
 * it: a second trust circle beside the default vhost's. Remove it with `deleteVhost` in
 * `finally`/`afterAll`: deleting a vhost deletes everything in it.
 */
export async function addVhost(name: string): Promise<void> {
  await rabbitmqctl('add_vhost', name);
  await rabbitmqctl('set_permissions', '-p', name, 'guest', '.*', '.*', '.*');
}

export async function deleteVhost(name: string): Promise<void> {
  await rabbitmqctl('delete_vhost', name).catch(() => {});
}
