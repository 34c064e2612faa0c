/**
 * The E2B provider's processes, terminals, code contexts and full filesystem, through the real
 * `e2b` / `@e2b/code-interpreter` SDKs against the loopback fake (test/fakes/e2b.ts), whose
 * sandboxes run real processes, terminals and a stateful Python kernel in bubblewrap.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CodeResult, FilesystemEvent, SandboxInstance } from "@sandpit/sdk";
import { E2BProvider } from "@sandpit/sdk/e2b";
import { FakeE2B } from "../fakes/e2b.ts";
import { bwrapUsable } from "../fakes/sandbox-host.ts";
import { expectSandboxError } from "../contract/suite.ts";

const usable = await bwrapUsable();
const title = `E2B provider features${usable ? "" : " (skipped: bubblewrap is not available)"}`;

/** Polls `check` every 50 ms for up to 15 s. */
async function until(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe.skipIf(!usable)(title, () => {
  let fake: FakeE2B;
  let provider: E2BProvider;
  let sbx: SandboxInstance;

  beforeAll(async () => {
    fake = new FakeE2B();
    const url = await fake.start();
    provider = new E2BProvider({
      apiKey: fake.apiKey,
      apiUrl: url,
      sandboxUrl: url,
      domain: "sandbox.test",
    });
    sbx = await provider.create({ language: "python" });
  });
  afterAll(async () => {
    await sbx?.kill().catch(() => undefined);
    await fake?.close();
  });

  describe("background commands", () => {
    it("starts, lists with tag and start time, reconnects from a new client, and waits", async () => {
      const before = Date.now() - 1000;
      const h = await sbx.commands.run("echo started; read line; echo got:$line; exit 7", {
        background: true,
        tag: "job",
      });
      expect(h.pid).toBeGreaterThan(0);
      await until(() => h.stdout.includes("started"), "first output");
      const listed = (await sbx.commands.list()).find((p) => p.pid === h.pid);
      expect(listed).toMatchObject({ tag: "job", pty: false, cwd: "/mnt/user-data/workspace" });
      expect(listed!.command).toContain("echo started");
      expect(listed!.startedAt.getTime()).toBeGreaterThan(before);
      await h.disconnect();

      // Another client (a resumed instance) attaches and answers the prompt.
      const other = await provider.resume(sbx.sandboxId);
      let seen = "";
      const again = await other.commands.connect(h.pid, { onStdout: (d) => (seen += d) });
      expect(again.droppedBytes).toBe(-1); // envd keeps no output for a later attach
      await again.sendStdin("hello\n");
      const r = await again.wait();
      expect(r.exitCode).toBe(7);
      expect(seen).toBe("got:hello\n");
      expect((await sbx.commands.list()).some((p) => p.pid === h.pid)).toBe(false);
    });

    it("feeds stdin in chunks and closes it", async () => {
      const h = await sbx.commands.run("wc -c", { background: true, stdin: "abc" });
      await h.sendStdin(new Uint8Array([100, 101]));
      await h.closeStdin();
      expect((await h.wait()).stdout.trim()).toBe("5");
    });

    it("signals the process group and kills; a gone process is false to its handle, NOT_FOUND by pid", async () => {
      // In the fake the group's leader is bubblewrap, which a TERM ends (taking the command
      // with it), so the exit status says only that the signal arrived.
      const h = await sbx.commands.run("echo ready; while :; do sleep 0.1; done", {
        background: true,
      });
      await until(() => h.stdout.includes("ready"), "the loop");
      expect(await sbx.commands.kill(h.pid, "SIGTERM")).toBe(true);
      expect((await h.wait()).exitCode).not.toBe(0);
      const k = await sbx.commands.run("sleep 60", { background: true });
      expect(await k.kill()).toBe(true);
      await k.wait();
      expect(await k.kill()).toBe(false);
      // envd forgot it once it exited: by pid it is as unknown as any other.
      await expectSandboxError(sbx.commands.kill(k.pid), "NOT_FOUND");
      await expectSandboxError(sbx.commands.kill(k.pid, "SIGTERM"), "NOT_FOUND");
    });

    it("refuses bad input and unknown processes", async () => {
      await expectSandboxError(sbx.commands.connect(999_999_9), "NOT_FOUND");
      await expectSandboxError(sbx.commands.kill(-1), "INVALID_ARGUMENT");
      await expectSandboxError(sbx.commands.kill(1, "SIGFOO" as "SIGINT"), "INVALID_ARGUMENT");
      await expectSandboxError(sbx.commands.run("", { background: true }), "INVALID_ARGUMENT");
    });

    it("an aborted foreground run is killed", async () => {
      const ac = new AbortController();
      const p = sbx.commands.run("sleep 30", { signal: ac.signal });
      setTimeout(() => ac.abort(), 300);
      const started = Date.now();
      await expect(p).rejects.toMatchObject({ name: "AbortError" });
      expect(Date.now() - started).toBeLessThan(10_000);
    });
  });

  describe("terminals", () => {
    it("runs a shell on a pty, resizes it, and reports its exit", async () => {
      let out = "";
      const term = await sbx.pty.create({
        cols: 80,
        rows: 24,
        onData: (d) => (out += new TextDecoder().decode(d)),
      });
      await term.sendInput("stty size\n");
      await until(() => out.includes("24 80"), "the first size");
      await term.resize({ cols: 120, rows: 40 });
      await term.sendInput("stty size; test -t 0 && echo on-a-tty\n");
      await until(() => out.includes("40 120"), "the new size");
      await until(() => out.includes("\non-a-tty"), "the tty check");
      expect((await sbx.commands.list()).find((p) => p.pid === term.pid)?.pty).toBe(true);
      await term.sendInput("exit 5\n");
      expect(await term.wait()).toEqual({ exitCode: 5 });
    });

    it("runs a given command, reconnects, and kills", async () => {
      let out = "";
      const term = await sbx.pty.create({
        cols: 80,
        rows: 24,
        command: "cat",
        onData: (d) => (out += new TextDecoder().decode(d)),
      });
      await term.disconnect();
      let again = "";
      const h = await sbx.pty.connect(term.pid, {
        onData: (d) => (again += new TextDecoder().decode(d)),
      });
      await sbx.pty.sendInput(term.pid, "echo-me\n");
      await until(() => again.includes("echo-me"), "the echo");
      expect(await h.kill()).toBe(true);
      await h.wait();
      expect(await sbx.pty.kill(term.pid)).toBe(false);
      await expectSandboxError(sbx.pty.resize(term.pid, { cols: 0, rows: 1 }), "INVALID_ARGUMENT");
    });
  });

  describe("code contexts", () => {
    it("keeps state across cells and returns rich results", async () => {
      const ctx = await sbx.createCodeContext();
      expect(ctx).toMatchObject({ language: "python", cwd: "/mnt/user-data/workspace" });
      expect((await sbx.listCodeContexts()).map((c) => c.id)).toContain(ctx.id);
      await sbx.executeCode("x = 41\nimport math", "python", { context: ctx });
      const streamed: CodeResult[] = [];
      let out = "";
      const r = await sbx.executeCode(
        [
          "class Page:",
          "    def _repr_html_(self): return '<b>hi</b>'",
          "    def _repr_png_(self): return b'\\x89PNG'",
          "display(Page())",
          "print('side')",
          "{'answer': x + 1, 'pi': round(math.pi, 2)}",
        ].join("\n"),
        "python",
        { context: ctx.id, onResult: (x) => streamed.push(x), onStdout: (d) => (out += d) },
      );
      expect(r.success).toBe(true);
      expect(out).toBe("side\n");
      expect(r.results).toEqual(streamed);
      expect(r.results[0]).toMatchObject({ isMainResult: false, html: "<b>hi</b>" });
      expect(Buffer.from(r.results[0]!.png!, "base64").toString("latin1")).toBe("\x89PNG");
      expect(r.results[1]).toEqual({ isMainResult: true, text: "{'answer': 42, 'pi': 3.14}" });

      await sbx.removeCodeContext(ctx);
      await sbx.removeCodeContext(ctx); // already gone: fine
      await expectSandboxError(sbx.executeCode("x", "python", { context: ctx.id }), "NOT_FOUND");
    });

    it("interrupts a cell on abort and keeps the context", async () => {
      const ctx = await sbx.createCodeContext({ language: "python" });
      await sbx.executeCode("kept = 'yes'", "python", { context: ctx });
      const ac = new AbortController();
      const p = sbx.executeCode("import time\ntime.sleep(30)", "python", {
        context: ctx,
        signal: ac.signal,
      });
      setTimeout(() => ac.abort(), 500);
      await expect(p).rejects.toMatchObject({ name: "AbortError" });
      const r = await sbx.executeCode("kept", "python", { context: ctx });
      expect(r.results[0]?.text).toBe("'yes'");
      await expectSandboxError(
        sbx.executeCode("1", "typescript", { context: ctx }),
        "INVALID_ARGUMENT",
      );
    });
  });

  describe("filesystem", () => {
    it("renames, stats, appends and lists with depth", async () => {
      await sbx.filesystem.write("fs/a/b/c.txt", "one");
      await sbx.filesystem.rename("fs/a/b/c.txt", "fs/a/moved.txt");
      expect(await sbx.filesystem.exists("fs/a/b/c.txt")).toBe(false);
      await sbx.filesystem.append("fs/a/moved.txt", "+two");
      await sbx.filesystem.append("fs/a/new.txt", new Uint8Array([104, 105]));
      expect(await sbx.filesystem.read("fs/a/moved.txt")).toBe("one+two");
      expect(await sbx.filesystem.read("fs/a/new.txt")).toBe("hi");
      const st = await sbx.filesystem.stat("fs/a/moved.txt");
      expect(st).toMatchObject({ name: "moved.txt", type: "file", size: 7 });
      expect((await sbx.filesystem.stat("fs/a")).type).toBe("dir");
      await expectSandboxError(sbx.filesystem.stat("fs/none"), "NOT_FOUND");
      const one = (await sbx.filesystem.list("fs")).map((e) => e.path);
      expect(one).toEqual(["/mnt/user-data/workspace/fs/a"]);
      const deep = (await sbx.filesystem.list("fs", { depth: 3 })).map((e) => e.path).sort();
      expect(deep).toEqual([
        "/mnt/user-data/workspace/fs/a",
        "/mnt/user-data/workspace/fs/a/b",
        "/mnt/user-data/workspace/fs/a/moved.txt",
        "/mnt/user-data/workspace/fs/a/new.txt",
      ]);
      await expectSandboxError(sbx.filesystem.list("fs", { depth: 0 }), "INVALID_ARGUMENT");
      await expectSandboxError(sbx.filesystem.rename("fs/a", "/etc/x"), "INVALID_ARGUMENT");
    });

    it("globs and greps with strict quoting", async () => {
      await sbx.filesystem.write("g/x.ts", "const a = 1;\nconst b = 'it''s';\n");
      await sbx.filesystem.write("g/sub/y.ts", "let A = 2;\n");
      await sbx.filesystem.write("g/sub/z.md", "const in markdown\n");
      expect(await sbx.filesystem.glob("g/**/*.ts")).toEqual([
        "/mnt/user-data/workspace/g/sub/y.ts",
        "/mnt/user-data/workspace/g/x.ts",
      ]);
      expect(await sbx.filesystem.glob("*.ts", { cwd: "g" })).toEqual([
        "/mnt/user-data/workspace/g/x.ts",
      ]);
      const m = await sbx.filesystem.grep("^const", { path: "g", glob: "*.ts" });
      expect(m.map((x) => [x.path, x.line])).toEqual([
        ["/mnt/user-data/workspace/g/x.ts", 1],
        ["/mnt/user-data/workspace/g/x.ts", 2],
      ]);
      const lit = await sbx.filesystem.grep("'it''s'", { path: "g", literal: true });
      expect(lit).toEqual([
        { path: "/mnt/user-data/workspace/g/x.ts", line: 2, text: "const b = 'it''s';" },
      ]);
      expect(
        (await sbx.filesystem.grep("let a", { path: "g", ignoreCase: true })).map((x) => x.text),
      ).toEqual(["let A = 2;"]);
      expect(await sbx.filesystem.grep("$(touch /tmp/x)", { path: "g" })).toEqual([]);
      expect(await sbx.filesystem.grep("const", { path: "g", maxMatches: 1 })).toHaveLength(1);
    });

    it("watches a directory", async () => {
      await sbx.filesystem.mkdir("w");
      const events: FilesystemEvent[] = [];
      const w = await sbx.filesystem.watch("w", (e) => events.push(e));
      for (let i = 0; i < 20; i++) await sbx.filesystem.write(`w/f${i}.txt`, "x");
      await sbx.filesystem.remove("w/f0.txt");
      await until(
        () => events.some((e) => e.type === "remove" && e.path.endsWith("/w/f0.txt")),
        "the remove event",
      );
      const created = new Set(events.filter((e) => e.type === "create").map((e) => e.path));
      for (let i = 0; i < 20; i++)
        expect(created).toContain(`/mnt/user-data/workspace/w/f${i}.txt`);
      await w.stop();
    });

    it("streams a file in and out", async () => {
      const chunk = new Uint8Array(1 << 20).fill(7);
      async function* gen() {
        for (let i = 0; i < 8; i++) yield chunk;
      }
      await sbx.filesystem.writeStream("big/stream.bin", gen());
      expect((await sbx.filesystem.stat("big/stream.bin")).size).toBe(8 << 20);
      expect((await sbx.filesystem.list("big")).map((e) => e.name)).toEqual(["stream.bin"]);
      let total = 0;
      const reader = (await sbx.filesystem.readStream("big/stream.bin")).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        total += value.byteLength;
      }
      expect(total).toBe(8 << 20);
      await expectSandboxError(sbx.filesystem.readStream("big/none.bin"), "NOT_FOUND");
    });
  });
});
