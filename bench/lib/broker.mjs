import { readdirSync, readFileSync } from 'node:fs';
import amqp from 'amqplib';
import { childCpuMs } from './processes.mjs';

/**
 * Helpers for the shared RabbitMQ the cross-host scenarios use. Other tests use the same
 * broker: everything the benchmark declares has a unique name and is deleted afterwards.
 */

/**
 * Deletes queues, whether or not they (still) exist (RabbitMQ answers delete-ok for a missing
 * one); one channel each, as a failure closes it. Throws, naming them, if any could not be deleted.
 */
export async function deleteQueues(uri, names) {
  const connection = await amqp.connect(uri);
  const failed = [];
  try {
    for (const name of names) {
      const channel = await connection.createChannel();
      channel.on('error', () => {});
      await channel.deleteQueue(name).catch((err) => failed.push(`${name} (${err.message})`));
      await channel.close().catch(() => {});
    }
  } finally {
    await connection.close().catch(() => {});
  }
  if (failed.length > 0) throw new Error(`could not delete broker queues: ${failed.join(', ')}`);
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
