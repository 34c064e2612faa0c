/**
 * `sandpit shell <id>`: a terminal in the sandbox. This terminal goes raw (keys, Ctrl-C included,
 * go to the sandbox's shell), the sandbox's terminal follows this one's size, and the command
 * exits with the shell's status.
 */
import type { Command } from "commander";
import type { PtyHandle } from "@sandpit/sdk";
import { action } from "../command-kit.ts";
import { processExitCode } from "../exit.ts";
import { printJson } from "../output.ts";
import { collectPair, commandText } from "../parse.ts";
import { withSandbox } from "../provider.ts";

interface Options {
  cwd?: string;
  env?: Record<string, string>;
}

export function register(program: Command): void {
  program
    .command("shell")
    .description("open an interactive shell (a terminal) in a sandbox")
    .argument("<id>", "sandbox ID")
    .argument("[command...]", "run this instead of the login shell (after --)")
    .option("--cwd <dir>", "working directory")
    .option("-e, --env <KEY=VALUE>", "an environment variable (repeatable)", collectPair)
    .action(
      action<[string, string[]], Options>(async ([id, argv], o) => {
        // Raw from the start: keys typed while the sandbox is reached (Ctrl-C included) are
        // kept for its shell instead of being echoed or killing this process.
        const keys = new Keyboard();
        try {
          return await withSandbox(o, id, async (sandbox) => {
            const out = process.stdout;
            const size = () => ({ cols: out.columns || 80, rows: out.rows || 24 });
            const handle = await sandbox.pty.create({
              ...size(),
              onData: (data) => void out.write(data),
              ...(argv.length ? { command: commandText(argv) } : {}),
              ...(o.cwd ? { cwd: o.cwd } : {}),
              ...(o.env ? { envs: o.env } : {}),
            });
            const onResize = () => void handle.resize(size()).catch(() => undefined);
            process.on("SIGWINCH", onResize);
            try {
              keys.attach(handle);
              const { exitCode } = await handle.wait();
              if (o.json) printJson({ exitCode });
              return processExitCode(exitCode);
            } finally {
              process.off("SIGWINCH", onResize);
              await handle.disconnect().catch(() => undefined);
            }
          });
        } finally {
          keys.restore();
        }
      }),
    );
}

/** This terminal's keys: raw mode, buffered until a terminal handle takes them, in order. */
class Keyboard {
  private readonly raw = process.stdin.isTTY === true;
  private pending: Buffer[] = [];
  private queue = Promise.resolve();
  private handle: PtyHandle | undefined;
  private readonly onInput = (chunk: Buffer) => {
    const handle = this.handle;
    if (!handle) return void this.pending.push(chunk);
    this.queue = this.queue.then(() => handle.sendInput(chunk)).catch(() => undefined);
  };

  constructor() {
    if (this.raw) process.stdin.setRawMode(true);
    process.stdin.on("data", this.onInput);
  }

  attach(handle: PtyHandle): void {
    this.handle = handle;
    for (const chunk of this.pending.splice(0)) this.onInput(chunk);
  }

  restore(): void {
    process.stdin.off("data", this.onInput);
    if (this.raw) process.stdin.setRawMode(false);
    process.stdin.pause();
  }
}
