/** `ps`, `logs` and `kill`: background processes (started with `exec -d`) and terminals. */
import { Option, type Command } from "commander";
import type { CommandHandle, ProcessSignal } from "@sandpit/sdk";
import { action } from "../command-kit.ts";
import { EXIT, processExitCode } from "../exit.ts";
import { note, printJson, printTable } from "../output.ts";
import { parseOffset, parsePid } from "../parse.ts";
import { withSandbox } from "../provider.ts";

/**
 * Without -f, `logs` prints the output kept so far and stops once the replay has gone quiet for
 * this long: sandboxd's stream has no end-of-replay marker for a process that is still running.
 */
const REPLAY_QUIET_MS = 300;
/**
 * ...or, for a process that never goes quiet that long (a loop printing every 200 ms), once
 * this long has passed since connecting: the replay itself arrives in one burst well within it.
 */
const REPLAY_MAX_MS = 1_000;

const SIGNALS = ["SIGTERM", "SIGKILL", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"];

export function register(program: Command): void {
  program
    .command("ps")
    .description("list a sandbox's background processes and terminals")
    .argument("<id>", "sandbox ID")
    .action(
      action<[string], object>(async ([id], o) => {
        const list = await withSandbox(o, id, (s) => s.commands.list());
        if (o.json) return printJson(list);
        printTable(
          ["PID", "STATUS", "TAG", "STARTED", "COMMAND"],
          list.map((p) => [
            String(p.pid),
            p.exitCode === undefined ? (p.pty ? "terminal" : "running") : `exited(${p.exitCode})`,
            p.tag ?? "",
            new Date(p.startedAt).toISOString(),
            p.command,
          ]),
        );
      }),
    );

  program
    .command("logs")
    .description("print a background process's output (stdout and stderr)")
    .argument("<id>", "sandbox ID")
    .argument("<pid>", "process ID (from `exec -d` or `ps`)", parsePid)
    .option("-f, --follow", "keep printing until the process exits; exit with its exit code")
    .option("--offset <bytes>", "start at this byte offset of its output", parseOffset)
    .action(
      action<[string, number], { follow?: boolean; offset?: number }>(async ([id, pid], o) =>
        withSandbox(o, id, async (sandbox) => {
          let quiet: ReturnType<typeof setTimeout> | undefined;
          let settle: () => void = () => undefined;
          const settled = new Promise<void>((r) => (settle = r));
          const arm = () => {
            if (o.follow) return;
            clearTimeout(quiet);
            quiet = setTimeout(settle, REPLAY_QUIET_MS);
          };
          const write = (to: NodeJS.WriteStream) => (d: string) => {
            if (!o.json) to.write(d);
            arm();
          };
          const handle: CommandHandle = await sandbox.commands.connect(pid, {
            ...(o.offset !== undefined ? { offset: o.offset } : {}),
            onStdout: write(process.stdout),
            onStderr: write(process.stderr),
          });
          arm();
          const cap = o.follow ? undefined : setTimeout(settle, REPLAY_MAX_MS);
          const exited = handle.wait().then((r) => r.exitCode);
          const first = await Promise.race([exited, settled.then(() => undefined)]);
          clearTimeout(quiet);
          clearTimeout(cap);
          await handle.disconnect();
          if (o.json)
            printJson({
              pid,
              stdout: handle.stdout,
              stderr: handle.stderr,
              droppedBytes: handle.droppedBytes,
              ...(first === undefined ? {} : { exitCode: first }),
            });
          return o.follow && first !== undefined ? processExitCode(first) : EXIT.OK;
        }),
      ),
    );

  program
    .command("kill")
    .description("signal a background process's whole process group")
    .argument("<id>", "sandbox ID")
    .argument("<pid>", "process ID", parsePid)
    .addOption(
      new Option("-s, --signal <signal>", "the signal").choices(SIGNALS).default("SIGKILL"),
    )
    .action(
      action<[string, number], { signal: ProcessSignal }>(async ([id, pid], o) => {
        const delivered = await withSandbox(o, id, (s) => s.commands.kill(pid, o.signal));
        if (o.json) printJson({ pid, signal: o.signal, delivered });
        else if (!delivered) note(`sandpit: process ${pid} had already exited`);
      }),
    );
}
