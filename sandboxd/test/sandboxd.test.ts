/** sandboxd's API on a real process: auth, commands, streaming, caps, timeouts, code, bad input. */
import { createHash, randomUUID } from "node:crypto";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { Readable } from "node:stream";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { json, processesMatching, startSandboxd, type TestSandboxd } from "./helpers.ts";

let d: TestSandboxd;
beforeAll(async () => {
  d = await startSandboxd();
});
afterAll(async () => {
  await d?.stop();
});

describe("authentication", () => {
  it("leaves /healthz open and reports capabilities", async () => {
    const res = await fetch(`${d.url}/healthz`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { ok: boolean; capabilities: string[] };
    expect(body.ok).toBe(true);
    expect(body.capabilities).toContain("commands.stream");
  });

  it.each([
    ["no header", {}],
    ["wrong token", { authorization: "Bearer " + "0".repeat(64) }],
    ["a prefix of the token", { authorization: "Bearer short" }],
    ["wrong scheme", { authorization: "Basic abc" }],
  ])("answers 401 with %s", async (_name, headers) => {
    const res = await fetch(`${d.url}/v1/commands/run`, {
      ...json({ command: "true" }),
      headers: { ...headers, "content-type": "application/json" },
    });
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("UNAUTHORIZED");
  });

  it("takes the scheme in any case, as HTTP defines it", async () => {
    for (const scheme of ["bearer", "BEARER", "Bearer "]) {
      const res = await fetch(`${d.url}/v1/files/stat?path=.`, {
        headers: { authorization: `${scheme} ${d.token}` },
      });
      expect(res.status).toBe(200);
    }
  });

  it("verifies with the token's SHA-256 alone (SANDBOXD_TOKEN_SHA256), which opens nothing itself", async () => {
    const token = randomUUID() + randomUUID();
    const digest = createHash("sha256").update(token).digest("hex");
    const h = await startSandboxd({ SANDBOXD_TOKEN: null, SANDBOXD_TOKEN_SHA256: digest });
    try {
      const as = (credential: string) =>
        fetch(`${h.url}/v1/files/stat?path=.`, {
          headers: { authorization: `Bearer ${credential}` },
        });
      expect((await as(token)).status).toBe(200);
      expect((await as(digest)).status).toBe(401);
      // Neither reaches what the sandbox runs: its commands' environment has no trace of it.
      const env = await fetch(`${h.url}/v1/commands/run`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ command: "env" }),
      });
      const out = ((await env.json()) as { stdout: string }).stdout;
      expect(out).not.toContain(digest);
      expect(out).not.toContain("SANDBOXD_TOKEN");
    } finally {
      await h.stop();
    }
  });

  it("answers 401 on every route, files included", async () => {
    for (const path of ["/v1/files?path=a", "/v1/files/list?path=.", "/v1/files/stat?path=."]) {
      expect((await fetch(d.url + path)).status).toBe(401);
    }
  });
});

describe("commands", () => {
  it("runs a command and reports exit code, streams, duration", async () => {
    const res = await d.call(
      "/v1/commands/run",
      json({ command: "echo out; echo err >&2; exit 7" }),
    );
    const r = (await res.json()) as Record<string, unknown>;
    expect(r).toMatchObject({
      exitCode: 7,
      stdout: "out\n",
      stderr: "err\n",
      timedOut: false,
      truncated: false,
    });
  });

  it("streams NDJSON chunks with byte offsets as they are produced, then the exit line", async () => {
    // The command waits for a file the test writes only after the first chunk has arrived.
    const gate = join(d.root, `gate-${randomUUID()}`);
    const res = await d.call("/v1/commands/run", {
      ...json({
        command: `printf abc; while [ ! -e ${gate} ]; do sleep 0.05; done; printf défg`,
        timeoutMs: 20_000,
      }),
      headers: { "content-type": "application/json", accept: "application/x-ndjson" },
    });
    expect(res.headers.get("content-type")).toContain("application/x-ndjson");
    const lines = createInterface({ input: Readable.fromWeb(res.body! as WebReadableStream) });
    const events: Record<string, unknown>[] = [];
    for await (const line of lines) {
      events.push(JSON.parse(line) as Record<string, unknown>);
      if (events.length === 1) {
        expect(events[0], "the first chunk, before the command may end").toMatchObject({
          stream: "stdout",
          data: "abc",
          offset: 0,
        });
        await writeFile(gate, "");
      }
    }
    const chunks = events.filter((e) => e.stream === "stdout");
    expect(chunks.map((c) => c.data).join("")).toBe("abcdéfg");
    expect(chunks.at(-1)).toMatchObject({ offset: 3 });
    expect(events.at(-1)).toMatchObject({ stream: "exit", exitCode: 0, timedOut: false });
  });

  it("caps 100 MiB of output, says so, and keeps its memory bounded", async () => {
    const res = await d.call(
      "/v1/commands/run",
      json({
        command: "head -c 104857600 /dev/zero | tr '\\0' x; echo tail >&2",
        timeoutMs: 120_000,
      }),
    );
    const r = (await res.json()) as {
      stdout: string;
      stderr: string;
      truncated: boolean;
      exitCode: number;
    };
    expect(r.exitCode).toBe(0);
    expect(r.truncated).toBe(true);
    expect(r.stdout.length).toBe(10 * 1024 * 1024);
    expect(r.stderr).toBe("tail\n");
    const status = await readFile(`/proc/${d.child.pid}/status`, "utf8");
    const peakKiB = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1]);
    // Holding all 100 MiB (as a string, twice over) would need far more than this.
    expect(peakKiB).toBeLessThan(220 * 1024);
  }, 120_000);

  it("kills the whole process group at the timeout and leaves nothing behind", async () => {
    const marker = `31.${Date.now() % 100000}`;
    const res = await d.call(
      "/v1/commands/run",
      json({ command: `sleep ${marker}1 & sleep ${marker}2`, timeoutMs: 500 }),
    );
    const r = (await res.json()) as { timedOut: boolean; exitCode: number };
    expect(r.timedOut).toBe(true);
    expect(r.exitCode).toBe(137);
    // SIGKILL is delivered at once, but the kernel reaps asynchronously: wait for it, bounded.
    let left = await processesMatching(`sleep ${marker}`);
    for (const deadline = Date.now() + 10_000; left.length > 0 && Date.now() < deadline;) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      left = await processesMatching(`sleep ${marker}`);
    }
    expect(left).toEqual([]);
  });

  it("returns when the command exits though a background job keeps the output pipes open", async () => {
    const marker = `41.${Date.now() % 100000}`;
    const res = await d.call(
      "/v1/commands/run",
      json({ command: `sleep ${marker} & echo started`, timeoutMs: 50_000 }),
    );
    expect(((await res.json()) as { stdout: string }).stdout).toBe("started\n");
    // Answered while the job still runs: sandboxd did not wait for the pipes to close.
    const job = await processesMatching(`sleep ${marker}`);
    expect(job).toHaveLength(1);
    process.kill(job[0]!, "SIGKILL");
  });

  it("does not leak sandboxd's own token or settings into commands", async () => {
    const res = await d.call("/v1/commands/run", json({ command: "env" }));
    const { stdout } = (await res.json()) as { stdout: string };
    expect(stdout).not.toContain(d.token);
    expect(stdout).not.toContain("SANDBOXD_");
  });
});

