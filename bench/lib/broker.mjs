import { readdirSync, readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import amqp from 'amqplib';
import { childCpuMs } from './processes.mjs';

/**
 * Helpers for the shared RabbitMQ the cross-host scenarios use. Other tests use the same
 * broker: everything the benchmark declares has a unique name and is deleted afterwards.
 */

const lockedAttempts = 20;
const lockedRetryMs = 500;

/**
 * Deletes queues, whether or not they (still) exist (RabbitMQ answers delete-ok for a missing
 * one): `lanes` channels on one connection work through the list side by side (thousands of
 * inboxes go in seconds, not one round trip after another); a failure closes its channel, so the
 * lane opens another. One still locked (405) is tried again for up to 10 s. Throws, naming them,
 * if any could not be deleted.
 */
export async function deleteQueues(uri, names, { lanes = 16 } = {}) {
  if (names.length === 0) return;
  const connection = await amqp.connect(uri);
  connection.on('error', () => {});
  const failed = [];
  const queue = [...names];
  const openChannel = async () => {
    const channel = await connection.createChannel();
    channel.on('error', () => {});
    return channel;
  };
  const lane = async () => {
    let channel = await openChannel();
    for (let name = queue.shift(); name !== undefined; name = queue.shift()) {
      for (let attempt = 1; ; attempt++) {
        try {
          await channel.deleteQueue(name);
          break;
        } catch (err) {
          channel = await openChannel();
          // An exclusive queue (a lock) of a connection the broker is still closing: it goes
          // with that connection, and a delete once it has answers delete-ok.
          if (err.code === 405 && attempt < lockedAttempts) {
            await sleep(lockedRetryMs);
            continue;
          }
          failed.push(`${name} (${err.message})`);
          break;
        }
      }
    }
    await channel.close().catch(() => {});
  };
  try {
    await Promise.all(Array.from({ length: Math.min(lanes, names.length) }, lane));
  } finally {
    await connection.close().catch(() => {});
  }
  if (failed.length > 0) {
    const shown = failed.slice(0, 20).join(', ');
    throw new Error(
      `could not delete ${failed.length} broker queues: ${shown}${failed.length > 20 ? ', …' : ''}`,
    );
  }
}

/** Messages ready in each queue (undefined for a queue that does not exist). */
export async function queueDepths(uri, names) {
  const connection = await amqp.connect(uri);
  const depths = {};
  try {
    for (const name of names) {
      const channel = await connection.createChannel();
      channel.on('error', () => {});
      depths[name] = await channel.checkQueue(name).then(
        (info) => info.messageCount,
        () => undefined,
      );
      await channel.close().catch(() => {});
    }
  } finally {
    await connection.close().catch(() => {});
  }
  return depths;
}

/**
 * A reader of the broker's cumulative CPU time (ms), when it runs on this machine: the one
 * RabbitMQ server process (`beam.smp … -s rabbit boot`) in /proc, for a loopback URI. Undefined
 * otherwise. Other users of the shared broker show up in it too: read it as an upper bound.
 */
export function localBrokerCpuMs(uri) {
  if (!/@(127\.0\.0\.1|localhost|\[::1\])(:|\/|$)/.test(uri)) return undefined;
  const beams = readdirSync('/proc').filter((entry) => {
    if (!/^\d+$/.test(entry)) return false;
    try {
      const args = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      return args[0].endsWith('beam.smp') && args.some((arg, i) => arg === '-s' && args[i + 1] === 'rabbit');
    } catch {
      return false;
    }
  });
  if (beams.length !== 1) return undefined;
  const pid = Number(beams[0]);
  return () => childCpuMs(pid);
}
