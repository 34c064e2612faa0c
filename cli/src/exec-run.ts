/**
 * Running one command in the foreground for `sandpit exec`, whichever way the sandbox was
 * reached (through its provider, or straight from an exec ticket: ./fast-exec.ts): output
 * streamed live (or collected into the `--json` result), Ctrl-C, `-i`, and the exit code.
 */
import type { SandboxCommandOptions, SandboxExecutionResult, SandboxInstance } from "@sandpit/sdk";
import { EXIT, processExitCode } from "./exit.ts";
import { printJson } from "./output.ts";

export interface ForegroundOptions {
  /** cwd, envs, timeoutMs as given on the command line. */
  base: SandboxCommandOptions;
  json?: boolean | undefined;
  interactive?: boolean | undefined;
}

/** Runs `command`, prints what `exec` prints, and returns the exit code. Failures are thrown. */
export async function runForeground(
  sandbox: SandboxInstance,
  command: string,
  o: ForegroundOptions,
): Promise<number> {
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
      ? runWithStdin(sandbox, command, { ...o.base, ...stream }, signal)
      : sandbox.commands.run(command, { ...o.base, ...stream, signal }),
  );
  if (r === "interrupted") return EXIT.INTERRUPTED;
  if (o.json) printJson({ ...r, durationMs: Date.now() - started });
  return processExitCode(r.exitCode);
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
