/** `sandpit info <id>`: one sandbox's info, read without touching it (paused stays paused). */
import type { Command } from "commander";
import { action } from "../command-kit.ts";
import { printJson, printLine } from "../output.ts";
import { withProvider } from "../provider.ts";
import { infoLines } from "./ls.ts";

export function register(program: Command): void {
  program
    .command("info")
    .description("show a sandbox's state, language, labels and lifetime")
    .argument("<id>", "sandbox ID")
    .action(
      action<[string], object>(async ([id], o) => {
        const info = await withProvider(o, (p) => p.get(id));
        if (o.json) return printJson(info);
        for (const line of infoLines(info)) printLine(line);
      }),
    );
}
