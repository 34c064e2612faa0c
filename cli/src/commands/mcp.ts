/** `sandpit mcp`: the stdio MCP server (mcp/server.ts). */
import { Option, type Command } from "commander";
import type { SandboxLanguage } from "@sandpit/sdk";
import { action } from "../command-kit.ts";

export function register(program: Command): void {
  program
    .command("mcp")
    .description("serve sandboxes to an MCP client over stdio")
    .addOption(
      new Option("-l, --language <language>", "language of the sandbox a session creates by itself")
        .choices(["python", "typescript"])
        .default("python"),
    )
    .option("--keep", "keep the sandboxes a session created when it ends (default: removed)")
    .action(
      action<[], { language: SandboxLanguage; keep?: boolean }>(async (_args, o) => {
        const { serveMcp } = await import("../mcp/server.ts");
        await serveMcp({ config: o.config, language: o.language, keep: o.keep === true });
      }),
    );
}
