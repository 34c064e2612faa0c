/**
 * The Daytona provider's filesystem additions through the real `@daytonaio/sdk` against the
 * loopback fake (test/fakes/daytona.ts), and the refusal (NOT_SUPPORTED, naming the feature)
 * of what this provider does not implement.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SandboxInstance } from "@sandpit/sdk";
import { DaytonaProvider } from "@sandpit/sdk/daytona";
import { FakeDaytona } from "../fakes/daytona.ts";
import { bwrapUsable } from "../fakes/sandbox-host.ts";
import { expectSandboxError } from "../contract/suite.ts";

const usable = await bwrapUsable();
const title = `Daytona provider features${usable ? "" : " (skipped: bubblewrap is not available)"}`;

describe.skipIf(!usable)(title, () => {
  let fake: FakeDaytona;
  let sbx: SandboxInstance;

  beforeAll(async () => {
    fake = new FakeDaytona();
    await fake.start();
    const provider = new DaytonaProvider({
      apiKey: fake.apiKey,
      apiUrl: fake.apiUrl,
      target: "us",
      useDeprecatedPolling: true,
    });
    sbx = await provider.create({ language: "python" });
  });
  afterAll(async () => {
    await sbx?.kill().catch(() => undefined);
    await fake?.close();
  });

  it("renames, stats, appends and lists with depth", async () => {
    await sbx.filesystem.write("fs/a/b/c.txt", "one");
    await sbx.filesystem.rename("fs/a/b/c.txt", "fs/a/moved.txt");
    expect(await sbx.filesystem.exists("fs/a/b/c.txt")).toBe(false);
    await sbx.filesystem.append("fs/a/moved.txt", "+two");
    await sbx.filesystem.append("fs/a/new.txt", new Uint8Array([104, 105]));
    expect(await sbx.filesystem.read("fs/a/moved.txt")).toBe("one+two");
    expect(await sbx.filesystem.read("fs/a/new.txt")).toBe("hi");
    expect(await sbx.filesystem.stat("fs/a/moved.txt")).toMatchObject({
      name: "moved.txt",
      path: "/mnt/user-data/workspace/fs/a/moved.txt",
      type: "file",
      size: 7,
    });
    expect((await sbx.filesystem.stat("fs/a")).type).toBe("dir");
    await expectSandboxError(sbx.filesystem.stat("fs/none"), "NOT_FOUND");
    expect((await sbx.filesystem.list("fs")).map((e) => e.path)).toEqual([
      "/mnt/user-data/workspace/fs/a",
    ]);
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

  it("globs (searchFiles, then the whole pattern) and greps", async () => {
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
    expect(await sbx.filesystem.glob("/mnt/user-data/workspace/g/sub/*")).toEqual([
      "/mnt/user-data/workspace/g/sub/y.ts",
      "/mnt/user-data/workspace/g/sub/z.md",
    ]);
    const m = await sbx.filesystem.grep("^const", { path: "g", glob: "*.ts" });
    expect(m.map((x) => [x.path, x.line])).toEqual([
      ["/mnt/user-data/workspace/g/x.ts", 1],
      ["/mnt/user-data/workspace/g/x.ts", 2],
    ]);
    expect(await sbx.filesystem.grep("'it''s'", { path: "g", literal: true })).toEqual([
      { path: "/mnt/user-data/workspace/g/x.ts", line: 2, text: "const b = 'it''s';" },
    ]);
    expect(
      (await sbx.filesystem.grep("let a", { path: "g", ignoreCase: true })).map((x) => x.text),
    ).toEqual(["let A = 2;"]);
  });

  it("streams a file in (whole or not at all) and out", async () => {
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

  it("kills an aborted command and cell (the session is deleted)", async () => {
    const ac = new AbortController();
    const p = sbx.commands.run("sleep 30", { signal: ac.signal });
    setTimeout(() => ac.abort(), 500);
    const started = Date.now();
    await expect(p).rejects.toMatchObject({ name: "AbortError" });
    const ac2 = new AbortController();
    const c = sbx.executeCode("import time\ntime.sleep(30)", "python", { signal: ac2.signal });
    setTimeout(() => ac2.abort(), 500);
    await expect(c).rejects.toMatchObject({ name: "AbortError" });
    expect(Date.now() - started).toBeLessThan(20_000);
    expect((await sbx.commands.run("echo alive")).stdout).toBe("alive\n");
  });

  it("runs background commands as sessions: output, stdin, list, reconnect with replay, kill", async () => {
    let seen = "";
    const h = await sbx.commands.run(
      'echo started; read line; echo "got $line"; echo oops >&2; exit 4',
      { background: true, tag: "reader", onStdout: (d) => (seen += d) },
    );
    expect(h.pid).toBeGreaterThan(0);
    const listed = (await sbx.commands.list()).find((p) => p.pid === h.pid);
    expect(listed).toMatchObject({ tag: "reader", pty: false, cwd: "/mnt/user-data/workspace" });
    expect(listed?.command).toContain("read line");
    await h.sendStdin("hello\n");
    expect(await h.wait()).toEqual({
      exitCode: 4,
      stdout: "started\ngot hello\n",
      stderr: "oops\n",
    });
    expect(seen).toBe("started\ngot hello\n");
    expect((await sbx.commands.list()).find((p) => p.pid === h.pid)?.exitCode).toBe(4);
    // Another client replays the whole log, from an offset too.
    const again = await sbx.commands.connect(h.pid, { offset: 8 });
    expect(await again.wait()).toMatchObject({ exitCode: 4, stdout: "got hello\n" });
    await expectSandboxError(h.sendStdin("late"), "CONFLICT");
    expect(await h.kill()).toBe(false);

    const beat = `bg-beat-${Date.now()}`;
    const loop = await sbx.commands.run(
      `(while :; do date +%s%N > ${beat}; sleep 0.05; done) & while :; do sleep 1; done`,
      { background: true },
    );
    for (let i = 0; i < 100 && !(await sbx.filesystem.exists(beat)); i++)
      await new Promise((r) => setTimeout(r, 50));
    expect(await sbx.commands.kill(loop.pid, "SIGTERM")).toBe(true);
    expect((await loop.wait()).exitCode).toBe(143);
    const then = await sbx.filesystem.read(beat);
    await new Promise((r) => setTimeout(r, 500));
    expect(await sbx.filesystem.read(beat), "the group's background child died too").toBe(then);
    await expectSandboxError(sbx.commands.connect(123), "NOT_FOUND");
    await expectSandboxError(sbx.commands.connect(-1), "INVALID_ARGUMENT");
  });

  it("refuses what it does not implement with NOT_SUPPORTED naming the feature", async () => {
    const refused = [
      sbx.commands.closeStdin(1),
      sbx.createCodeContext(),
      sbx.listCodeContexts(),
      sbx.removeCodeContext("x"),
      sbx.filesystem.watch("w", () => undefined),
    ];
    for (const p of refused) {
      const err = await expectSandboxError(p, "NOT_SUPPORTED");
      expect(err.message).toMatch(/Daytona/);
    }
    // A cell for a context is refused too, saying why, rather than run in a fresh interpreter.
    const cell = await expectSandboxError(
      sbx.executeCode("print(1)", "python", { context: "x" }),
      "NOT_SUPPORTED",
    );
    expect(cell.message).toMatch(/code contexts .*Python-only.*no cell values/);
  });
});
