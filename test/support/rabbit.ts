import { execFile } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';

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
