/**
 * `sandpit exec <id> -- cmd...`: runs a command in the sandbox with its output streamed live, and
 * exits with the command's exit code. `-i` forwards this process's stdin; `-d` starts it in the
 * background and prints its pid (for `logs`, `ps` and `kill`). A sandboxd-backed sandbox reached
 * here gets an exec ticket, so the next plain `exec` of it skips this path (../fast-exec.ts).
 */
import type { Command } from "commander";
import type { SandboxCommandOptions } from "@sandpit/sdk";
import { action } from "../command-kit.ts";
import { writeTicket } from "../exec-ticket.ts";
import { runForeground } from "../exec-run.ts";
import { EXIT, usageError } from "../exit.ts";
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
          await writeTicket(sandbox, o.config).catch(() => undefined);
          return runForeground(sandbox, command, {
            base,
            json: o.json,
            interactive: o.interactive,
          });
        });
      }),
    );
}
