import { type ChildProcess, spawn } from 'node:child_process';
import { cpus } from 'node:os';

/**
 * Keeps every core busy (one spinning process per core, plus `extra`) until stopped: the busy
 * machine on which typed-but-unsubmitted races show.
 */
export function startCpuLoad(extra = 1): { stop(): void } {
  const children: ChildProcess[] = [];
  for (let i = 0; i < cpus().length + extra; i++) {
    children.push(spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }));
  }
  return {
    stop() {
      for (const child of children) child.kill('SIGKILL');
    },
  };
}
