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
      action<[string, string[]], Options>(async ([id, argv], o) =>
        withSandbox(o, id, async (sandbox) => {
          const out = process.stdout;
          const size = () => ({ cols: out.columns || 80, rows: out.rows || 24 });
          const handle = await sandbox.pty.create({
            ...size(),
            onData: (data) => void out.write(data),
            ...(argv.length ? { command: commandText(argv) } : {}),
            ...(o.cwd ? { cwd: o.cwd } : {}),
            ...(o.env ? { envs: o.env } : {}),
          });
          const { exitCode } = await attach(handle, size);
          if (o.json) printJson({ exitCode });
          return processExitCode(exitCode);
        }),
      ),
    );
}

async function attach(
  handle: PtyHandle,
  size: () => { cols: number; rows: number },
): Promise<{ exitCode: number }> {
  const stdin = process.stdin;
  const raw = stdin.isTTY === true;
  if (raw) stdin.setRawMode(true);
  // Keystrokes in order: each waits for the one before it.
  let queue = Promise.resolve();
  const onInput = (chunk: Buffer) => {
    queue = queue.then(() => handle.sendInput(chunk)).catch(() => undefined);
  };
  const onResize = () => void handle.resize(size()).catch(() => undefined);
  stdin.on("data", onInput);
  process.on("SIGWINCH", onResize);
  try {
    return await handle.wait();
  } finally {
    stdin.off("data", onInput);
    process.off("SIGWINCH", onResize);
    if (raw) stdin.setRawMode(false);
    stdin.pause();
    await handle.disconnect().catch(() => undefined);
  }
}
