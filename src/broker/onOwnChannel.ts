import type { Channel, ChannelModel } from 'amqplib';
import type { Logger } from '../log/logger.js';
import { closeQuietly } from './closeQuietly.js';

/**
 * Runs `fn` on a fresh channel of `model`, closed afterwards (which puts back whatever `fn` got
 * and did not ack), so a broker refusal closes that channel alone. The broker's reason (403,
 * 404, 405, 406, with its reply code) comes as the channel's error, and some failed operations
 * (a basic.get) reject with less: the channel's error is what the caller gets when there is one.
 */
export async function onOwnChannel<T>(
  model: ChannelModel,
  fn: (channel: Channel) => Promise<T>,
  logger: Logger,
  what = 'a short-lived broker channel',
): Promise<T> {
  const channel = await model.createChannel();
  let closedWith: Error | undefined;
  channel.on('error', (err: Error) => {
    closedWith = err;
  });
  try {
    return await fn(channel);
  } catch (err) {
    throw closedWith ?? err;
  } finally {
    await closeQuietly(channel, logger, what);
  }
}
