/**
 * The MCP tools. Every tool but create_sandbox and use_sandbox takes an optional `sandboxId`;
 * without it the tool acts on the session's current sandbox, created on first use.
 */
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import type { CodeExecutionResult, SandboxCreateOptions } from "@sandpit/sdk";
import { z } from "zod";
import { oneLine } from "../exit.ts";
import type { McpSession } from "./session.ts";

const sandboxId = z
  .string()
  .min(1)
  .optional()
  .describe("the sandbox to act on; default: this session's sandbox (created on first use)");
const language = z.enum(["python", "typescript"]);
const envs = z.record(z.string(), z.string());

function text(value: unknown): CallToolResult {
  return {
    content: [
      { type: "text", text: typeof value === "string" ? value : JSON.stringify(value, null, 2) },
    ],
  };
}

/** A tool's failure as the model should see it: one line, flagged isError. */
function toolError(err: unknown): CallToolResult {
  const message = err instanceof Error ? err.message : String(err);
  return { isError: true, content: [{ type: "text", text: oneLine(message) }] };
}

/** Wraps a tool body so any failure becomes an isError result instead of a protocol error. */
function safe<A>(body: (args: A) => Promise<CallToolResult>) {
  return async (args: A): Promise<CallToolResult> => {
    try {
      return await body(args);
    } catch (err) {
      return toolError(err);
    }
  };
}

export function registerTools(server: McpServer, session: McpSession): void {
  server.registerTool(
    "create_sandbox",
    {
      description:
        "Create a new sandbox and make it this session's sandbox (tools without sandboxId then act on it). Returns its sandboxId.",
      inputSchema: {
        language: language.optional().describe("default: the server's --language (python)"),
        packages: z.array(z.string().min(1)).optional().describe("pip or npm packages to install"),
        envs: envs.optional(),
        labels: envs.optional().describe("labels to find it by later"),
        template: z.string().min(1).optional().describe("image, pool, template or snapshot"),
      },
    },
    safe(async (a) => {
      const options: Partial<SandboxCreateOptions> = {};
      if (a.language) options.language = a.language;
      if (a.packages) options.packages = a.packages;
      if (a.envs) options.envs = a.envs;
      if (a.labels) options.labels = a.labels;
      if (a.template) options.template = a.template;
      const sandbox = await session.create(options);
      return text({ sandboxId: sandbox.sandboxId });
    }),
  );

  server.registerTool(
    "use_sandbox",
    {
      description:
        "Make an existing sandbox (by ID) this session's sandbox, resuming it if paused.",
      inputSchema: { sandboxId: z.string().min(1) },
    },
    safe(async (a) => text({ sandboxId: (await session.use(a.sandboxId)).sandboxId })),
  );

  server.registerTool(
    "run_command",
    {
      description:
        "Run a shell command in the sandbox to completion. Returns exitCode, stdout and stderr (a non-zero exit code is a result, not an error).",
      inputSchema: {
        command: z.string().min(1),
        cwd: z.string().min(1).optional(),
        envs: envs.optional(),
        timeoutMs: z.number().int().positive().optional(),
        sandboxId,
      },
    },
    safe(async (a) => {
      const sandbox = await session.get(a.sandboxId);
      const r = await sandbox.commands.run(a.command, {
        ...(a.cwd ? { cwd: a.cwd } : {}),
        ...(a.envs ? { envs: a.envs } : {}),
        ...(a.timeoutMs ? { timeoutMs: a.timeoutMs } : {}),
      });
      return text({ exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr });
    }),
  );

  server.registerTool(
    "run_code",
    {
      description:
        "Run a code cell in a persistent interpreter (one per sandbox and language for this session): variables, imports and functions carry over to the next cell. Returns stdout, stderr, the cell's results (images as image content) and any error.",
      inputSchema: {
        code: z.string(),
        language: language.default("python"),
        reset: z.boolean().optional().describe("start a fresh interpreter first"),
        timeoutMs: z.number().int().positive().optional(),
        sandboxId,
      },
    },
    safe(async (a) => {
      const sandbox = await session.get(a.sandboxId);
      if (a.reset) await session.resetContext(sandbox, a.language);
      const context = await session.context(sandbox, a.language);
      const r = await sandbox.executeCode(a.code, a.language, {
        context,
        ...(a.timeoutMs ? { timeoutMs: a.timeoutMs } : {}),
      });
      return codeResult(r);
    }),
  );

  server.registerTool(
    "read_file",
    {
      description: "Read a text file from the sandbox (relative paths start at its workspace).",
      inputSchema: { path: z.string().min(1), sandboxId },
    },
    safe(async (a) => text(await (await session.get(a.sandboxId)).filesystem.read(a.path))),
  );

  server.registerTool(
    "write_file",
    {
      description:
        "Write a text file in the sandbox, creating parent directories; replaces the file.",
      inputSchema: { path: z.string().min(1), content: z.string(), sandboxId },
    },
    safe(async (a) => {
      await (await session.get(a.sandboxId)).filesystem.write(a.path, a.content);
      return text({ path: a.path, bytes: Buffer.byteLength(a.content) });
    }),
  );

  server.registerTool(
    "list_files",
    {
      description:
        "List a directory in the sandbox (default its workspace): name, path, type, size.",
      inputSchema: {
        path: z.string().min(1).default("."),
        depth: z.number().int().min(1).max(32).optional().describe("levels to descend (default 1)"),
        sandboxId,
      },
    },
    safe(async (a) => {
      const entries = await (
        await session.get(a.sandboxId)
      ).filesystem.list(a.path, {
        ...(a.depth ? { depth: a.depth } : {}),
      });
      return text(entries.map(({ name, path, type, size }) => ({ name, path, type, size })));
    }),
  );

  server.registerTool(
    "get_url",
    {
      description:
        "The URL at which a server listening on a port inside the sandbox is reached, and the headers requests must carry.",
      inputSchema: { port: z.number().int().min(1).max(65535), sandboxId },
    },
    safe(async (a) => text(await (await session.get(a.sandboxId)).getUrl(a.port))),
  );

  server.registerTool(
    "kill_sandbox",
    {
      description: "Stop a sandbox and delete its files (default: this session's sandbox).",
      inputSchema: { sandboxId },
    },
    safe(async (a) => text({ sandboxId: await session.kill(a.sandboxId), killed: true })),
  );
}

/** A cell's outcome: text for the model, plus images as image content. */
function codeResult(r: CodeExecutionResult): CallToolResult {
  const content: CallToolResult["content"] = [];
  const summary: Record<string, unknown> = { success: r.success };
  if (r.stdout) summary.stdout = r.stdout;
  if (r.stderr) summary.stderr = r.stderr;
  const results = r.results.map((x) => x.text).filter((t): t is string => t !== undefined);
  if (results.length) summary.results = results;
  if (r.error) summary.error = r.error;
  content.push({ type: "text", text: JSON.stringify(summary, null, 2) });
  for (const x of r.results) {
    if (x.png) content.push({ type: "image", data: x.png, mimeType: "image/png" });
    if (x.jpeg) content.push({ type: "image", data: x.jpeg, mimeType: "image/jpeg" });
  }
  // A failed cell is still a result the model should read (its traceback), not a tool failure.
  return { content };
}
