/**
 * The E2B conformance suite, TypeScript half: the official `e2b` and `@e2b/code-interpreter`
 * SDKs (pinned in package.json), used as E2B's published SDK reference describes them, against
 * any E2B-speaking target (targets.ts). Each test asserts what the reference promises: return
 * values, the SDK's own error classes, streamed callbacks. The Python half
 * (conformance_test.py) covers the same ground with the Python SDKs.
 *
 * Runs: test/e2b-compat/fake.test.ts (the loopback fake, no cluster) and
 * test/provisioner/e2b-sdk.test.ts (Sandpit's /e2b API on the cluster).
 */
import { createCipheriv, createHash, randomBytes, randomUUID } from "node:crypto";
import { Sandbox as CodeInterpreter } from "@e2b/code-interpreter";
import {
  AuthenticationError,
  type SandboxOpts,
  CommandExitError,
  FileType,
  type FilesystemEvent,
  NotFoundError,
  RateLimitError,
  Sandbox,
  SandboxError,
  TimeoutError,
} from "e2b";
import { afterAll, beforeAll, describe, expect, it, type TestContext } from "vitest";
import { type E2BConnection, type E2BTarget, type Feature, connectionOpts } from "./targets.ts";

const HOME = "/home/user";
const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
const RICH = ["pandas==3.1.1", "matplotlib==3.11.2"];
const MiB = 1024 * 1024;

/** Polls `check` every 500 ms until it is true, for at most `ms`. */
async function until(what: string, ms: number, check: () => Promise<boolean>): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    if (await check()) return;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** Deterministic incompressible bytes (AES-CTR keyed by the seed), so a mismatch reproduces. */
function pattern(size: number, seed: string): Buffer {
  const key = createHash("sha256").update(seed).digest();
  return createCipheriv("aes-256-ctr", key, Buffer.alloc(16)).update(Buffer.alloc(size));
}

const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

