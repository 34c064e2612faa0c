/**
 * The official E2B SDKs (`e2b`, `@e2b/code-interpreter`) against the data-plane translator
 * (provisioner/src/api/e2b/envd) over LocalProvider sandboxes, through the minimal control plane
 * of test/e2b-compat/local-server.ts. Plus the binary protobuf encoding and gzip through a
 * generic Connect client, and malformed input (fuzzed) on the Connect routes.
 */
import { createHash } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import fc from "fast-check";
import { CommandExitError, FileType, NotFoundError, Sandbox as BaseSandbox } from "e2b";
import { Sandbox } from "@e2b/code-interpreter";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { serviceDesc } from "../../provisioner/src/api/e2b/envd/proto.ts";
import { HARNESS_API_KEY, LocalE2BHarness } from "./local-server.ts";

let harness: LocalE2BHarness;
let baseDir: string;
let sbx: Sandbox;
let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };

beforeAll(async () => {
  baseDir = await mkdtemp(join(tmpdir(), "sandpit-e2b-envd-"));
  harness = new LocalE2BHarness(baseDir);
  const url = await harness.start();
  opts = { apiKey: HARNESS_API_KEY, apiUrl: url, sandboxUrl: url };
  sbx = await Sandbox.create(opts);
});

afterAll(async () => {
  await harness?.close();
  await rm(baseDir, { recursive: true, force: true });
});

/** Raw data-plane request, as the SDK addresses it. */
function envd(path: string, init: RequestInit & { port?: number; token?: string | null } = {}) {
  const headers = new Headers(init.headers);
  headers.set("E2b-Sandbox-Id", sbx.sandboxId);
  headers.set("E2b-Sandbox-Port", String(init.port ?? 49983));
  const token =
    init.token === undefined
      ? (sbx as unknown as { envdAccessToken: string }).envdAccessToken
      : init.token;
  if (token !== null) headers.set("X-Access-Token", token);
  return fetch(`${harness.url}${path}`, { ...init, headers });
}

