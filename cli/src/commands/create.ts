/** `sandpit create`: a new sandbox; prints its ID (with --json, its info). */
import { Option, type Command } from "commander";
import type { SandboxCreateOptions, SandboxLanguage } from "@sandpit/sdk";
import { action } from "../command-kit.ts";
import { printJson, printLine } from "../output.ts";
import { collectList, collectPair, parseDuration } from "../parse.ts";
import { withProvider } from "../provider.ts";

interface Options {
  language: SandboxLanguage;
  package?: string[];
  env?: Record<string, string>;
  label?: Record<string, string>;
  template?: string;
  ttl?: number;
  idleTimeout?: number;
  cwd?: string;
  thread?: string;
  cpu?: number;
  memory?: number;
}

export function register(program: Command): void {
  program
    .command("create")
    .description("create a sandbox and print its ID")
    .addOption(
      new Option("-l, --language <language>", "the sandbox's language")
        .choices(["python", "typescript"])
        .default("python"),
    )
    .option(
      "-p, --package <name>",
      "install a package (pip or npm; repeat or comma-separate)",
      collectList,
    )
    .option(
      "-e, --env <KEY=VALUE>",
      "an environment variable of everything it runs (repeatable)",
      collectPair,
    )
    .option(
      "--label <KEY=VALUE>",
      "a label to find it by with `sandpit ls --label` (repeatable)",
      collectPair,
    )
    .option(
      "-t, --template <name>",
      "image (docker), pool (kubernetes), template (e2b) or snapshot (daytona)",
    )
    .option(
      "--ttl <duration>",
      "lifetime from now, then it is stopped (e.g. 30m, 2h)",
      parseDuration,
    )
    .option(
      "--idle-timeout <duration>",
      "pause (or stop) it after this long without activity",
      parseDuration,
    )
    .option("--cpu <cores>", "CPU cores (fractions allowed)", Number)
    .option("--memory <MiB>", "memory in MiB", Number)
    .option("--cwd <dir>", "default working directory of its commands")
    .option(
      "--thread <id>",
      "the conversation it belongs to: the same thread gets the same sandbox",
    )
    .action(
      action<[], Options>(async (_args, o) => {
        const options: SandboxCreateOptions = { language: o.language };
        if (o.package?.length) options.packages = o.package;
        if (o.env) options.envs = o.env;
        if (o.label) options.labels = o.label;
        if (o.template) options.template = o.template;
        if (o.ttl || o.idleTimeout)
          options.lifetime = {
            ...(o.ttl ? { ttlMs: o.ttl } : {}),
            ...(o.idleTimeout ? { idleTimeoutMs: o.idleTimeout } : {}),
          };
        if (o.cpu !== undefined || o.memory !== undefined)
          options.resources = {
            ...(o.cpu !== undefined ? { cpu: o.cpu } : {}),
            ...(o.memory !== undefined ? { memoryMiB: o.memory } : {}),
          };
        if (o.cwd) options.workingDirectory = o.cwd;
        if (o.thread) options.threadId = o.thread;
        await withProvider(o, async (provider) => {
          const sandbox = await provider.create(options);
          if (o.json) printJson({ sandboxId: sandbox.sandboxId });
          else printLine(sandbox.sandboxId);
        });
      }),
    );
}
