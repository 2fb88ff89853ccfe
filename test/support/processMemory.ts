import { readFileSync } from 'node:fs';

/** A process's resident set, from /proc (what an OOM killer or `top` sees), in MB. */
export function rssMb(pid: number): number {
  const line = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!line?.[1]) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(line[1]) / 1024;
}
