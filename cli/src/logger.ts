/**
 * The SDK's logger for the CLI and the MCP server: stdout carries only results (or MCP protocol),
 * so warnings become one `sandpit: warning: ...` line on stderr; SANDPIT_DEBUG=1 shows debug
 * records too, and SANDPIT_LOG_LEVEL picks any pino level.
 */
import type { Logger } from "pino";
import { debugEnabled } from "./exit.ts";

export async function stderrLogger(): Promise<Logger> {
  const { pino } = await import("pino");
  const level = process.env.SANDPIT_LOG_LEVEL ?? (debugEnabled() ? "debug" : "warn");
  return pino(
    { level, base: null, timestamp: false },
    {
      write(line: string) {
        let record: { level?: number; msg?: string };
        try {
          record = JSON.parse(line) as typeof record;
        } catch {
          record = { msg: line.trim() };
        }
        const name = pino.levels.labels[record.level ?? 40] ?? "log";
        process.stderr.write(`sandpit: ${name}: ${record.msg ?? line.trim()}\n`);
      },
    },
  );
}
