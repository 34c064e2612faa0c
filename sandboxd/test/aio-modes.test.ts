/** sandboxd's AIO settings: SANDBOXD_AIO_PATHS=any, SANDBOXD_AIO_NO_AUTH, and starting without a token. */
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { json, MAIN, startSandboxd, type TestSandboxd } from "./helpers.ts";

const started: TestSandboxd[] = [];
afterAll(async () => {
  for (const d of started) await d.stop();
});
async function sandboxd(env: Record<string, string | null>): Promise<TestSandboxd> {
  const d = await startSandboxd(env);
  started.push(d);
  return d;
}

describe("SANDBOXD_AIO_PATHS=any (a container or pod)", () => {
  it("lets AIO file and shell routes reach any path the user can, and keeps the native jail", async () => {
    const d = await sandboxd({ SANDBOXD_AIO_PATHS: "any" });
    const dir = join(tmpdir(), `aio-any-${randomUUID()}`);
    try {
      const wrote = await d.call("/v1/file/write", json({ file: `${dir}/x.py`, content: "hi\n" }));
      expect(wrote.status).toBe(200);
      expect(await readFile(`${dir}/x.py`, "utf8")).toBe("hi\n");
      const read = await d.call("/v1/file/read", json({ file: `${dir}/x.py` }));
      expect(((await read.json()) as { data: { content: string } }).data.content).toBe("hi\n");
      const listed = await d.call("/v1/file/list", json({ path: dir }));
      expect(listed.status).toBe(200);
      const shell = await d.call("/v1/shell/exec", json({ command: "pwd", exec_dir: dir }));
      expect(((await shell.json()) as { data: { output: string } }).data.output).toBe(`${dir}\n`);
      // Relative paths still start in the workspace.
      const rel = await d.call("/v1/file/write", json({ file: "rel.txt", content: "r" }));
      expect(((await rel.json()) as { data: { file: string } }).data.file).toBe(
        "/mnt/user-data/workspace/rel.txt",
      );
      // The native file API keeps its jail.
      const native = await d.call(`/v1/files?path=${encodeURIComponent(`${dir}/x.py`)}`);
      expect(native.status).toBe(400);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("is off by default: AIO paths outside the root are refused", async () => {
    const d = await sandboxd({});
    const res = await d.call("/v1/file/write", json({ file: "/tmp/x", content: "x" }));
    expect(res.status).toBe(400);
  });
});

describe("SANDBOXD_AIO_NO_AUTH (DeerFlow's local container backend)", () => {
  it("serves the AIO routes without a token and nothing else", async () => {
    const d = await sandboxd({ SANDBOXD_TOKEN: null, SANDBOXD_AIO_NO_AUTH: "1" });
    const context = await fetch(`${d.url}/v1/sandbox`);
    expect(context.status).toBe(200);
    expect(((await context.json()) as { home_dir: string }).home_dir).toBe(
      "/mnt/user-data/workspace",
    );
    const shell = await fetch(`${d.url}/v1/shell/exec`, json({ command: "echo open" }));
    expect(((await shell.json()) as { data: { output: string } }).data.output).toBe("open\n");
    // Native routes stay closed: with no token set, no header opens them.
    for (const [path, init] of [
      ["/v1/commands/run", json({ command: "true" })],
      ["/v1/files/list?path=.", {}],
      ["/v1/init", json({ token: "x".repeat(40) })],
      ["/v1/drain", json({ idleMs: 0 })],
    ] as const) {
      const res = await fetch(`${d.url}${path}`, {
        ...init,
        headers: { ...(init as RequestInit).headers, authorization: "Bearer anything" },
      });
      expect(res.status, path).toBe(401);
    }
  });

  it("keeps the token on native routes when one is set too", async () => {
    const d = await sandboxd({ SANDBOXD_AIO_NO_AUTH: "1" });
    expect((await fetch(`${d.url}/v1/file/list`, json({ path: "." }))).status).toBe(200);
    expect((await fetch(`${d.url}/v1/commands/run`, json({ command: "true" }))).status).toBe(401);
    expect((await d.call("/v1/commands/run", json({ command: "true" }))).status).toBe(200);
  });

  it("refuses to start with neither a token nor the opt-in, saying why", async () => {
    const child = spawn(process.execPath, [MAIN], {
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", SANDBOXD_LISTEN: "127.0.0.1:0" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
    const code = await new Promise((resolve) => child.once("exit", resolve));
    expect(code).toBe(2);
    expect(stderr).toContain("no token");
    expect(stderr).toContain("SANDBOXD_AIO_NO_AUTH=1");
  });
});
