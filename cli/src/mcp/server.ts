/**
 * `sandpit mcp`: an MCP server on stdin/stdout (the official SDK's McpServer and stdio
 * transport) over whichever provider the Sandpit config names. Stdout carries only protocol:
 * the SDK's logger writes to stderr. Tool failures come back as tool results with isError and
 * a one-line message, so the model sees what went wrong.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import type { SandboxLanguage } from "@sandpit/sdk";
import { openProvider } from "../provider.ts";
import { VERSION } from "../version.ts";
import { McpSession } from "./session.ts";
import { registerTools } from "./tools.ts";

export interface McpOptions {
  config?: string | undefined;
  language: SandboxLanguage;
  keep: boolean;
}

export async function serveMcp(options: McpOptions): Promise<void> {
  const provider = await openProvider({ ...(options.config ? { config: options.config } : {}) });
  const session = new McpSession(provider, options);
  const server = new McpServer({ name: "sandpit", version: VERSION });
  registerTools(server, session);
  const transport = new StdioServerTransport();
  const closed = new Promise<void>((resolve) => {
    // The client closing our stdin (or a signal) ends the session.
    process.stdin.once("end", resolve);
    process.stdin.once("close", resolve);
    process.once("SIGINT", resolve);
    process.once("SIGTERM", resolve);
    transport.onclose = resolve;
  });
  await server.connect(transport);
  await closed;
  await session.close();
  await server.close().catch(() => undefined);
}