describe("commands", () => {
  it("runs in the foreground with cwd and env, output split by stream", async () => {
    await sbx.files.makeDir("cmd-dir");
    const r = await sbx.commands.run('echo "$GREETING"; pwd; echo oops >&2', {
      cwd: "/mnt/user-data/workspace/cmd-dir",
      envs: { GREETING: "hello e2b" },
    });
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toBe("hello e2b\n/mnt/user-data/workspace/cmd-dir\n");
    expect(r.stderr).toBe("oops\n");
  });

  it("raises CommandExitError for a non-zero exit", async () => {
    const err = await sbx.commands.run("echo bad >&2; exit 7").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommandExitError);
    expect((err as CommandExitError).exitCode).toBe(7);
    expect((err as CommandExitError).stderr).toBe("bad\n");
    expect((err as CommandExitError).error).toBe("exit status 7");
  });

  it("streams output to callbacks", async () => {
    const seen: string[] = [];
    await sbx.commands.run("for i in 1 2 3; do echo $i; sleep 0.05; done", {
      onStdout: (d) => void seen.push(d),
    });
    expect(seen.join("")).toBe("1\n2\n3\n");
  });

  it("runs in the background with stdin, lists, connects and waits", async () => {
    const h = await sbx.commands.run("cat", { background: true, stdin: true });
    const listed = (await sbx.commands.list()).find((p) => p.pid === h.pid);
    expect(listed).toMatchObject({ cmd: "/bin/bash", args: ["-l", "-c", "cat"] });
    await sbx.commands.sendStdin(h.pid, "line one\n");
    const again = await sbx.commands.connect(h.pid);
    await sbx.commands.closeStdin(h.pid);
    const r = await h.wait();
    expect(r.stdout).toBe("line one\n");
    expect((await again.wait()).exitCode).toBe(0);
  });

  it("answers input to a command that has exited as envd does for an unknown pid", async () => {
    const h = await sbx.commands.run("true", { background: true, stdin: true });
    expect((await h.wait()).exitCode).toBe(0);
    await expect(sbx.commands.sendStdin(h.pid, "late\n")).rejects.toThrow(NotFoundError);
  });

  it("connects to a running command from that moment on, as envd does (no replay)", async () => {
    const h = await sbx.commands.run('echo early; read line; echo "late $line"', {
      background: true,
      stdin: true,
    });
    await expect.poll(() => h.stdout, { timeout: 10_000 }).toBe("early\n");
    await h.disconnect();
    const seen: string[] = [];
    const again = await sbx.commands.connect(h.pid, { onStdout: (d) => void seen.push(d) });
    await sbx.commands.sendStdin(h.pid, "one\n");
    const r = await again.wait();
    expect(r.stdout).toBe("late one\n");
    expect(seen.join("")).toBe("late one\n");
  });

  it("lists a command as started after its client went away", async () => {
    const h = await sbx.commands.run("sleep 30", { background: true, envs: { ONLY: "here" } });
    await h.disconnect();
    await new Promise((r) => setTimeout(r, 200));
    const listed = (await sbx.commands.list()).find((p) => p.pid === h.pid);
    expect(listed).toMatchObject({
      cmd: "/bin/bash",
      args: ["-l", "-c", "sleep 30"],
      envs: { ONLY: "here" },
    });
    expect(await sbx.commands.kill(h.pid)).toBe(true);
  });

  it("gives a command without stdin an empty standard input", async () => {
    expect((await sbx.commands.run("cat; echo done")).stdout).toBe("done\n");
  });

  it("kills a background command the way envd reports it", async () => {
    const h = await sbx.commands.run("sleep 60", { background: true });
    expect(await sbx.commands.kill(h.pid)).toBe(true);
    const err = await h.wait().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommandExitError);
    expect((err as CommandExitError).exitCode).toBe(-1);
    expect((err as CommandExitError).error).toBe("signal: killed");
    expect(await sbx.commands.kill(h.pid)).toBe(false);
  });

  it("kills a command that runs past its timeoutMs", async () => {
    const err = await sbx.commands.run("sleep 30", { timeoutMs: 500 }).catch((e: unknown) => e);
    expect((err as Error).name).toBe("TimeoutError");
  });

  it("starts a command outside the jail where asked (the shell changes there)", async () => {
    const r = await sbx.commands.run("pwd", { cwd: "/tmp" });
    expect(r.stdout).toBe("/tmp\n");
  });

  it("kills a command at its deadline even when its client gave up first", async () => {
    const rpc = await connectRpc("json");
    const gaveUp = AbortSignal.timeout(200);
    const events = rpc.proc.start(
      { process: { cmd: "/bin/bash", args: ["-c", "sleep 2; touch late-marker"] } },
      { timeoutMs: 800, signal: gaveUp },
    );
    await (async () => {
      for await (const _ of events);
    })().catch(() => undefined);
    expect(gaveUp.aborted).toBe(true);
    await new Promise((r) => setTimeout(r, 3_000));
    expect(await sbx.files.exists("late-marker")).toBe(false);
  });
});

describe("pty", () => {
  it("creates a terminal, takes input, resizes and is killed", async () => {
    let out = "";
    const decoder = new TextDecoder();
    const term = await sbx.pty.create({
      cols: 80,
      rows: 24,
      onData: (d) => void (out += decoder.decode(d, { stream: true })),
    });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode("echo $((6*7)) $(tput cols)\n"));
    await expect.poll(() => out, { timeout: 10_000 }).toContain("42 80");
    await sbx.pty.resize(term.pid, { cols: 100, rows: 30 });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode("tput cols\n"));
    await expect.poll(() => out, { timeout: 10_000 }).toMatch(/\b100\r?\n/);
    expect(await sbx.pty.kill(term.pid)).toBe(true);
    const err = await term.wait().catch((e: unknown) => e);
    expect((err as CommandExitError).exitCode).toBe(-1);
  });

  it("re-attaches to a terminal from that moment on, as envd does (no replay)", async () => {
    const decoder = new TextDecoder();
    let first = "";
    const term = await sbx.pty.create({
      cols: 80,
      rows: 24,
      onData: (d) => void (first += decoder.decode(d, { stream: true })),
    });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode("echo first-$((20+1))\n"));
    await expect.poll(() => first, { timeout: 10_000 }).toContain("first-21");
    await term.disconnect();
    let second = "";
    const again = await sbx.pty.connect(term.pid, {
      onData: (d) => void (second += decoder.decode(d, { stream: true })),
    });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode("echo second-$((20+2))\n"));
    await expect.poll(() => second, { timeout: 10_000 }).toContain("second-22");
    expect(second).not.toContain("first-21");
    expect(await sbx.pty.kill(term.pid)).toBe(true);
    await again.wait().catch(() => undefined);
  });
});

