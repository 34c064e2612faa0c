/**
 * The shared contract suite: what every SandboxProvider must do, asserted against real
 * sandboxes. A provider's test file calls `contractSuite(name, setup, options)` once; everything
 * here then runs against it unchanged.
 */
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { createServer, type AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxError, type SandboxInstance, type SandboxProvider } from "@sandpit/sdk";
import { ptyContract } from "./pty.ts";
import { codeContextContract } from "./contexts.ts";
import { filesContract } from "./files.ts";
import { processesContract } from "./processes.ts";
import { platformContract, type PlatformCapabilities } from "./platform.ts";

/**
 * Features of the contract a backend may lack. A target has each unless its options list it in
 * `lacks`; a feature a target lacks is asserted to be refused with NOT_SUPPORTED (never skipped);
 * for the behaviours at the end of the list, the alternative each names is asserted instead.
 * What a target lacks is known when the suite is registered, so each feature file registers only
 * the tests that apply to it.
 */
export type ContractFeature =
  | "background"
  | "pty"
  | "codeContexts"
  | "richResults"
  | "rename"
  | "stat"
  | "append"
  | "glob"
  | "grep"
  | "watch"
  | "streams"
  | "listDepth"
  /** Ending a background process's stdin (`closeStdin`). */
  | "closeStdin"
  // Behaviours rather than calls: a target without one is held to the stated alternative.
  /**
   * A process's record outlives its client: re-attaching to a terminal or process replays its
   * recent output (from any offset), and an exited process stays listed with its exit code
   * (else: a new client sees new output only, and an exited process is gone: NOT_FOUND).
   */
  | "replay"
  /** Re-attaching to a terminal replays its recent output (else: new output only). */
  | "ptyReplay"
  /**
   * A per-sandbox limit on processes, terminals and code contexts, refused with
   * CAPACITY_EXCEEDED (else: many at once all work, each on its own).
   */
  | "limits";

/** Whether the target under test has a feature (fixed when the suite is registered). */
export type Has = (feature: ContractFeature) => boolean;

export interface ContractTarget {
  provider: SandboxProvider;
  /** Stops whatever the setup started. */
  teardown?: () => Promise<void>;
  /** Size of the streamed-transfer test's file (default 64 MiB; 1 GiB where that is cheap). */
  streamBytes?: number;
}

export interface ContractOptions {
  /** What the backend lacks (the target's file says why, for each). */
  lacks?: readonly ContractFeature[];
  /** Set when the suite cannot run here: every test is listed as skipped under this reason. */
  skipReason?: string | undefined;
  /** What the backend honours of create's platform options (platform.ts). */
  platform: PlatformCapabilities;
}

