/**
 * `sandpit mcp` driven by the MCP SDK's own client over stdio, as an MCP host would: it spawns
 * the server, lists its tools and calls them. A line on stdout that is not protocol would
 * surface as a client error, which the test checks for.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CliHarness, MAIN } from "./harness.ts";

const cli = new CliHarness();
const client = new Client({ name: "sandpit-test", version: "0.0.0" });
const clientErrors: Error[] = [];
let stderr = "";

beforeAll(async () => {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [MAIN, "mcp"],
    cwd: cli.cwd,
    env: cli.env() as Record<string, string>,
    stderr: "pipe",
  });
  transport.stderr?.on("data", (c: Buffer) => (stderr += c.toString()));
  client.onerror = (err) => clientErrors.push(err);
  await client.connect(transport);
}, 60_000);

afterAll(async () => {
  await client.close();
  await cli.cleanup();
});

async function call(name: string, args: Record<string, unknown> = {}): Promise<CallToolResult> {
  return (await client.callTool({ name, arguments: args })) as CallToolResult;
}

function textOf(r: CallToolResult): string {
  const first = r.content[0];
  if (first?.type !== "text") throw new Error(`no text content: ${JSON.stringify(r)}`);
  return first.text;
}

function json<T>(r: CallToolResult): T {
  if (r.isError) throw new Error(`tool failed: ${textOf(r)}`);
  return JSON.parse(textOf(r)) as T;
}

describe("sandpit mcp", () => {
  let sandboxId: string;

  it("lists its tools, each with an input schema", async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(
      [
        "create_sandbox",
        "get_url",
        "kill_sandbox",
        "list_files",
        "read_file",
        "run_code",
        "run_command",
        "use_sandbox",
        "write_file",
      ].sort(),
    );
    const run = tools.find((t) => t.name === "run_command")!;
    expect(run.inputSchema.required).toEqual(["command"]);
  });

  it("creates a sandbox that later calls act on by default", async () => {
    ({ sandboxId } = json<{ sandboxId: string }>(
      await call("create_sandbox", { envs: { WHO: "mcp" } }),
    ));
    expect(sandboxId).toMatch(/^default\./);
  });

  it("runs a command: exit code, stdout and stderr (a non-zero exit is a result)", async () => {
    expect(
      json(await call("run_command", { command: "echo $WHO; echo oops >&2; exit 3" })),
    ).toEqual({
      exitCode: 3,
      stdout: "mcp\n",
      stderr: "oops\n",
    });
  });

  it("runs code cells that share variables (a context per session and language)", async () => {
    json(await call("run_code", { code: "x = 41\nimport math" }));
    const r = json<{ success: boolean; stdout: string }>(
      await call("run_code", { code: "print(x + 1, math.floor(2.5))" }),
    );
    expect(r).toMatchObject({ success: true, stdout: "42 2\n" });
    const ts = json<{ stdout: string }>(
      await call("run_code", { language: "typescript", code: "const y: number = 5;" }),
    );
    expect(ts).toBeDefined();
    expect(
      json<{ stdout: string }>(
        await call("run_code", { language: "typescript", code: "console.log(y * 2)" }),
      ).stdout,
    ).toBe("10\n");
    const fresh = json<{ success: boolean; error?: { name: string } }>(
      await call("run_code", { code: "print(x)", reset: true }),
    );
    expect(fresh.success).toBe(false);
    expect(fresh.error?.name).toBe("NameError");
  });

  it("writes, reads and lists files", async () => {
    expect(json(await call("write_file", { path: "notes/hello.txt", content: "héllo\n" }))).toEqual(
      {
        path: "notes/hello.txt",
        bytes: 7,
      },
    );
    expect(textOf(await call("read_file", { path: "notes/hello.txt" }))).toBe("héllo\n");
    const entries = json<Array<{ name: string; type: string; size: number }>>(
      await call("list_files", { path: "notes" }),
    );
    expect(entries).toEqual([
      expect.objectContaining({ name: "hello.txt", type: "file", size: 7 }),
    ]);
  });

  it("acts on another sandbox by ID and makes one current with use_sandbox", async () => {
    const { sandboxId: second } = json<{ sandboxId: string }>(await call("create_sandbox", {}));
    expect(
      json<{ stdout: string }>(
        await call("run_command", { command: "cat notes/hello.txt", sandboxId }),
      ).stdout,
    ).toBe("héllo\n");
    expect(
      json<{ stdout: string }>(await call("run_command", { command: "ls notes 2>&1 || true" }))
        .stdout,
    ).toContain("No such file");
    json(await call("use_sandbox", { sandboxId }));
    expect(
      json<{ stdout: string }>(await call("run_command", { command: "cat notes/hello.txt" }))
        .stdout,
    ).toBe("héllo\n");
    expect(json(await call("kill_sandbox", { sandboxId: second }))).toEqual({
      sandboxId: second,
      killed: true,
    });
  });

  it("bad arguments and failures are tool errors (isError) with a clear message", async () => {
    const wrongType = await call("run_command", { command: 5 });
    expect(wrongType.isError).toBe(true);
    expect(textOf(wrongType)).toMatch(/command/);
    const missing = await call("read_file", { path: "no/such/file" });
    expect(missing.isError).toBe(true);
    expect(textOf(missing)).toMatch(/no\/such\/file|not exist|not found/i);
    const outside = await call("write_file", { path: "/etc/passwd", content: "x" });
    expect(outside.isError).toBe(true);
    expect(textOf(outside)).toMatch(/outside/);
    const unknown = await call("use_sandbox", { sandboxId: "default.nope" });
    expect(unknown.isError).toBe(true);
    expect(textOf(unknown)).toContain("default.nope");
  });

  it("kills the session's sandbox; stdout carried nothing but protocol", async () => {
    expect(json(await call("kill_sandbox"))).toEqual({ sandboxId, killed: true });
    expect((await call("run_command", { command: "true", sandboxId })).isError).toBe(true);
    expect(clientErrors).toEqual([]);
    expect(stderr).not.toMatch(/"level":/);
  });
});