describe("files", () => {
  it("writes and reads text and bytes", async () => {
    await sbx.files.write("f/hello.txt", "héllo");
    expect(await sbx.files.read("f/hello.txt")).toBe("héllo");
    const bytes = new Uint8Array([0, 1, 2, 255]);
    await sbx.files.write("f/bin", bytes.buffer);
    expect(await sbx.files.read("f/bin", { format: "bytes" })).toEqual(bytes);
    const info = await sbx.files.getInfo("f/bin");
    expect(info).toMatchObject({ name: "bin", type: FileType.FILE, size: 4 });
  });

  it("lists with depth, checks existence, renames, removes and makes dirs", async () => {
    expect(await sbx.files.makeDir("tree/a/b")).toBe(true);
    expect(await sbx.files.makeDir("tree/a/b")).toBe(false);
    await sbx.files.write("tree/a/b/c.txt", "c");
    const one = await sbx.files.list("tree");
    expect(one.map((e) => e.name)).toEqual(["a"]);
    const deep = await sbx.files.list("tree", { depth: 3 });
    expect(deep.map((e) => e.name).sort()).toEqual(["a", "b", "c.txt"]);
    expect(await sbx.files.exists("tree/a/b/c.txt")).toBe(true);
    const moved = await sbx.files.rename("tree/a/b/c.txt", "tree/d.txt");
    // E2B's home is the workspace: reported under /home/user (docs/e2b.md, "Paths").
    expect(moved.path).toBe("/home/user/tree/d.txt");
    expect(await sbx.files.exists("tree/a/b/c.txt")).toBe(false);
    await sbx.files.remove("tree");
    expect(await sbx.files.exists("tree")).toBe(false);
    await expect(sbx.files.list("no-such-dir")).rejects.toBeInstanceOf(NotFoundError);
    await expect(sbx.files.read("no-such-file")).rejects.toBeInstanceOf(NotFoundError);
  });

  it("names the workspace /home/user and ~, and reports a file's mode", async () => {
    await sbx.files.write("/home/user/home.txt", "home");
    expect(await sbx.files.read("~/home.txt")).toBe("home");
    expect(await sbx.files.read("/mnt/user-data/workspace/home.txt")).toBe("home");
    // A path is reported the way the caller spelled the one it asked about.
    expect((await sbx.files.getInfo("/mnt/user-data/workspace/home.txt")).path).toBe(
      "/mnt/user-data/workspace/home.txt",
    );
    expect((await sbx.files.list("/home/user")).map((e) => e.path)).toContain(
      "/home/user/home.txt",
    );
    await sbx.commands.run("chmod 640 home.txt");
    expect(await sbx.files.getInfo("home.txt")).toMatchObject({
      path: "/home/user/home.txt",
      mode: 0o640,
      permissions: "-rw-r-----",
    });
    expect((await sbx.files.getInfo("~")).permissions).toMatch(/^d/);
  });

  it("watches a directory (streamed), recursively", async () => {
    await sbx.files.makeDir("watched/sub");
    const events: string[] = [];
    const w = await sbx.files.watchDir("watched", (e) => void events.push(`${e.type}:${e.name}`), {
      recursive: true,
    });
    await sbx.files.write("watched/sub/new.txt", "x");
    await expect.poll(() => events, { timeout: 10_000 }).toContain("create:sub/new.txt");
    await w.stop();
  });

  it("watches a directory by polling (CreateWatcher/GetWatcherEvents)", async () => {
    await sbx.files.makeDir("polled");
    const rpc = await connectRpc("json");
    const { watcherId } = await rpc.fs.createWatcher({ path: "polled" });
    await sbx.files.write("polled/a.txt", "a");
    let names: string[] = [];
    await expect
      .poll(
        async () => {
          const { events } = await rpc.fs.getWatcherEvents({ watcherId });
          names = [...names, ...events.map((e) => e.name)];
          return names;
        },
        { timeout: 10_000 },
      )
      .toContain("a.txt");
    await rpc.fs.removeWatcher({ watcherId });
    await expect(rpc.fs.getWatcherEvents({ watcherId })).rejects.toThrow(/not found/);
  });

  it("signs upload and download URLs, which route without the sandbox headers", async () => {
    const up = await sbx.uploadUrl("signed/up.txt");
    const form = new FormData();
    form.append("file", new Blob(["signed body"]), "up.txt");
    const posted = await fetch(up, { method: "POST", body: form });
    expect(posted.status).toBe(200);
    const down = await sbx.downloadUrl("signed/up.txt");
    expect(await (await fetch(down)).text()).toBe("signed body");
    // A signature for a read is no write, and an expired one is refused.
    expect(
      (await fetch(down.replace("/files?", "/files?x=1&"), { method: "POST", body: form })).status,
    ).toBe(401);
    const expired = await sbx.downloadUrl("signed/up.txt", { useSignatureExpiration: -10 });
    const res = await fetch(expired);
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ code: 401, message: "signature is already expired" });
  });

  it("uploads and downloads 100 MiB streamed, both ways", async () => {
    const size = 100 * 1024 * 1024;
    const chunk = new Uint8Array(1024 * 1024).map((_, i) => i % 251);
    const hash = createHash("sha256");
    for (let i = 0; i < 100; i++) hash.update(chunk);
    let left = 100;
    const stream = new ReadableStream<Uint8Array>({
      pull(c: ReadableStreamDefaultController<Uint8Array>) {
        if (left-- > 0) c.enqueue(chunk);
        else c.close();
      },
    });
    await sbx.files.write("big.bin", stream);
    const back = await sbx.files.read("big.bin", { format: "stream" });
    const got = createHash("sha256");
    let n = 0;
    for await (const c of back) {
      got.update(c);
      n += c.length;
    }
    expect(n).toBe(size);
    expect(got.digest("hex")).toBe(hash.digest("hex"));
    await sbx.files.remove("big.bin");
  }, 120_000);

  it("accepts gzip-encoded octet-stream uploads", async () => {
    const res = await envd("/files?path=gz.txt", {
      method: "POST",
      headers: { "content-type": "application/octet-stream", "content-encoding": "gzip" },
      body: gzipSync("zipped"),
    });
    expect(res.status).toBe(200);
    expect(await sbx.files.read("gz.txt")).toBe("zipped");
  });
});