/** Asserts that a promise rejects with a SandboxError of `code`, and returns it. */
export async function expectSandboxError(
  p: Promise<unknown>,
  code: SandboxError["code"],
): Promise<SandboxError> {
  const err = await p.then(
    () => {
      throw new Error(`expected a SandboxError ${code}, but the call succeeded`);
    },
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(SandboxError);
  expect((err as SandboxError).code, (err as Error).message).toBe(code);
  return err as SandboxError;
}

/**
 * Registers the suite against the provider `setup` builds. With `skipReason`, every test is
 * still listed, as skipped, under a name that says why (setup never runs).
 */
export function contractSuite(
  name: string,
  setup: () => Promise<ContractTarget>,
  { lacks = [], skipReason, platform }: ContractOptions,
): void {
  const has: Has = (feature) => !lacks.includes(feature);
  const title = `SandboxProvider contract: ${name}`;
  const register = skipReason === undefined ? describe : describe.skip;
  register(skipReason === undefined ? title : `${title} (skipped: ${skipReason})`, () => {
    let target: ContractTarget;
    let sbx: SandboxInstance;
    const thread = () => `t${randomUUID().slice(0, 8)}`;

    beforeAll(async () => {
      target = await setup();
      sbx = await target.provider.create({
        language: "python",
        threadId: thread(),
        envs: { SANDPIT_SANDBOX_VAR: "from-create" },
      });
    });
    afterAll(async () => {
      await sbx?.kill().catch(() => undefined);
      await target?.teardown?.();
    });

    ptyContract(
      () => sbx,
      () => target,
      has,
    );

    platformContract(
      () => sbx,
      () => target,
      platform,
    );

    describe("commands", () => {
      it("returns exit code, stdout and stderr separately; non-zero exit is a result", async () => {
        const r = await sbx.commands.run("echo out; echo err >&2; exit 3");
        expect(r).toEqual({ exitCode: 3, stdout: "out\n", stderr: "err\n" });
      });

      it("runs in the workspace by default and honours cwd", async () => {
        expect((await sbx.commands.run("pwd")).stdout.trim()).toBe("/mnt/user-data/workspace");
        await sbx.filesystem.mkdir("/mnt/user-data/workspace/sub/dir");
        expect(
          (
            await sbx.commands.run("pwd", { cwd: "/mnt/user-data/workspace/sub/dir" })
          ).stdout.trim(),
        ).toBe("/mnt/user-data/workspace/sub/dir");
      });

      it("passes per-command and sandbox-wide environment variables", async () => {
        const r = await sbx.commands.run('echo "$A|$SANDPIT_SANDBOX_VAR"', {
          envs: { A: "per-command" },
        });
        expect(r.stdout).toBe("per-command|from-create\n");
      });

      it("feeds stdin and hands stdout and stderr to callbacks", async () => {
        const chunks: string[] = [];
        const errs: string[] = [];
        const r = await sbx.commands.run("cat; echo done >&2", {
          stdin: "hello stdin",
          onStdout: (d) => chunks.push(d),
          onStderr: (d) => errs.push(d),
        });
        expect(r.stdout).toBe("hello stdin");
        expect(chunks.join("")).toBe("hello stdin");
        expect(errs.join("")).toBe("done\n");
      });

      it("gives the exit of a command that ends without reading its stdin", async () => {
        // Much more input than a pipe holds, to a command that exits at once: the input that
        // finds no reader is no failure of the run (as with a shell's closed pipe).
        const r = await sbx.commands.run("echo early; exit 3", { stdin: "x".repeat(1 << 20) });
        expect(r).toMatchObject({ exitCode: 3, stdout: "early\n" });
      });

      it("streams output to callbacks as it is produced, before the command ends", async () => {
        // The command prints, then waits for a file the test writes only once both first lines
        // have reached the callbacks: output held back until the end never arrives, and the
        // command runs into its timeout instead.
        const gate = `gate-${randomUUID()}`;
        let out = "";
        let err = "";
        let printed!: () => void;
        const bothPrinted = new Promise<void>((resolve) => (printed = resolve));
        const check = () => out.includes("first\n") && err.includes("first-err\n") && printed();
        const gateWritten = bothPrinted.then(() => sbx.filesystem.write(gate, ""));
        const result = await sbx.commands
          .run(
            `echo first; echo first-err >&2; while [ ! -e ${gate} ]; do sleep 0.05; done; echo second`,
            {
              timeoutMs: 20_000,
              onStdout: (d) => ((out += d), check()),
              onStderr: (d) => ((err += d), check()),
            },
          )
          .catch((e: unknown) => e);
        expect(result, "the first lines reach the callbacks while the command still runs").toEqual({
          exitCode: 0,
          stdout: "first\nsecond\n",
          stderr: "first-err\n",
        });
        await gateWritten;
        expect(out).toBe("first\nsecond\n");
      }, 60_000);

      it("kills a command and its whole process group at its timeout with TIMEOUT", async () => {
        // A background child keeps counting into a file; once the group is killed the count
        // stops. (A file, not a PID: a sandbox may give each command its own PID namespace.)
        // Each count is renamed into place, so a read never sees a half-written file, and the
        // command sleeps only once the child has counted, so a loaded machine cannot time it
        // out before the child exists.
        const beat = `beat-${randomUUID()}`;
        const count = `echo $i > ${beat}.tmp; mv -f ${beat}.tmp ${beat}`;
        await expectSandboxError(
          sbx.commands.run(
            `(i=0; while :; do i=$((i+1)); ${count}; sleep 0.05; done) & ` +
              `until [ -s ${beat} ]; do sleep 0.01; done; sleep 30`,
            { timeoutMs: 3_000 },
          ),
          "TIMEOUT",
        );
        expect(Number(await sbx.filesystem.read(beat))).toBeGreaterThan(0);
        expect(
          await beatStops(() => sbx.filesystem.read(beat)),
          "the background child outlived the timeout",
        ).toBe(true);
        // The sandbox is still usable afterwards.
        expect((await sbx.commands.run("echo alive")).stdout).toBe("alive\n");
      });

      it("sees files written through the filesystem API and vice versa", async () => {
        await sbx.filesystem.write("shared.txt", "via-fs");
        expect((await sbx.commands.run("cat /mnt/user-data/workspace/shared.txt")).stdout).toBe(
          "via-fs",
        );
        await sbx.commands.run("printf via-cmd > /mnt/user-data/outputs/out.txt");
        expect(await sbx.filesystem.read("/mnt/user-data/outputs/out.txt")).toBe("via-cmd");
      });
    });

    describe("executeCode: python", () => {
      it("runs code and parses JSON output", async () => {
        const r = await sbx.executeCode(
          'import json\nprint(json.dumps({"sum": 1 + 2, "ok": True}))',
          "python",
        );
        expect(r.success).toBe(true);
        expect(r.output).toEqual({ sum: 3, ok: true });
        expect(r.stdout).toBe('{"sum": 3, "ok": true}\n');
        expect(r.error).toBeUndefined();
        expect(r.durationMs).toBeGreaterThanOrEqual(0);
      });

      it("takes the last line as output when earlier lines are not JSON", async () => {
        const r = await sbx.executeCode('print("progress...")\nprint("[1, 2, 3]")', "python");
        expect(r.output).toEqual([1, 2, 3]);
      });

      it("leaves output undefined for plain text", async () => {
        const r = await sbx.executeCode('print("hello world")', "python");
        expect(r.success).toBe(true);
        expect(r.output).toBeUndefined();
        expect(r.stdout).toBe("hello world\n");
      });

      it("reports an exception with name, message and traceback", async () => {
        const r = await sbx.executeCode(
          'print("before")\ndef f():\n    raise ValueError("bad value")\nf()',
          "python",
        );
        expect(r.success).toBe(false);
        expect(r.stdout).toBe("before\n");
        expect(r.error?.name).toBe("ValueError");
        expect(r.error?.message).toBe("bad value");
        expect(r.error?.traceback).toContain("line 3, in f");
        expect(r.error?.traceback).not.toMatch(/\/(tmp|home|root|var)\//);
      });

      it("reports a syntax error", async () => {
        const r = await sbx.executeCode("def broken(:\n  pass", "python");
        expect(r.success).toBe(false);
        expect(r.error?.name).toBe("SyntaxError");
      });

      it("treats a non-zero sys.exit as failure", async () => {
        const r = await sbx.executeCode("import sys\nsys.exit(4)", "python");
        expect(r.success).toBe(false);
        expect(r.error?.message).toContain("4");
      });

      it("times out with TIMEOUT", async () => {
        await expectSandboxError(
          sbx.executeCode("import time\ntime.sleep(30)", "python", { timeoutMs: 700 }),
          "TIMEOUT",
        );
      });

      it("passes environment variables", async () => {
        const r = await sbx.executeCode('import os\nprint(os.environ["GREETING"])', "python", {
          envs: { GREETING: "hi" },
        });
        expect(r.stdout).toBe("hi\n");
      });
    });

    describe("executeCode: typescript", () => {
      it("runs TypeScript without a compile step and parses JSON output", async () => {
        const code =
          "interface P { x: number }\nconst p: P = { x: 2 };\nconsole.log(JSON.stringify({ doubled: p.x * 2 }));";
        const r = await sbx.executeCode(code, "typescript");
        expect(r.stderr).toBe("");
        expect(r.success).toBe(true);
        expect(r.output).toEqual({ doubled: 4 });
      });

      it("supports enums and top-level await", async () => {
        const code =
          "enum Color { Red = 'red' }\nconst v = await Promise.resolve(Color.Red);\nconsole.log(JSON.stringify(v));";
        const r = await sbx.executeCode(code, "typescript");
        expect(r.success).toBe(true);
        expect(r.output).toBe("red");
      });

      it("reports a thrown error with name, message and stack", async () => {
        const r = await sbx.executeCode(
          'console.log("before");\nthrow new TypeError("boom");',
          "typescript",
        );
        expect(r.success).toBe(false);
        expect(r.stdout).toBe("before\n");
        expect(r.error?.name).toBe("TypeError");
        expect(r.error?.message).toBe("boom");
        expect(r.error?.traceback).toContain("TypeError: boom");
      });

      it("reports an unhandled rejection", async () => {
        const r = await sbx.executeCode('Promise.reject(new RangeError("nope"));', "typescript");
        expect(r.success).toBe(false);
        expect(r.error?.name).toBe("RangeError");
      });

      it("times out with TIMEOUT", async () => {
        await expectSandboxError(
          sbx.executeCode("await new Promise((r) => setTimeout(r, 30_000));", "typescript", {
            timeoutMs: 700,
          }),
          "TIMEOUT",
        );
      });
    });

    it("rejects an unknown language with INVALID_ARGUMENT", async () => {
      await expectSandboxError(sbx.executeCode("print(1)", "ruby" as "python"), "INVALID_ARGUMENT");
    });

    codeContextContract(
      () => target,
      () => sbx,
      has,
    );

    describe("filesystem", () => {
      it("writes and reads text, with unicode, relative and absolute paths alike", async () => {
        const text = "héllo wörld ✓ 你好\n";
        await sbx.filesystem.write("notes/a.txt", text);
        expect(await sbx.filesystem.read("/mnt/user-data/workspace/notes/a.txt")).toBe(text);
        expect(await sbx.filesystem.read("notes/a.txt")).toBe(text);
      });

      it("round-trips every byte value", async () => {
        const bytes = new Uint8Array(256 * 4).map((_, i) => i % 256);
        await sbx.filesystem.write("bin/all-bytes.bin", bytes);
        expect(
          Buffer.from(await sbx.filesystem.readBytes("bin/all-bytes.bin")).equals(
            Buffer.from(bytes),
          ),
        ).toBe(true);
      });

      it("round-trips a large file intact", async () => {
        const big = randomBytes(24 * 1024 * 1024);
        await sbx.filesystem.write("/mnt/user-data/uploads/big.bin", big);
        const back = await sbx.filesystem.readBytes("/mnt/user-data/uploads/big.bin");
        expect(back.byteLength).toBe(big.byteLength);
        expect(sha(back)).toBe(sha(big));
        const size = await sbx.commands.run("stat -c %s /mnt/user-data/uploads/big.bin");
        expect(size.stdout.trim()).toBe(String(big.byteLength));
      });

      it("overwrites an existing file completely", async () => {
        await sbx.filesystem.write("over.txt", "a long first version");
        await sbx.filesystem.write("over.txt", "short");
        expect(await sbx.filesystem.read("over.txt")).toBe("short");
      });

      it("creates nested directories, idempotently, and lists them", async () => {
        await sbx.filesystem.mkdir("tree/a/b");
        await sbx.filesystem.mkdir("tree/a/b");
        await sbx.filesystem.write("tree/a/file.txt", "x");
        const entries = await sbx.filesystem.list("tree/a");
        expect(entries.map((e) => [e.name, e.type]).sort()).toEqual([
          ["b", "dir"],
          ["file.txt", "file"],
        ]);
        const file = entries.find((e) => e.name === "file.txt")!;
        expect(file.path).toBe("/mnt/user-data/workspace/tree/a/file.txt");
        expect(file.size).toBe(1);
        expect(file.modifiedTime).toBeInstanceOf(Date);
        // A real time, and the one just written: within minutes of this test's clock (a wrong
        // unit or time zone is off by hours or more).
        expect(Math.abs(file.modifiedTime!.getTime() - Date.now())).toBeLessThan(10 * 60_000);
      });

      it("answers exists for files, directories and missing paths", async () => {
        await sbx.filesystem.write("ex/here.txt", "1");
        expect(await sbx.filesystem.exists("ex/here.txt")).toBe(true);
        expect(await sbx.filesystem.exists("ex")).toBe(true);
        expect(await sbx.filesystem.exists("ex/missing.txt")).toBe(false);
      });

      it("removes files and whole directories", async () => {
        await sbx.filesystem.write("rm/deep/x.txt", "1");
        await sbx.filesystem.write("rm/y.txt", "2");
        await sbx.filesystem.remove("rm/y.txt");
        expect(await sbx.filesystem.exists("rm/y.txt")).toBe(false);
        await sbx.filesystem.remove("rm");
        expect(await sbx.filesystem.exists("rm")).toBe(false);
      });

      it("says NOT_FOUND for a missing file", async () => {
        await expectSandboxError(sbx.filesystem.read("no/such/file.txt"), "NOT_FOUND");
        await expectSandboxError(sbx.filesystem.list("no/such/dir"), "NOT_FOUND");
        await expectSandboxError(sbx.filesystem.remove("no/such/file.txt"), "NOT_FOUND");
      });

      it("refuses paths outside /mnt/user-data with INVALID_ARGUMENT", async () => {
        await expectSandboxError(sbx.filesystem.read("../../../etc/passwd"), "INVALID_ARGUMENT");
        await expectSandboxError(
          sbx.filesystem.write("/etc/sandpit-escape", "x"),
          "INVALID_ARGUMENT",
        );
        await expectSandboxError(sbx.filesystem.list("/"), "INVALID_ARGUMENT");
      });
    });

    filesContract(
      () => sbx,
      () => target,
      has,
    );

    describe("packages", () => {
      it("installs python packages with pip before create resolves", async () => {
        const s = await target.provider.create({
          language: "python",
          threadId: thread(),
          packages: ["six==1.16.0"],
        });
        try {
          const r = await s.executeCode("import six\nprint(six.__version__)", "python");
          expect(r.stdout.trim()).toBe("1.16.0");
          // Commands see the same packages.
          expect(
            (await s.commands.run("python3 -c 'import six; print(six.__version__)'")).stdout.trim(),
          ).toBe("1.16.0");
        } finally {
          await s.kill();
        }
      }, 240_000);

      it("installs npm packages before create resolves", async () => {
        const s = await target.provider.create({
          language: "typescript",
          threadId: thread(),
          packages: ["is-number@7.0.0"],
        });
        try {
          const r = await s.executeCode(
            'import isNumber from "is-number";\nconsole.log(JSON.stringify([isNumber(5), isNumber("x")]));',
            "typescript",
          );
          expect(r.error).toBeUndefined();
          expect(r.output).toEqual([true, false]);
        } finally {
          await s.kill();
        }
      }, 240_000);

      it("fails create with EXECUTION_FAILED when a package cannot be installed", async () => {
        await expectSandboxError(
          target.provider.create({
            language: "python",
            threadId: thread(),
            packages: ["sandpit-no-such-package-xyz==0.0.1"],
          }),
          "EXECUTION_FAILED",
        );
      }, 240_000);
    });

    describe("lifecycle", () => {
      it("keeps files across pause and resume", async () => {
        const s = await target.provider.create({ language: "python", threadId: thread() });
        await s.filesystem.write("keep/me.txt", "still here");
        await s.commands.run(
          "mkdir -p /mnt/user-data/outputs/r && echo 42 > /mnt/user-data/outputs/r/n",
        );
        await s.pause();
        const resumed = await target.provider.resume(s.sandboxId);
        expect(resumed.sandboxId).toBe(s.sandboxId);
        expect(await resumed.filesystem.read("keep/me.txt")).toBe("still here");
        expect((await resumed.commands.run("cat /mnt/user-data/outputs/r/n")).stdout).toBe("42\n");
        await resumed.kill();
      });

      it("returns the same sandbox for the same thread", async () => {
        const t = thread();
        const a = await target.provider.create({ language: "python", threadId: t });
        await a.filesystem.write("mark.txt", "a");
        const b = await target.provider.create({ language: "python", threadId: t });
        expect(b.sandboxId).toBe(a.sandboxId);
        expect(await b.filesystem.read("mark.txt")).toBe("a");
        await a.kill();
      });

      it("another user on the same thread name gets a sandbox of its own", async () => {
        const t = thread();
        const a = await target.provider.create({
          language: "python",
          userId: "alice",
          threadId: t,
        });
        await a.filesystem.write("mark.txt", "alice's");
        const b = await target.provider.create({ language: "python", userId: "bob", threadId: t });
        try {
          expect(b.sandboxId).not.toBe(a.sandboxId);
          await expectSandboxError(b.filesystem.read("mark.txt"), "NOT_FOUND");
          // And each user still finds their own again.
          const again = await target.provider.create({
            language: "python",
            userId: "alice",
            threadId: t,
          });
          expect(again.sandboxId).toBe(a.sandboxId);
          expect(await again.filesystem.read("mark.txt")).toBe("alice's");
        } finally {
          await Promise.all([a.kill(), b.kill()]);
        }
      });

      it("kill removes the sandbox: resume and further calls say NOT_FOUND", async () => {
        const s = await target.provider.create({ language: "python", threadId: thread() });
        await s.kill();
        await expectSandboxError(target.provider.resume(s.sandboxId), "NOT_FOUND");
        await expectSandboxError(s.commands.run("true"), "NOT_FOUND");
        await s.kill(); // idempotent
      });

      it("says NOT_FOUND when resuming an unknown sandbox", async () => {
        await expectSandboxError(target.provider.resume(`nobody.${thread()}`), "NOT_FOUND");
      });

      it("rejects invalid create options with INVALID_ARGUMENT", async () => {
        await expectSandboxError(
          target.provider.create({ language: "cobol" as "python" }),
          "INVALID_ARGUMENT",
        );
        await expectSandboxError(
          target.provider.create({ language: "python", threadId: "../escape" }),
          "INVALID_ARGUMENT",
        );
      });
    });

    processesContract(
      () => sbx,
      () => target,
      thread,
      has,
    );

    describe("getHost", () => {
      it("reaches a server started inside the sandbox", async () => {
        // A port free on this host: providers that share the host's network (local, the fakes)
        // would otherwise collide with whatever else runs here, containers' published ports included.
        const port = await freeHostPort();
        await sbx.filesystem.write("www/index.html", "served from the sandbox");
        await sbx.commands.run(
          `cd www && (python3 -m http.server ${port} --bind 127.0.0.1 > /dev/null 2>&1 &)`,
        );
        const host = await sbx.getHost(port);
        expect(host).toMatch(/^[^/]+:\d+$/);
        let body = "";
        // The server starts in the background; on a loaded machine that can take seconds.
        for (let i = 0; i < 150 && !body; i++) {
          body = await fetch(`http://${host}/index.html`).then(
            (r) => (r.ok ? r.text() : ""),
            () => "",
          );
          if (!body) await new Promise((r) => setTimeout(r, 100));
        }
        expect(body).toBe("served from the sandbox");
      });

      it("rejects an invalid port", async () => {
        await expectSandboxError(sbx.getHost(0), "INVALID_ARGUMENT");
        await expectSandboxError(sbx.getHost(70000), "INVALID_ARGUMENT");
      });
    });
  });
}

/**
 * True once a counter file written by a background loop (every 50 ms) holds still for a second;
 * false if it still moves after 15 s.
 */
export async function beatStops(read: () => Promise<string>): Promise<boolean> {
  const deadline = Date.now() + 15_000;
  let last = await read();
  while (Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 1_000));
    const now = await read();
    if (now === last) return true;
    last = now;
  }
  return false;
}

/** A TCP port nothing listens on right now (the OS picks it). */
export function freeHostPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

function sha(b: Uint8Array): string {
  return createHash("sha256").update(b).digest("hex");
}
