/**
 * `sandpit exec <id> -- cmd...`: runs a command in the sandbox with its output streamed live, and
 * exits with the command's exit code. `-i` forwards this process's stdin; `-d` starts it in the
 * background and prints its pid (for `logs`, `ps` and `kill`).
 */
import type { Command } from "commander";
import type { SandboxCommandOptions, SandboxExecutionResult, SandboxInstance } from "@sandpit/sdk";
import { action } from "../command-kit.ts";
import { EXIT, processExitCode, usageError } from "../exit.ts";
import { printJson, printLine } from "../output.ts";
import { collectPair, commandText, parseDuration } from "../parse.ts";
import { withSandbox } from "../provider.ts";

interface Options {
  interactive?: boolean;
  detach?: boolean;
  cwd?: string;
  env?: Record<string, string>;
  timeout?: number;
  tag?: string;
}

export function register(program: Command): void {
  program
    .command("exec")
    .description("run a command in a sandbox and exit with its exit code")
    .argument("<id>", "sandbox ID")
    .argument("<command...>", "the command (after --); one argument is run as shell text")
    .option("-i, --interactive", "forward stdin to the command")
    .option("-d, --detach", "start it in the background and print its pid")
    .option("--cwd <dir>", "working directory")
    .option("-e, --env <KEY=VALUE>", "an environment variable (repeatable)", collectPair)
    .option(
      "--timeout <duration>",
      "kill it (with its process group) after this long",
      parseDuration,
    )
    .option("--tag <tag>", "with -d: a label shown by `sandpit ps`")
    .addHelpText(
      "after",
      "\nExamples:\n  sandpit exec ID -- ls -la\n  sandpit exec ID -- 'pip list | wc -l'\n  echo hi | sandpit exec -i ID -- cat",
    )
    .action(
      action<[string, string[]], Options>(async ([id, argv], o) => {
        if (o.interactive && o.detach) throw usageError("-i and -d cannot be combined");
        if (o.tag && !o.detach) throw usageError("--tag needs -d");
        const command = commandText(argv);
        const base: SandboxCommandOptions = {
          ...(o.cwd ? { cwd: o.cwd } : {}),
          ...(o.env ? { envs: o.env } : {}),
          ...(o.timeout ? { timeoutMs: o.timeout } : {}),
        };
        return withSandbox(o, id, async (sandbox) => {
          if (o.detach) {
            const h = await sandbox.commands.run(command, {
              ...base,
              ...(o.tag ? { tag: o.tag } : {}),
              background: true,
            });
            await h.disconnect();
            if (o.json) printJson({ pid: h.pid });
            else printLine(String(h.pid));
            return EXIT.OK;
          }
          const started = Date.now();
          // With --json, output is collected into the result object instead of streamed.
          const stream: SandboxCommandOptions = o.json
            ? {}
            : {
                onStdout: (d) => void process.stdout.write(d),
                onStderr: (d) => void process.stderr.write(d),
              };
          const r = await interruptible((signal) =>
            o.interactive
              ? runWithStdin(sandbox, command, { ...base, ...stream }, signal)
              : sandbox.commands.run(command, { ...base, ...stream, signal }),
          );
          if (r === "interrupted") return EXIT.INTERRUPTED;
          if (o.json) printJson({ ...r, durationMs: Date.now() - started });
          return processExitCode(r.exitCode);
        });
      }),
    );
}

/** Ctrl-C aborts the run (the sandbox kills the command's process group) and exits 130. */
async function interruptible<T>(
  run: (signal: AbortSignal) => Promise<T>,
): Promise<T | "interrupted"> {
  const abort = new AbortController();
  const onSigint = () => abort.abort();
  process.once("SIGINT", onSigint);
  try {
    return await run(abort.signal);
  } catch (err) {
    if (abort.signal.aborted) return "interrupted";
    throw err;
  } finally {
    process.off("SIGINT", onSigint);
  }
}

/**
 * A foreground run takes its stdin as one string, which cannot follow a pipe or a person typing,
 * so `-i` starts the command in the background and forwards stdin chunk by chunk as it arrives,
 * closing the command's stdin at EOF.
 */
async function runWithStdin(
  sandbox: SandboxInstance,
  command: string,
  options: SandboxCommandOptions,
  signal: AbortSignal,
): Promise<SandboxExecutionResult> {
  const handle = await sandbox.commands.run(command, { ...options, background: true });
  const kill = () => void handle.kill("SIGKILL").catch(() => undefined);
  signal.addEventListener("abort", kill, { once: true });
  let exited = false;
  const forward = (async () => {
    for await (const chunk of process.stdin) {
      if (exited) break;
      await handle.sendStdin(chunk as Buffer);
    }
    if (!exited) await handle.closeStdin();
  })().catch((err: unknown) => {
    // The command may exit (and its stdin go away) before our input ends; that is not an error.
    if (!exited) throw err;
  });
  let result: SandboxExecutionResult;
  try {
    result = await Promise.race([handle.wait(), forward.then(() => handle.wait())]);
  } finally {
    exited = true;
    signal.removeEventListener("abort", kill);
    process.stdin.destroy();
  }
  // Killed because of Ctrl-C: the caller reports the interruption, not the kill's exit code.
  if (signal.aborted) throw signal.reason;
  return result;
}
