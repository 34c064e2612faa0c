/** The DeerFlow / AIO compatibility routes on a real sandboxd: shapes, envelope, jail, errors. */
import { mkdir, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { json, startSandboxd, type TestSandboxd } from "./helpers.ts";

let d: TestSandboxd;
beforeAll(async () => {
  d = await startSandboxd();
  const ws = join(d.root, "workspace");
  await mkdir(join(ws, "src", "deep"), { recursive: true });
  await writeFile(join(ws, "src", "a.py"), "import os\nprint('hello')\n# TODO fix\n");
  await writeFile(join(ws, "src", "deep", "b.py"), "x = 1\n# todo later\n");
  await writeFile(join(ws, "src", "notes.md"), "TODO in markdown\n");
  await writeFile(join(ws, ".hidden"), "secret-ish\n");
});
afterAll(async () => {
  await d?.stop();
});

type Envelope<T> = { success: boolean; message: string; data: T };
async function call<T>(
  path: string,
  body?: unknown,
): Promise<{ status: number; env: Envelope<T> }> {
  const res = await d.call(path, body === undefined ? {} : json(body));
  return { status: res.status, env: (await res.json()) as Envelope<T> };
}

describe("AIO compatibility", () => {
  it("describes the sandbox", async () => {
    const { env } = await call<{ home_dir: string; workspace: string; version: string }>(
      "/v1/sandbox",
    );
    expect(env.success).toBe(true);
    expect(env.data.workspace).toBe("/mnt/user-data/workspace");
  });

  it("runs shell commands with combined output and exit code, in exec_dir", async () => {
    const { env } = await call<{
      output: string;
      exit_code: number;
      status: string;
      session_id: string;
    }>("/v1/shell/exec", {
      command: "pwd; echo err >&2; exit 2",
      exec_dir: "/mnt/user-data/workspace/src",
      id: "s1",
    });
    expect(env.data).toMatchObject({ exit_code: 2, status: "completed", session_id: "s1" });
    expect(env.data.output).toContain("/mnt/user-data/workspace/src");
    expect(env.data.output).toContain("err");
  });

  it("runs bash commands with separate streams, per-command env and byte offsets", async () => {
    const { env } = await call<{
      stdout: string;
      stderr: string;
      exit_code: number;
      offset: number;
    }>("/v1/bash/exec", {
      command: 'echo "$GREETING"; echo oops >&2',
      env: { GREETING: "héllo" },
    });
    expect(env.data).toMatchObject({
      stdout: "héllo\n",
      stderr: "oops\n",
      exit_code: 0,
      offset: 7,
    });
  });

  it("stops a command at hard_timeout", async () => {
    const { env } = await call<{ status: string }>("/v1/bash/exec", {
      command: "sleep 30",
      hard_timeout: 0.5,
    });
    expect(env.data.status).toBe("hard_timeout");
  });

  it("refuses async_mode clearly", async () => {
    const { status, env } = await call("/v1/bash/exec", { command: "true", async_mode: true });
    expect(status).toBe(400);
    expect(env.success).toBe(false);
    expect(env.message).toContain("async_mode");
  });

  it("writes (utf-8, base64, append) and reads files, with line ranges", async () => {
    await call("/v1/file/write", { file: "out/log.txt", content: "one\ntwo\n" });
    await call("/v1/file/write", {
      file: "out/log.txt",
      content: Buffer.from("three\n").toString("base64"),
      encoding: "base64",
      append: true,
    });
    const { env } = await call<{ content: string; file: string }>("/v1/file/read", {
      file: "out/log.txt",
    });
    expect(env.data).toEqual({
      content: "one\ntwo\nthree\n",
      file: "/mnt/user-data/workspace/out/log.txt",
    });
    const part = await call<{ content: string }>("/v1/file/read", {
      file: "out/log.txt",
      start_line: 1,
      end_line: 2,
    });
    expect(part.env.data.content).toBe("two");
  });

  it("lists, hiding dot files unless asked", async () => {
    const { env } = await call<{ files: { name: string; is_directory: boolean }[] }>(
      "/v1/file/list",
      { path: "/mnt/user-data/workspace" },
    );
    const names = env.data.files.map((f) => f.name);
    expect(names).toContain("src");
    expect(names).not.toContain(".hidden");
    const all = await call<{ files: { name: string }[] }>("/v1/file/list", {
      path: "/mnt/user-data/workspace",
      show_hidden: true,
    });
    expect(all.env.data.files.map((f) => f.name)).toContain(".hidden");
  });

  it("finds files by glob", async () => {
    const { env } = await call<{ files: string[] }>("/v1/file/find", {
      path: "/mnt/user-data/workspace/src",
      glob: "**/*.py",
    });
    expect(env.data.files.sort()).toEqual([
      "/mnt/user-data/workspace/src/a.py",
      "/mnt/user-data/workspace/src/deep/b.py",
    ]);
  });

  it("greps with case folding and include filters", async () => {
    const { env } = await call<{
      matches: { file: string; line_number: number }[];
      match_count: number;
    }>("/v1/file/grep", {
      path: "/mnt/user-data/workspace/src",
      pattern: "todo",
      case_insensitive: true,
      include: "*.py",
    });
    expect(env.data.matches.map((m) => [m.file.split("/").pop(), m.line_number]).sort()).toEqual([
      ["a.py", 3],
      ["b.py", 2],
    ]);
    const bad = await call("/v1/file/grep", { path: ".", pattern: "(" });
    expect(bad.status).toBe(400);
  });

  it("downloads bytes", async () => {
    const res = await d.call("/v1/file/download?path=src/a.py");
    expect(res.headers.get("content-disposition")).toContain("a.py");
    expect(await res.text()).toContain("print('hello')");
  });

  it("keeps every path inside the sandbox, with AIO's error envelope", async () => {
    await symlink("/etc", join(d.root, "workspace", "etc-link"));
    for (const [path, body] of [
      ["/v1/file/read", { file: "/etc/passwd" }],
      ["/v1/file/read", { file: "etc-link/passwd" }],
      ["/v1/file/write", { file: "../../outside.txt", content: "x" }],
      ["/v1/file/list", { path: "/" }],
      ["/v1/file/grep", { path: "etc-link", pattern: "root" }],
      ["/v1/shell/exec", { command: "true", exec_dir: "/etc" }],
    ] as const) {
      const { status, env } = await call(path, body);
      expect(status, path).toBe(400);
      expect(env.success).toBe(false);
    }
  });

  it("needs the token like every other route", async () => {
    const res = await fetch(`${d.url}/v1/shell/exec`, json({ command: "id" }));
    expect(res.status).toBe(401);
  });
});
