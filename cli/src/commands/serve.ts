/**
 * `sandpit serve`: the provisioner's APIs without Kubernetes (docs/serve.md). Its flags are
 * serve's own, parsed by the provisioner's entry point (`sandpit serve --help` lists them), so
 * the command passes everything after `serve` through untouched.
 */
import type { Command } from "commander";

export function register(program: Command): void {
  program
    .command("serve")
    .description("the provisioner's APIs (native, DeerFlow, E2B) on Docker or local sandboxes")
    .helpOption(false)
    .allowUnknownOption()
    .allowExcessArguments()
    .argument("[flags...]", "see `sandpit serve --help`")
    .action(async (_flags: string[], _opts: unknown, command: Command) => {
      const { serveCli } = await import("@sandpit/provisioner/serve");
      await serveCli(command.args);
    });
}