describe("bad input", () => {
  it.each([
    [
      "malformed JSON",
      { method: "POST", body: "{not json", headers: { "content-type": "application/json" } },
      400,
      "INVALID_ARGUMENT",
    ],
    ["an empty command", json({ command: "" }), 400, "INVALID_ARGUMENT"],
    ["an unknown field", json({ command: "true", sudo: true }), 400, "INVALID_ARGUMENT"],
    ["a negative timeout", json({ command: "true", timeoutMs: -5 }), 400, "INVALID_ARGUMENT"],
    ["a bad env name", json({ command: "true", env: { "A=B": "x" } }), 400, "INVALID_ARGUMENT"],
    ["a cwd outside the root", json({ command: "true", cwd: "/etc" }), 400, "INVALID_ARGUMENT"],
    ["a missing cwd", json({ command: "true", cwd: "nope/nope" }), 404, "NOT_FOUND"],
  ])("rejects %s on /v1/commands/run", async (_name, init, status, code) => {
    const res = await d.call("/v1/commands/run", init as RequestInit);
    expect(res.status).toBe(status);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe(code);
    expect(body.error.message.length).toBeGreaterThan(5);
    expect(body.error.message).not.toContain(d.root);
  });

  it("rejects an unknown language with a message naming the choices", async () => {
    const res = await d.call("/v1/code/execute", json({ language: "ruby", code: "puts 1" }));
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toContain(
      '"python" or "typescript"',
    );
  });

  it("rejects an oversized JSON body with 413", async () => {
    const res = await d.call("/v1/commands/run", json({ command: "x".repeat(5 * 1024 * 1024) }));
    expect(res.status).toBe(413);
  });

  it("answers 404 for an unknown route", async () => {
    expect((await d.call("/v1/nope")).status).toBe(404);
  });

  it("refuses option-like package names", async () => {
    const res = await d.call(
      "/v1/packages/install",
      json({ language: "python", packages: ["--index-url=http://evil"] }),
    );
    expect(res.status).toBe(400);
  });
});

describe("warm-pool adoption (/v1/init)", () => {
  it("swaps the token and applies the sandbox environment", async () => {
    const own = await startSandboxd();
    try {
      const next = "n".repeat(64);
      const res = await own.call(
        "/v1/init",
        json({ token: next, env: { ADOPTED_BY: "thread-42" } }),
      );
      expect(res.status).toBe(200);
      expect((await own.call("/v1/commands/run", json({ command: "true" }))).status).toBe(401);
      const r = await fetch(`${own.url}/v1/commands/run`, {
        ...json({ command: "echo $ADOPTED_BY" }),
        headers: { authorization: `Bearer ${next}`, "content-type": "application/json" },
      });
      expect(((await r.json()) as { stdout: string }).stdout).toBe("thread-42\n");
    } finally {
      await own.stop();
    }
  });
});

describe("start-up settings", () => {
  it("refuses to start with a short token and says why", async () => {
    await expect(startSandboxd({ SANDBOXD_TOKEN: "short" })).rejects.toThrow(/exited/);
  });
});
