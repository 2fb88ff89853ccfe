/** A progress bar on a terminal (stderr), redrawn at most every 100 ms; silent when not a TTY. */
export interface ProgressBar {
  update(done: number, total: number): void;
  done(): void;
}

export function createProgressBar(label: string, stream: NodeJS.WriteStream, force = false): ProgressBar {
  const enabled = force || stream.isTTY === true;
  const width = 30;
  let last = 0;
  let drawn = false;
  const draw = (done: number, total: number): void => {
    const fraction = total > 0 ? Math.min(1, done / total) : 1;
    const filled = Math.round(fraction * width);
    const bar = `${'#'.repeat(filled)}${'-'.repeat(width - filled)}`;
    const percent = `${Math.round(fraction * 100)}`.padStart(3);
    stream.write(`\r${label} [${bar}] ${percent}% ${done}/${total} events`);
    drawn = true;
  };
  return {
    update(done, total) {
      if (!enabled) return;
      const now = Date.now();
      if (now - last < 100 && done < total) return;
      last = now;
      draw(done, total);
    },
    done() {
      if (enabled && drawn) stream.write('\n');
    },
  };
}
