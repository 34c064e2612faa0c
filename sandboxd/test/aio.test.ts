/** The DeerFlow / AIO compatibility routes on a real sandboxd: shapes, envelope, jail, errors. */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, readFile, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_AIO_WRITE_BODY } from "../src/aio.ts";
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

  it("describes the sandbox with the fields agent-sandbox's SandboxResponse requires, at the top level", async () => {
    const res = await d.call("/v1/sandbox");
    const body = (await res.json()) as Record<string, unknown> & {
      detail: {
        system: Record<string, unknown>;
        runtime: { python: { bin: string }[]; nodejs: { ver: string }[] };
        utils: { category: string; tools: { name: string }[] }[];
      };
    };
    expect(body).toMatchObject({
      success: true,
      home_dir: "/mnt/user-data/workspace",
      workspace: "/mnt/user-data/workspace",
      version: expect.any(String),
    });
    for (const key of ["os", "os_version", "arch", "user", "home_dir", "timezone"]) {
      expect(typeof body.detail.system[key], key).toBe("string");
    }
    expect(body.detail.system.occupied_ports).toEqual([]);
    expect(body.detail.runtime.python[0]!.bin).toBeTruthy();
    expect(body.detail.runtime.nodejs[0]!.ver).toBe(process.versions.node);
    expect(body.detail.utils[0]!.tools.map((t) => t.name)).toContain("bash");
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

  it("stops a command at hard_timeout, with each API's status name", async () => {
    // The bash API reports a killed-at-deadline command as timed_out, the shell API as hard_timeout.
    const { env } = await call<{ status: string }>("/v1/bash/exec", {
      command: "sleep 30",
      hard_timeout: 0.5,
    });
    expect(env.data.status).toBe("timed_out");
    const shell = await call<{ status: string }>("/v1/shell/exec", {
      command: "sleep 30",
      hard_timeout: 0.5,
    });
    expect(shell.env.data.status).toBe("hard_timeout");
  });

  it("accepts the shell API's boolean truncate", async () => {
    const { status, env } = await call<{ output: string }>("/v1/shell/exec", {
      command: "head -c 40000 /dev/zero | tr '\\0' x",
      truncate: false,
    });
    expect(status).toBe(200);
    expect(env.data.output.length).toBe(40000);
    const cut = await call<{ output: string }>("/v1/shell/exec", {
      command: "head -c 40000 /dev/zero | tr '\\0' x",
      truncate: true,
    });
    expect(cut.env.data.output).toContain("characters truncated");
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

  it("greps with the full FileGrepResult: path, pattern, counts, context, size filter", async () => {
    // DeerFlow's call, as it sends it.
    const { env } = await call<{
      path: string;
      pattern: string;
      matches: {
        file: string;
        line_number: number;
        line_content: string;
        context_before?: string[];
        context_after?: string[];
      }[];
      match_count: number;
      files_searched: number;
      files_matched: number;
      truncated: boolean;
    }>("/v1/file/grep", {
      path: "/mnt/user-data/workspace/src",
      pattern: "hello",
      case_insensitive: true,
      fixed_strings: false,
      max_results: 400,
      max_file_size: "1M",
      recursive: true,
    });
    expect(env.data).toMatchObject({
      path: "/mnt/user-data/workspace/src",
      pattern: "hello",
      match_count: 1,
      files_searched: 3,
      files_matched: 1,
      truncated: false,
    });
    expect(env.data.matches[0]).toEqual({
      file: "/mnt/user-data/workspace/src/a.py",
      line_number: 2,
      line_content: "print('hello')",
    });
    const ctx = await call<typeof env.data>("/v1/file/grep", {
      path: "/mnt/user-data/workspace/src",
      pattern: "print",
      include: ["*.py"],
      exclude: ["deep"],
      context_before: 1,
      context_after: 1,
    });
    expect(ctx.env.data.matches).toEqual([
      {
        file: "/mnt/user-data/workspace/src/a.py",
        line_number: 2,
        line_content: "print('hello')",
        context_before: ["import os"],
        context_after: ["# TODO fix"],
      },
    ]);
    const small = await call<typeof env.data>("/v1/file/grep", {
      path: "/mnt/user-data/workspace/src",
      pattern: "TODO",
      max_file_size: "10",
    });
    expect(small.env.data.files_searched).toBe(0);
    const bad = await call("/v1/file/grep", { path: ".", pattern: "x", max_file_size: "lots" });
    expect(bad.status).toBe(400);
    expect(bad.env.success).toBe(false);
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

describe("AIO file writes", () => {
  it("takes a 64 MiB base64 upload in one call, with encoding after content as the client sends it", async () => {
    const bytes = randomBytes(64 * 1024 * 1024);
    // agent-sandbox serialises file, content, encoding in that order.
    const payload = `{"file":"/mnt/user-data/uploads/big.bin","content":"${bytes.toString("base64")}","encoding":"base64","append":null}`;
    const res = await d.call("/v1/file/write", {
      method: "POST",
      body: payload,
      headers: { "content-type": "application/json" },
    });
    const env = (await res.json()) as Envelope<{ file: string; bytes_written: number }>;
    expect(res.status, env.message).toBe(200);
    expect(env.data).toEqual({
      file: "/mnt/user-data/uploads/big.bin",
      bytes_written: bytes.length,
    });
    const written = await readFile(join(d.root, "uploads", "big.bin"));
    expect(sha256(written)).toBe(sha256(bytes));
  }, 60_000);

  it("unescapes text content exactly as JSON.parse does, escapes and surrogate pairs included", async () => {
    const text = 'line "one"\n\ttab\\ back/slash é 😀 \u0001 end';
    // ensure_ascii style: every non-ASCII character as \u escapes (the emoji as a surrogate pair).
    const ascii = JSON.stringify(text).replace(
      /[\u0080-\uffff]/g,
      (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
    );
    for (const [name, literal] of [
      ["utf8.txt", JSON.stringify(text)],
      ["ascii.txt", ascii],
    ] as const) {
      const res = await d.call("/v1/file/write", {
        method: "POST",
        body: `{ "content" : ${literal} , "file": "out/${name}", "trailing_newline": true }`,
        headers: { "content-type": "application/json" },
      });
      expect(res.status, name).toBe(200);
      expect(await readFile(join(d.root, "workspace", "out", name), "utf8"), name).toBe(
        `${text}\n`,
      );
    }
  });

  it("answers every failure in AIO's envelope: 413, bad JSON, missing content, unknown route, no token", async () => {
    const cases: [string, RequestInit, number][] = [
      [
        "/v1/file/write",
        {
          method: "POST",
          body: Buffer.alloc(MAX_AIO_WRITE_BODY + 1, 0x20),
          headers: { "content-type": "application/json" },
        },
        413,
      ],
      ["/v1/shell/exec", json({ command: "x".repeat(5 * 1024 * 1024) }), 413],
      ["/v1/file/write", { method: "POST", body: '{"file": "a", "content": "x"' }, 400],
      ["/v1/file/write", { method: "POST", body: '{"file": "a", "content": "x",}' }, 400],
      ["/v1/file/write", { method: "POST", body: '{"file": "a"}' }, 400],
      ["/v1/file/write", { method: "POST", body: '{"file": "a", "content": 7}' }, 400],
      [
        "/v1/file/write",
        { method: "POST", body: '{"file": "a", "content": "!!!", "encoding": "base64"}' },
        400,
      ],
      [
        "/v1/file/read",
        { method: "POST", body: "{not json", headers: { "content-type": "application/json" } },
        400,
      ],
      ["/v1/shell/nope", json({}), 404],
    ];
    for (const [path, init, status] of cases) {
      const res = await d.call(path, init);
      const env = (await res.json()) as Envelope<unknown>;
      expect(res.status, `${path} ${String(init.body).slice(0, 40)}`).toBe(status);
      expect(env).toMatchObject({ success: false, message: expect.any(String), data: null });
    }
    const res = await fetch(`${d.url}/v1/file/read`, json({ file: "a" }));
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ success: false, message: expect.any(String) });
    // A write that failed leaves nothing behind.
    await expect(readFile(join(d.root, "workspace", "a"))).rejects.toThrow();
  });
});

function sha256(b: Buffer): string {
  return createHash("sha256").update(b).digest("hex");
}