describe("code interpreter", () => {
  it("keeps state across cells and streams callbacks", async () => {
    await sbx.runCode("counter = 40");
    const out: string[] = [];
    const ex = await sbx.runCode("print('side'); counter + 2", {
      onStdout: (m) => void out.push(m.line),
    });
    expect(ex.text).toBe("42");
    expect(out).toEqual(["side\n"]);
    expect(ex.executionCount).toBe(2);
  });

  it("reports errors with name, value and traceback", async () => {
    const ex = await sbx.runCode("def f():\n    raise ValueError('nope')\nf()");
    expect(ex.error?.name).toBe("ValueError");
    expect(ex.error?.value).toBe("nope");
    expect(ex.error?.traceback).toContain("raise ValueError");
  });

  it("runs javascript, typescript and bash cells", async () => {
    expect(
      (await sbx.runCode("const a: number = 2; a * 21", { language: "typescript" })).text,
    ).toBe("42");
    expect((await sbx.runCode("[1, 2].map((x) => x * 2).join(',')", { language: "js" })).text).toBe(
      "'2,4'",
    );
    const bash = await sbx.runCode("echo from bash; exit 3", { language: "bash" });
    expect(bash.logs.stdout).toEqual(["from bash\n"]);
    expect(bash.error?.value).toBe("exit status 3");
  });

  it("refuses other languages with the code interpreter's error", async () => {
    await expect(sbx.runCode("1", { language: "r" })).rejects.toThrow(/400/);
  });

  it("creates, lists, restarts and removes contexts", async () => {
    const ctx = await sbx.createCodeContext({ language: "python" });
    await sbx.runCode("kept = 'yes'", { context: ctx });
    expect((await sbx.runCode("kept", { context: ctx })).text).toBe("'yes'");
    expect((await sbx.listCodeContexts()).map((c) => c.id)).toContain(ctx.id);
    await sbx.restartCodeContext(ctx);
    const after = await sbx.runCode("kept", { context: ctx });
    expect(after.error?.name).toBe("NameError");
    await sbx.removeCodeContext(ctx);
    expect((await sbx.listCodeContexts()).map((c) => c.id)).not.toContain(ctx.id);
    await expect(sbx.runCode("1", { context: ctx })).rejects.toBeInstanceOf(NotFoundError);
  });

  it("reports a cell whose interpreter died as the code interpreter does (DeadKernelError)", async () => {
    const ctx = await sbx.createCodeContext({ language: "python" });
    const ex = await sbx.runCode("import os\nos._exit(3)", { context: ctx });
    expect(ex.error?.name).toBe("DeadKernelError");
    await sbx.removeCodeContext(ctx);
    await expect(sbx.runCode("1", { context: ctx })).rejects.toBeInstanceOf(NotFoundError);
  });

  it("names a context's kernel on its command line as E2B's are (kernel-<id>.json): SIGINT to it interrupts the cell", async () => {
    for (const [language, setup, loop] of [
      ["python", "x = 41", "print('started', flush=True)\nwhile True:\n    pass"],
      ["typescript", "var x = 41;", 'console.log("started");\nwhile (true) {}'],
    ] as const) {
      const ctx = await sbx.createCodeContext({ language });
      await sbx.runCode(setup, { context: ctx });
      let started!: () => void;
      const seen = new Promise<void>((r) => (started = r));
      const cell = sbx.runCode(loop, {
        context: ctx,
        onStdout: (m) => m.line.includes("started") && started(),
      });
      await seen;
      await sbx.commands.run(`pkill -INT -f -- 'kernel-${ctx.id}[.]json'`);
      expect((await cell).error, language).toBeDefined();
      expect((await sbx.runCode("x", { context: ctx })).text, language).toBe("41");
      await sbx.removeCodeContext(ctx);
    }
  });

  it("reports a promise a cell leaves rejected as the cell's error", async () => {
    const ex = await sbx.runCode('Promise.reject(new RangeError("out of range"))', {
      language: "typescript",
    });
    expect(ex.error?.name).toBe("RangeError");
    expect(ex.error?.value).toBe("out of range");
    expect((await sbx.runCode("1 + 1", { language: "typescript" })).text).toBe("2");
  });

  it("returns a chart and a DataFrame when the sandbox's Python has them, else their import error", async () => {
    const probe = await sbx.runCode("import matplotlib, pandas");
    if (probe.error) {
      // The local provider's Python is the host's: assert what it really does.
      expect(probe.error.name).toBe("ModuleNotFoundError");
      expect(probe.error.traceback).toContain("import matplotlib");
      return;
    }
    const chart = await sbx.runCode(
      "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()",
    );
    expect(chart.results.some((r) => r.png)).toBe(true);
    const df = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2]})");
    expect(df.results[0]?.html).toContain("<table");
  });
});

