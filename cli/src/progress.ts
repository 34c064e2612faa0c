/**
 * A progress bar on stderr for large transfers, only when stderr is a terminal (a pipe or a log
 * file gets nothing), redrawn at most every 100 ms.
 */
const MIN_BYTES = 8 * 1024 * 1024;
const WIDTH = 24;

export interface Progress {
  add(bytes: number): void;
  done(): void;
}

export function progress(total: number, label: string): Progress {
  if (!process.stderr.isTTY || total < MIN_BYTES)
    return { add: () => undefined, done: () => undefined };
  const started = Date.now();
  let sent = 0;
  let drawn = 0;
  const draw = () => {
    drawn = Date.now();
    const frac = Math.min(1, sent / total);
    const filled = Math.round(frac * WIDTH);
    const secs = Math.max(0.001, (drawn - started) / 1000);
    process.stderr.write(
      `\r${label} [${"#".repeat(filled)}${"-".repeat(WIDTH - filled)}] ${(frac * 100).toFixed(0).padStart(3)}% ` +
        `${mib(sent)}/${mib(total)} MiB ${mib(sent / secs)} MiB/s\x1b[K`,
    );
  };
  return {
    add(bytes) {
      sent += bytes;
      if (Date.now() - drawn >= 100) draw();
    },
    done() {
      draw();
      process.stderr.write("\n");
    },
  };
}

function mib(bytes: number): string {
  return (bytes / 1024 / 1024).toFixed(1);
}
