/** `sandpit ls`: the sandboxes the provider can reach, optionally only those with given labels. */
import type { Command } from "commander";
import type { SandboxInfo } from "@sandpit/sdk";
import { action } from "../command-kit.ts";
import { formatLabels, printJson, printTable } from "../output.ts";
import { collectPair } from "../parse.ts";
import { withProvider } from "../provider.ts";

export function register(program: Command): void {
  program
    .command("ls")
    .alias("list")
    .description("list sandboxes")
    .option(
      "--label <KEY=VALUE>",
      "only sandboxes carrying this label (repeatable: all of them)",
      collectPair,
    )
    .action(
      action<[], { label?: Record<string, string> }>(async (_args, o) => {
        const list = await withProvider(o, (p) => p.list(o.label ? { labels: o.label } : {}));
        if (o.json) return printJson(list);
        printTable(
          ["ID", "STATE", "LANGUAGE", "CREATED", "LABELS"],
          list.map((s) => [
            s.sandboxId,
            s.state,
            s.language ?? "",
            s.createdAt ? new Date(s.createdAt).toISOString() : "",
            formatLabels(s.labels),
          ]),
        );
      }),
    );
}

/** Info as text: one `field: value` line each, for `info`. */
export function infoLines(s: SandboxInfo): string[] {
  const lines: Array<[string, unknown]> = [
    ["id", s.sandboxId],
    ["provider", s.provider],
    ["state", s.state],
    ["language", s.language],
    ["template", s.template],
    ["thread", s.threadId],
    ["user", s.userId],
    ["created", s.createdAt && new Date(s.createdAt).toISOString()],
    ["expires", s.expiresAt && new Date(s.expiresAt).toISOString()],
    ["labels", formatLabels(s.labels) || undefined],
    ["resources", s.resources && JSON.stringify(s.resources)],
  ];
  return lines.filter(([, v]) => v !== undefined && v !== "").map(([k, v]) => `${k}: ${v}`);
}