/** A generic Connect client over our own descriptors, in either encoding. */
async function connectRpc(format: "json" | "binary") {
  const token = (sbx as unknown as { envdAccessToken: string }).envdAccessToken;
  const transport = createConnectTransport({
    baseUrl: harness.url,
    useBinaryFormat: format === "binary",
    fetch: (input, init) => {
      const headers = new Headers(init?.headers);
      headers.set("E2b-Sandbox-Id", sbx.sandboxId);
      headers.set("X-Access-Token", token);
      return fetch(input, { ...init, headers });
    },
  });
  return {
    proc: createClient(
      serviceDesc("process.Process") as never,
      transport,
    ) as never as ProcessClient,
    fs: createClient(serviceDesc("filesystem.Filesystem") as never, transport) as never as FsClient,
  };
}

interface ProcessClient {
  list(req: object): Promise<{ processes: { pid: number }[] }>;
  start(
    req: object,
    options?: { timeoutMs?: number; signal?: AbortSignal },
  ): AsyncIterable<{ event?: { event: { case: string; value: Record<string, unknown> } } }>;
}
interface FsClient {
  stat(req: object): Promise<{ entry?: { name: string; size: bigint } }>;
  createWatcher(req: object): Promise<{ watcherId: string }>;
  getWatcherEvents(req: object): Promise<{ events: { name: string }[] }>;
  removeWatcher(req: object): Promise<object>;
}

