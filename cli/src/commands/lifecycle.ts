/** `pause`, `resume`, `rm` and `timeout`: one call on a sandbox each. */
import type { Command } from "commander";
import type { SandboxInstance } from "@sandpit/sdk";
import { action } from "../command-kit.ts";
import { printJson } from "../output.ts";
import { parseDuration } from "../parse.ts";
import { withSandbox } from "../provider.ts";

function simple(
  program: Command,
  name: string,
  description: string,
  op: (s: SandboxInstance) => Promise<void>,
  done: string,
): void {
  program
    .command(name)
    .description(description)
    .argument("<id...>", "sandbox ID(s)")
    .action(
      action<[string[]], object>(async ([ids], o) => {
        for (const id of ids) await withSandbox(o, id, op);
        if (o.json) printJson(ids.map((sandboxId) => ({ sandboxId, [done]: true })));
      }),
    );
}

export function register(program: Command): void {
  simple(program, "pause", "stop a sandbox, keeping its files", (s) => s.pause(), "paused");
  // resume() itself brings it back; closing the provider afterwards leaves it running.
  simple(program, "resume", "start a paused sandbox again", async () => undefined, "resumed");
  simple(program, "rm", "stop a sandbox and delete its files", (s) => s.kill(), "removed");
  program
    .command("timeout")
    .description("end a sandbox this long from now, replacing its lifetime (e.g. 30m)")
    .argument("<id>", "sandbox ID")
    .argument("<duration>", "e.g. 90s, 30m, 2h", parseDuration)
    .action(
      action<[string, number], object>(async ([id, ms], o) => {
        await withSandbox(o, id, (s) => s.setTimeout(ms));
        if (o.json) printJson({ sandboxId: id, expiresAt: new Date(Date.now() + ms) });
      }),
    );
}