export function e2bConformance(target: E2BTarget, connection: () => E2BConnection): void {
  const opts = (apiKey?: string) => connectionOpts(connection(), apiKey);
  const run = randomUUID().slice(0, 8);
  /** Skips the running test, visibly, when the target lacks `feature`. */
  const need = (ctx: TestContext, feature: Feature) => {
    const reason = target.lacks[feature];
    if (reason !== undefined) ctx.skip(`${target.name} lacks ${feature}: ${reason}`);
  };
  /** Every sandbox a test makes is killed at the end of the file, whatever happened. */
  const made: Sandbox[] = [];
  const create = async (o: SandboxOpts = {}) => {
    const sbx = await Sandbox.create({ ...opts(), timeoutMs: 600_000, ...o });
    made.push(sbx);
    return sbx;
  };

  describe(`E2B conformance (JS SDK) against ${target.name}`, () => {
    afterAll(async () => {
      await Promise.all(made.map((s) => s.kill().catch(() => false)));
    });

    describe("lifecycle", () => {
      it("creates a sandbox from the default template and reports its info", async () => {
        const sbx = await create({ metadata: { suite: run, case: "info" } });
        expect(sbx.sandboxId).toMatch(/\S/);
        const info = await sbx.getInfo();
        expect(info.sandboxId).toBe(sbx.sandboxId);
        expect(info.metadata).toEqual({ suite: run, case: "info" });
        expect(info.state).toBe("running");
        expect(info.startedAt).toBeInstanceOf(Date);
        expect(info.endAt.getTime()).toBeGreaterThan(info.startedAt.getTime());
        expect(await sbx.isRunning()).toBe(true);
      });

      it("connects to a running sandbox by id and sees its files", async () => {
        const sbx = await create();
        await sbx.files.write(`${HOME}/mark.txt`, "here");
        const again = await Sandbox.connect(sbx.sandboxId, opts());
        expect(again.sandboxId).toBe(sbx.sandboxId);
        expect(await again.files.read(`${HOME}/mark.txt`)).toBe("here");
      });

      it("lists sandboxes by metadata, a page at a time", async () => {
        const tag = `list-${run}`;
        const [a, b, c] = await Promise.all(
          ["1", "2", "3"].map((n) => create({ metadata: { tag, n } })),
        );
        const all = Sandbox.list({ ...opts(), query: { metadata: { tag } } });
        const ids = (await all.nextItems()).map((s) => s.sandboxId).sort();
        expect(ids).toEqual([a!, b!, c!].map((s) => s.sandboxId).sort());
        const one = await Sandbox.list({
          ...opts(),
          query: { metadata: { tag, n: "2" } },
        }).nextItems();
        expect(one.map((s) => s.sandboxId)).toEqual([b!.sandboxId]);
        expect(one[0]!.metadata).toEqual({ tag, n: "2" });

        const pages = Sandbox.list({ ...opts(), query: { metadata: { tag } }, limit: 2 });
        const first = await pages.nextItems();
        expect(first).toHaveLength(2);
        expect(pages.hasNext).toBe(true);
        const second = await pages.nextItems();
        expect(second).toHaveLength(1);
        expect(pages.hasNext).toBe(false);
        expect([...first, ...second].map((s) => s.sandboxId).sort()).toEqual(ids);
      });

      it("sets the timeout: endAt moves, and the sandbox is gone once it passes", async () => {
        const sbx = await create();
        await sbx.setTimeout(120_000);
        const later = (await sbx.getInfo()).endAt.getTime();
        expect(Math.abs(later - (Date.now() + 120_000))).toBeLessThan(30_000);
        await sbx.setTimeout(3_000);
        expect((await sbx.getInfo()).endAt.getTime()).toBeLessThan(later - 60_000);
        await until("the sandbox to expire", 120_000, async () => !(await sbx.isRunning()));
        const listed = await Sandbox.list(opts()).nextItems();
        expect(listed.map((s) => s.sandboxId)).not.toContain(sbx.sandboxId);
        await expect(Sandbox.connect(sbx.sandboxId, opts())).rejects.toBeInstanceOf(NotFoundError);
      }, 180_000);

      it("pauses and resumes by connect, keeping files", async (ctx) => {
        need(ctx, "pause");
        const sbx = await create({ metadata: { tag: `pause-${run}` } });
        await sbx.files.write(`${HOME}/kept.txt`, "kept across pause");
        expect(await sbx.pause()).toBe(true);
        expect((await sbx.getInfo()).state).toBe("paused");
        const paused = await Sandbox.list({
          ...opts(),
          query: { metadata: { tag: `pause-${run}` }, state: ["paused"] },
        }).nextItems();
        expect(paused.map((s) => s.sandboxId)).toEqual([sbx.sandboxId]);
        expect(await Sandbox.pause(sbx.sandboxId, opts())).toBe(false);

        const back = await Sandbox.connect(sbx.sandboxId, opts());
        expect((await back.getInfo()).state).toBe("running");
        expect(await back.files.read(`${HOME}/kept.txt`)).toBe("kept across pause");
        expect((await back.commands.run("echo alive")).stdout).toBe("alive\n");
      }, 240_000);

      it("auto-pauses on timeout when asked to, and resumes with its files", async (ctx) => {
        need(ctx, "pause");
        const sbx = await create({ timeoutMs: 4_000, lifecycle: { onTimeout: "pause" } });
        await sbx.files.write(`${HOME}/auto.txt`, "auto");
        await until(
          "the sandbox to auto-pause",
          120_000,
          async () => (await sbx.getInfo()).state === "paused",
        );
        const back = await Sandbox.connect(sbx.sandboxId, { ...opts(), timeoutMs: 600_000 });
        expect(await back.files.read(`${HOME}/auto.txt`)).toBe("auto");
      }, 240_000);

      it("kills: the sandbox stops, is no longer listed, and a second kill says false", async () => {
        const sbx = await create({ metadata: { tag: `kill-${run}` } });
        const bg = await sbx.commands.run("sleep 600", { background: true });
        expect(await sbx.kill()).toBe(true);
        // Killing a sandbox ends its streams: the handle's wait does not hang.
        await expect(bg.wait()).rejects.toBeInstanceOf(Error);
        expect(await sbx.isRunning()).toBe(false);
        const listed = await Sandbox.list({
          ...opts(),
          query: { metadata: { tag: `kill-${run}` } },
        }).nextItems();
        expect(listed).toEqual([]);
        expect(await Sandbox.kill(sbx.sandboxId, opts())).toBe(false);
      });
    });

    describe("kill ends streams", () => {
      it("a terminal, a directory watch and a running code cell end when their sandbox is killed", async () => {
        const ci = await CodeInterpreter.create({ ...opts(), timeoutMs: 600_000 });
        made.push(ci);
        const term = await ci.pty.create({ cols: 80, rows: 24, onData: () => undefined });
        let watchEnded!: () => void;
        const watchEnd = new Promise<void>((r) => (watchEnded = r));
        await ci.files.watchDir(HOME, () => undefined, { onExit: () => watchEnded() });
        await ci.runCode("1"); // the default context exists: the next cell runs at once
        // Every outcome is tracked from the moment its call starts: the cell may be cut off
        // while kill() is still in flight, and an untracked rejection is an unhandled one.
        const ended: string[] = [];
        const track = (name: string, p: Promise<unknown>) =>
          p.then(
            () => ended.push(`${name}:resolved`),
            () => ended.push(`${name}:rejected`),
          );
        // A cell cut off either rejects (the connection dropped) or ends with an error.
        const cell = track(
          "cell",
          ci.runCode("import time; time.sleep(600)", { timeoutMs: 0 }).then((r) => {
            if (!r.error) throw new Error("the cell ended without an error");
            throw new Error(r.error.name);
          }),
        );
        const pty = track("pty", term.wait());
        const watch = track("watch", watchEnd);
        await new Promise((r) => setTimeout(r, 1_000));
        expect(ended).toEqual([]); // nothing ended before the kill
        expect(await ci.kill()).toBe(true);
        // None hangs: each stream ends, the SDK raising its error (or, for a watch, its onExit).
        await Promise.race([
          Promise.all([pty, cell, watch]),
          new Promise((r) => setTimeout(r, 60_000)),
        ]);
        expect(ended.sort()).toEqual(["cell:rejected", "pty:rejected", "watch:resolved"]);
      }, 120_000);
    });

    describe("commands", () => {
      let sbx: Sandbox;
      beforeAll(async () => {
        sbx = await create({ envs: { FROM_CREATE: "sandbox-wide", OVERRIDDEN: "create" } });
      });

      it("runs in the foreground: stdout, stderr, exit code", async () => {
        const r = await sbx.commands.run("echo out; echo err >&2");
        expect(r).toMatchObject({ stdout: "out\n", stderr: "err\n", exitCode: 0 });
      });

      it("raises CommandExitError for a non-zero exit, carrying the result", async () => {
        const err = await sbx.commands.run("echo bad >&2; exit 3").catch((e: unknown) => e);
        expect(err).toBeInstanceOf(CommandExitError);
        expect(err).toMatchObject({ exitCode: 3, stderr: "bad\n" });
      });

      it("merges the sandbox's envs with the command's (the command wins)", async () => {
        const r = await sbx.commands.run('echo "$FROM_CREATE $OVERRIDDEN $ONLY_HERE"', {
          envs: { OVERRIDDEN: "command", ONLY_HERE: "yes" },
        });
        expect(r.stdout).toBe("sandbox-wide command yes\n");
      });

      it("runs in the home directory by default and in cwd when given", async () => {
        expect((await sbx.commands.run("pwd")).stdout).toBe(`${HOME}\n`);
        await sbx.files.makeDir(`${HOME}/wd`);
        expect((await sbx.commands.run("pwd", { cwd: `${HOME}/wd` })).stdout).toBe(`${HOME}/wd\n`);
      });

      it("streams output to callbacks while the command runs", async () => {
        const seen: string[] = [];
        const go = `${HOME}/go-${randomUUID()}`;
        // The command waits for a file the callback writes: it can only finish if the first
        // line reached us while it was still running.
        const r = await sbx.commands.run(
          `echo first; for i in $(seq 1 300); do [ -e ${go} ] && break; sleep 0.1; done; [ -e ${go} ] && echo second`,
          {
            onStdout: async (line) => {
              seen.push(line);
              if (line.includes("first")) await sbx.files.write(go, "");
            },
          },
        );
        expect(r.stdout).toBe("first\nsecond\n");
        expect(seen.join("")).toBe("first\nsecond\n");
      });

      it("runs in the background with a handle: pid, list, wait", async () => {
        const h = await sbx.commands.run("sleep 0.5; echo done", { background: true });
        expect(h.pid).toBeGreaterThan(0);
        expect((await sbx.commands.list()).map((p) => p.pid)).toContain(h.pid);
        const r = await h.wait();
        expect(r).toMatchObject({ exitCode: 0, stdout: "done\n" });
      });

      it("connects to a running background command by pid", async () => {
        const go = `${HOME}/go-${randomUUID()}`;
        const h = await sbx.commands.run(
          `for i in $(seq 1 300); do [ -e ${go} ] && break; sleep 0.1; done; echo after`,
          { background: true },
        );
        const seen: string[] = [];
        const again = await sbx.commands.connect(h.pid, { onStdout: (l) => void seen.push(l) });
        await sbx.files.write(go, "");
        const r = await again.wait();
        expect(r.exitCode).toBe(0);
        expect(seen.join("")).toBe("after\n");
      });

      it("feeds stdin, then closes it", async () => {
        const h = await sbx.commands.run("cat; echo end", { background: true, stdin: true });
        await sbx.commands.sendStdin(h.pid, "hello\n");
        await sbx.commands.sendStdin(h.pid, new TextEncoder().encode("bytes\n"));
        await sbx.commands.closeStdin(h.pid);
        expect((await h.wait()).stdout).toBe("hello\nbytes\nend\n");
      });

      it("kills a background command by handle and by pid", async () => {
        const a = await sbx.commands.run("sleep 600", { background: true });
        expect(await a.kill()).toBe(true);
        const err = await a.wait().catch((e: unknown) => e);
        expect(err).toBeInstanceOf(CommandExitError);
        const b = await sbx.commands.run("sleep 600", { background: true });
        expect(await sbx.commands.kill(b.pid)).toBe(true);
        await expect(b.wait()).rejects.toBeInstanceOf(CommandExitError);
        const pids = (await sbx.commands.list()).map((p) => p.pid);
        expect(pids).not.toContain(a.pid);
        expect(pids).not.toContain(b.pid);
        expect(await sbx.commands.kill(b.pid)).toBe(false);
      });
    });

    describe("pty", () => {
      let sbx: Sandbox;
      beforeAll(async () => {
        sbx = await create();
      });

      it("takes input, resizes, and exits with the shell's code", async () => {
        let out = "";
        const decoder = new TextDecoder();
        const term = await sbx.pty.create({
          cols: 80,
          rows: 24,
          onData: (d) => void (out += decoder.decode(d, { stream: true })),
        });
        const send = (s: string) => sbx.pty.sendInput(term.pid, new TextEncoder().encode(s));
        await send("echo $((6 * 7))\n");
        await until("the echo", 30_000, async () => out.includes("42"));
        await sbx.pty.resize(term.pid, { cols: 101, rows: 33 });
        await send("stty size\n");
        await until("stty size", 30_000, async () => out.includes("33 101"));
        await send("exit 7\n");
        const err = await term.wait().catch((e: unknown) => e);
        expect(err).toBeInstanceOf(CommandExitError);
        expect((err as CommandExitError).exitCode).toBe(7);
      });

      it("a clean exit resolves, and kill ends a terminal", async () => {
        const a = await sbx.pty.create({ cols: 80, rows: 24, onData: () => undefined });
        await sbx.pty.sendInput(a.pid, new TextEncoder().encode("exit\n"));
        expect((await a.wait()).exitCode).toBe(0);
        const b = await sbx.pty.create({ cols: 80, rows: 24, onData: () => undefined });
        expect(await sbx.pty.kill(b.pid)).toBe(true);
        await expect(b.wait()).rejects.toBeInstanceOf(CommandExitError);
      });
    });

    describe("files", () => {
      let sbx: Sandbox;
      beforeAll(async () => {
        sbx = await create();
      });

      it("writes and reads text, and bytes unchanged", async () => {
        await sbx.files.write(`${HOME}/t/hello.txt`, "héllo\n");
        expect(await sbx.files.read(`${HOME}/t/hello.txt`)).toBe("héllo\n");
        const bytes = new Uint8Array(256).map((_, i) => i);
        await sbx.files.write(`${HOME}/t/all.bin`, bytes.buffer);
        const back = await sbx.files.read(`${HOME}/t/all.bin`, { format: "bytes" });
        expect([...back]).toEqual([...bytes]);
      });

      it("writes several files at once", async () => {
        const info = await sbx.files.write([
          { path: `${HOME}/many/a.txt`, data: "a" },
          { path: `${HOME}/many/b.txt`, data: "b" },
        ]);
        expect(info.map((i) => i.path).sort()).toEqual([
          `${HOME}/many/a.txt`,
          `${HOME}/many/b.txt`,
        ]);
        expect(await sbx.files.read(`${HOME}/many/b.txt`)).toBe("b");
      });

      it("lists a directory to a depth", async () => {
        await sbx.files.write(`${HOME}/tree/a/b/c.txt`, "deep");
        await sbx.files.write(`${HOME}/tree/top.txt`, "top");
        const one = await sbx.files.list(`${HOME}/tree`);
        expect(one.map((e) => [e.name, e.type]).sort()).toEqual([
          ["a", FileType.DIR],
          ["top.txt", FileType.FILE],
        ]);
        const all = await sbx.files.list(`${HOME}/tree`, { depth: 3 });
        expect(all.map((e) => e.path).sort()).toEqual(
          ["a", "a/b", "a/b/c.txt", "top.txt"].map((p) => `${HOME}/tree/${p}`),
        );
      });

      it("says whether a path exists, and raises NotFoundError reading a missing file", async () => {
        await sbx.files.write(`${HOME}/there.txt`, "x");
        expect(await sbx.files.exists(`${HOME}/there.txt`)).toBe(true);
        expect(await sbx.files.exists(`${HOME}/not-there.txt`)).toBe(false);
        await expect(sbx.files.read(`${HOME}/not-there.txt`)).rejects.toBeInstanceOf(NotFoundError);
      });

      it("renames, removes and makes directories", async () => {
        await sbx.files.write(`${HOME}/old.txt`, "moved");
        const moved = await sbx.files.rename(`${HOME}/old.txt`, `${HOME}/new.txt`);
        expect(moved.path).toBe(`${HOME}/new.txt`);
        expect(await sbx.files.exists(`${HOME}/old.txt`)).toBe(false);
        expect(await sbx.files.read(`${HOME}/new.txt`)).toBe("moved");
        await sbx.files.remove(`${HOME}/new.txt`);
        expect(await sbx.files.exists(`${HOME}/new.txt`)).toBe(false);
        expect(await sbx.files.makeDir(`${HOME}/made/deep`)).toBe(true);
        expect(await sbx.files.makeDir(`${HOME}/made/deep`)).toBe(false);
        expect((await sbx.files.getInfo(`${HOME}/made/deep`)).type).toBe(FileType.DIR);
      });

      it("reports a file's info", async () => {
        await sbx.files.write(`${HOME}/info.txt`, "12345");
        await sbx.commands.run(`chmod 640 ${HOME}/info.txt`);
        const info = await sbx.files.getInfo(`${HOME}/info.txt`);
        expect(info).toMatchObject({
          name: "info.txt",
          path: `${HOME}/info.txt`,
          type: FileType.FILE,
          size: 5,
          mode: 0o640,
          permissions: "-rw-r-----",
        });
        expect(info.modifiedTime).toBeInstanceOf(Date);
        expect(Math.abs(info.modifiedTime!.getTime() - Date.now())).toBeLessThan(600_000);
        await expect(sbx.files.getInfo(`${HOME}/nope`)).rejects.toBeInstanceOf(NotFoundError);
      });

      it("watches a directory: create, write and remove events", async () => {
        const dir = `${HOME}/watched-${run}`;
        await sbx.files.makeDir(dir);
        const events: FilesystemEvent[] = [];
        const w = await sbx.files.watchDir(dir, (e) => void events.push(e));
        try {
          await sbx.files.write(`${dir}/w.txt`, "1");
          await sbx.commands.run(`echo more >> ${dir}/w.txt`);
          await sbx.files.remove(`${dir}/w.txt`);
          await until("a remove event", 30_000, async () =>
            events.some((e) => e.type === "remove" && e.name === "w.txt"),
          );
        } finally {
          await w.stop();
        }
        const kinds = new Set(events.filter((e) => e.name === "w.txt").map((e) => e.type));
        expect(kinds).toContain("create");
        expect(kinds).toContain("write");
      });

      it("uploads and downloads 100 MiB unchanged", async () => {
        const data = pattern(100 * MiB, run);
        const path = `${HOME}/big.bin`;
        await sbx.files.write(path, new Blob([data]));
        expect((await sbx.files.getInfo(path)).size).toBe(data.length);
        const stream = await sbx.files.read(path, { format: "stream" });
        const hash = createHash("sha256");
        let got = 0;
        for await (const chunk of stream) {
          hash.update(chunk);
          got += chunk.length;
        }
        expect(got).toBe(data.length);
        expect(hash.digest("hex")).toBe(sha256(data));
        await sbx.files.remove(path);
      }, 300_000);

      it("uploads and downloads through signed URLs, with no SDK headers", async () => {
        const path = `${HOME}/signed.bin`;
        const data = randomBytes(MiB + 17);
        const up = await sbx.uploadUrl(path);
        expect(new URL(up).searchParams.get("signature")).toMatch(/^v1_/);
        const form = new FormData();
        form.append("file", new Blob([data]), "signed.bin");
        const put = await fetch(up, { method: "POST", body: form });
        expect(put.status, await put.clone().text()).toBe(200);
        const down = await fetch(await sbx.downloadUrl(path, { useSignatureExpiration: 60 }));
        expect(down.status).toBe(200);
        expect(sha256(new Uint8Array(await down.arrayBuffer()))).toBe(sha256(data));
        // A signature for another path does not open this one.
        const forged = new URL(await sbx.downloadUrl(`${HOME}/other.bin`));
        forged.searchParams.set("path", path);
        expect((await fetch(forged)).status).toBeGreaterThanOrEqual(400);
      });
    });

    describe("code interpreter", () => {
      let ci: CodeInterpreter;
      beforeAll(async () => {
        ci = await CodeInterpreter.create({ ...opts(), timeoutMs: 600_000 });
        made.push(ci);
      });

      it("keeps state across cells of the default context", async () => {
        await ci.runCode("x = 41");
        const r = await ci.runCode("x + 1");
        expect(r.error).toBeUndefined();
        expect(r.text).toBe("42");
        expect(r.results[0]?.isMainResult).toBe(true);
      });

      it("a context's os.getcwd() names the directory as the caller did", async (ctx) => {
        need(ctx, "homeCwd");
        await ci.files.makeDir(`${HOME}/ctx-cwd`);
        const a = await ci.createCodeContext({ cwd: `${HOME}/ctx-cwd`, language: "python" });
        expect((await ci.runCode("import os; os.getcwd()", { context: a })).text).toBe(
          `'${HOME}/ctx-cwd'`,
        );
      });

      it("runs cells in contexts of their own: cwd, isolation, list, restart, remove", async () => {
        await ci.files.makeDir(`${HOME}/ctx`);
        const a = await ci.createCodeContext({ cwd: `${HOME}/ctx`, language: "python" });
        const b = await ci.createCodeContext({ language: "python" });
        expect(a.cwd).toBe(`${HOME}/ctx`);
        await ci.runCode("only_in_a = 1", { context: a });
        const missing = await ci.runCode("only_in_a", { context: b });
        expect(missing.error?.name).toBe("NameError");
        expect((await ci.listCodeContexts()).map((c) => c.id)).toEqual(
          expect.arrayContaining([a.id, b.id]),
        );
        await ci.restartCodeContext(a);
        expect((await ci.runCode("only_in_a", { context: a })).error?.name).toBe("NameError");
        await ci.removeCodeContext(b);
        expect((await ci.listCodeContexts()).map((c) => c.id)).not.toContain(b.id);
        await expect(ci.runCode("1", { context: b })).rejects.toBeInstanceOf(SandboxError);
      });

      it("streams stdout, stderr and results to callbacks as the cell runs", async () => {
        const go = `${HOME}/go-${randomUUID()}`;
        const out: string[] = [];
        const err: string[] = [];
        const results: string[] = [];
        const r = await ci.runCode(
          [
            "import os, sys, time",
            "print('early', flush=True)",
            "print('warn', file=sys.stderr, flush=True)",
            `for _ in range(300):\n    if os.path.exists('${go}'): break\n    time.sleep(0.1)`,
            `print('late' if os.path.exists('${go}') else 'never released')`,
            "6 * 7",
          ].join("\n"),
          {
            onStdout: async (m) => {
              out.push(m.line);
              if (m.line.includes("early")) await ci.files.write(go, "");
            },
            onStderr: (m) => void err.push(m.line),
            onResult: (res) => void results.push(res.text ?? ""),
          },
        );
        expect(out.join("")).toBe("early\nlate\n");
        expect(err.join("")).toBe("warn\n");
        expect(results).toEqual(["42"]);
        // How output is cut into messages is the kernel's affair; what was printed is not.
        expect(r.logs.stdout.join("")).toBe("early\nlate\n");
        expect(r.logs.stderr.join("")).toBe("warn\n");
      });

      it("reports errors with name, value and traceback, and the kernel lives on", async () => {
        const errors: string[] = [];
        const r = await ci.runCode("def fail():\n    raise ValueError('boom')\nfail()", {
          onError: (e) => void errors.push(e.name),
        });
        expect(r.error).toMatchObject({ name: "ValueError", value: "boom" });
        expect(r.error!.traceback).toContain("ValueError");
        expect(r.error!.traceback).toContain("fail");
        expect(errors).toEqual(["ValueError"]);
        expect((await ci.runCode("1 + 1")).text).toBe("2");
      });

      it("runs JavaScript and TypeScript cells in contexts, keeping state", async () => {
        for (const language of ["javascript", "typescript"]) {
          const context = await ci.createCodeContext({ language });
          await ci.runCode("const base = 20;", { context });
          const r = await ci.runCode("base * 2 + 2", { context });
          expect(r.error, language).toBeUndefined();
          expect(r.text, language).toBe("42");
        }
      });

      it("runs JavaScript and TypeScript cells by language, with the last value", async (ctx) => {
        need(ctx, "jsDefaultContexts");
        const js = await ci.runCode("const a = 20; a * 2 + 2", { language: "javascript" });
        expect(js.error).toBeUndefined();
        expect(js.text).toBe("42");
        const ts = await ci.runCode("const n: number = 6; n * 7", { language: "typescript" });
        expect(ts.error).toBeUndefined();
        expect(ts.text).toBe("42");
      });

      it("runs bash cells", async (ctx) => {
        need(ctx, "bashCells");
        const r = await ci.runCode("echo $((40 + 2))", { language: "bash" });
        expect(r.error).toBeUndefined();
        expect(r.logs.stdout.join("")).toBe("42\n");
      });

      it("returns a DataFrame as HTML and data, and a matplotlib chart as a PNG", async (ctx) => {
        if (target.lacks.richLibrariesPreinstalled !== undefined) {
          need(ctx, "packageIndex");
          const pip = await ci.commands.run(`pip install --user --quiet ${RICH.join(" ")}`, {
            timeoutMs: 540_000,
          });
          expect(pip.exitCode).toBe(0);
        }
        // A context started now sees packages installed just before (a kernel started earlier
        // would not have the new user site directory on its path).
        const context = await ci.createCodeContext({ language: "python" });
        const df = await ci.runCode(
          "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})\ndf",
          { context, timeoutMs: 120_000 },
        );
        expect(df.error).toBeUndefined();
        const table = df.results.find((r) => r.isMainResult);
        expect(table?.html).toContain("<table");
        expect(table?.text).toContain("a  b");
        expect(JSON.stringify(table?.data)).toMatch(/"a".*"b"/);

        const chart = await ci.runCode(
          "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.title('t')\nplt.show()",
          { context, timeoutMs: 120_000 },
        );
        expect(chart.error).toBeUndefined();
        const png = chart.results.find((r) => r.png);
        expect(png).toBeDefined();
        expect([...Buffer.from(png!.png!, "base64").subarray(0, 8)]).toEqual(PNG_SIGNATURE);
      }, 600_000);
    });

    describe("errors", () => {
      it("a wrong API key raises AuthenticationError", async () => {
        const bad = `e2b_${"f".repeat(40)}`;
        await expect(Sandbox.create(opts(bad))).rejects.toBeInstanceOf(AuthenticationError);
        await expect(Sandbox.list(opts(bad)).nextItems()).rejects.toBeInstanceOf(
          AuthenticationError,
        );
      });

      it("an unknown template is E2B's 404, which the SDK raises as a SandboxError", async () => {
        // The SDK maps no status to a class of its own on create: the 404 shows in the message.
        const err = await Sandbox.create(`no-such-template-${run}`, opts()).catch(
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(SandboxError);
        expect((err as Error).message).toMatch(/^404\b/);
      });

      it("an unknown sandbox raises NotFoundError, and kill says false", async () => {
        const id = `nosuch${run}`;
        await expect(Sandbox.connect(id, opts())).rejects.toBeInstanceOf(NotFoundError);
        await expect(Sandbox.getInfo(id, opts())).rejects.toBeInstanceOf(NotFoundError);
        expect(await Sandbox.kill(id, opts())).toBe(false);
      });

      it("a key past its sandbox quota raises RateLimitError", async (ctx) => {
        need(ctx, "quota");
        const q = connection().quota!;
        const held: Sandbox[] = [];
        try {
          for (let i = 0; i < q.maxSandboxes; i++)
            held.push(await Sandbox.create({ ...opts(q.apiKey), timeoutMs: 300_000 }));
          await expect(
            Sandbox.create({ ...opts(q.apiKey), timeoutMs: 300_000 }),
          ).rejects.toBeInstanceOf(RateLimitError);
        } finally {
          await Promise.all(held.map((s) => s.kill()));
        }
      }, 180_000);

      it("a command past its timeout raises TimeoutError and is killed", async () => {
        const sbx = await create();
        const marker = `${HOME}/late-${run}`;
        await expect(
          sbx.commands.run(`sleep 5; touch ${marker}`, { timeoutMs: 1_000 }),
        ).rejects.toBeInstanceOf(TimeoutError);
        await new Promise((r) => setTimeout(r, 6_000));
        expect(await sbx.files.exists(marker)).toBe(false);
      });

      it("a code cell past its timeout raises TimeoutError", async () => {
        const ci = await CodeInterpreter.create({ ...opts(), timeoutMs: 600_000 });
        made.push(ci);
        await expect(
          ci.runCode("import time; time.sleep(30)", { timeoutMs: 1_000 }),
        ).rejects.toBeInstanceOf(TimeoutError);
      });

      it("a killed sandbox's data plane raises the SDK's not-running errors", async () => {
        const sbx = await create();
        await Sandbox.kill(sbx.sandboxId, opts());
        // E2B's edge answers 502 for a sandbox that is gone: the SDK reads that as "probably
        // not running anymore" on RPCs, and as a sandbox timeout on /files.
        await expect(sbx.commands.run("true")).rejects.toBeInstanceOf(NotFoundError);
        await expect(sbx.files.read(`${HOME}/x`)).rejects.toBeInstanceOf(TimeoutError);
      });
    });
  });
}