describe("Connect encodings", () => {
  it("serves the binary protobuf encoding, unary and streamed", async () => {
    const rpc = await connectRpc("binary");
    await sbx.files.write("bin-probe.txt", "12345");
    const { entry } = await rpc.fs.stat({ path: "bin-probe.txt" });
    expect(entry?.name).toBe("bin-probe.txt");
    expect(entry?.size).toBe(5n);
    const cases: string[] = [];
    let out = "";
    for await (const r of rpc.proc.start({
      process: { cmd: "/bin/echo", args: ["binary", "ok"] },
    })) {
      const e = r.event!.event;
      cases.push(e.case);
      if (e.case === "data")
        out += Buffer.from((e.value.output as { value: Uint8Array }).value).toString();
      if (e.case === "end") expect(e.value.exitCode).toBe(0);
    }
    expect(cases[0]).toBe("start");
    expect(cases.at(-1)).toBe("end");
    expect(out).toBe("binary ok\n");
  });

  it("accepts gzip-compressed unary requests", async () => {
    const res = await envd("/filesystem.Filesystem/Stat", {
      method: "POST",
      headers: { "content-type": "application/json", "content-encoding": "gzip" },
      body: gzipSync(JSON.stringify({ path: "bin-probe.txt" })),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { entry: { size: string } }).entry.size).toBe("5");
  });

  it("answers bad requests with Connect errors", async () => {
    const noToken = await envd("/process.Process/List", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
      token: "wrong",
    });
    expect(noToken.status).toBe(401);
    expect(await noToken.json()).toMatchObject({ code: "unauthenticated" });
    const unknown = await envd("/process.Process/Explode", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toMatchObject({ code: "unimplemented" });
    const badType = await envd("/process.Process/List", {
      method: "POST",
      headers: { "content-type": "text/plain" },
      body: "{}",
    });
    expect(badType.status).toBe(415);
    const badJson = await envd("/filesystem.Filesystem/Stat", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{not json",
    });
    expect(badJson.status).toBe(400);
    expect(await badJson.json()).toMatchObject({ code: "invalid_argument" });
    const missing = await envd("/filesystem.Filesystem/Stat", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ path: "nope/nope" }),
    });
    expect(missing.status).toBe(404);
    expect(await missing.json()).toMatchObject({ code: "not_found" });
  });

  it("never answers malformed envelopes and bodies with a 5xx (fuzzed)", async () => {
    const routes = [
      "/process.Process/Start",
      "/process.Process/Connect",
      "/process.Process/List",
      "/process.Process/SendInput",
      "/process.Process/SendSignal",
      "/process.Process/StreamInput",
      "/filesystem.Filesystem/Stat",
      "/filesystem.Filesystem/ListDir",
      "/filesystem.Filesystem/WatchDir",
      "/filesystem.Filesystem/Move",
    ];
    const types = [
      "application/json",
      "application/proto",
      "application/connect+json",
      "application/connect+proto",
      "application/grpc",
    ];
    const body = fc.oneof(
      fc.uint8Array({ maxLength: 64 }),
      // An envelope with random flags and a length that may lie.
      fc
        .tuple(
          fc.integer({ min: 0, max: 255 }),
          fc.integer({ min: 0, max: 2 ** 32 - 1 }),
          fc.uint8Array({ maxLength: 32 }),
        )
        .map(([flags, len, payload]) => {
          const b = Buffer.alloc(5 + payload.length);
          b[0] = flags;
          b.writeUInt32BE(len, 1);
          b.set(payload, 5);
          return new Uint8Array(b);
        }),
      fc.jsonValue().map((v) => new TextEncoder().encode(JSON.stringify(v))),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...routes),
        fc.constantFrom(...types),
        body,
        async (route, type, b) => {
          const ac = new AbortController();
          const timer = setTimeout(() => ac.abort(), 3000);
          try {
            const res = await envd(route, {
              method: "POST",
              headers: { "content-type": type, "connect-timeout-ms": "2000" },
              body: b,
              signal: ac.signal,
            });
            expect(res.status).toBeLessThan(500);
            await res.arrayBuffer().catch(() => undefined);
          } catch (err) {
            // A stream that began (a real process or watch) is cut by the abort: not a failure.
            if (!ac.signal.aborted) throw err;
          } finally {
            clearTimeout(timer);
          }
        },
      ),
      { numRuns: 150 },
    );
  }, 120_000);
});

describe("sandbox", () => {
  it("reports the envd version and health", async () => {
    expect((await envd("/health", { token: null })).status).toBe(204);
    const metrics = await envd("/metrics");
    expect(metrics.status).toBe(200);
    expect(await metrics.json()).toMatchObject({
      cpu_count: expect.any(Number),
      mem_total: expect.any(Number),
    });
    const info = await BaseSandbox.getInfo(sbx.sandboxId, opts);
    expect(info.sandboxId).toBe(sbx.sandboxId);
  });
});
