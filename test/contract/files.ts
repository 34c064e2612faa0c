/**
 * The contract's filesystem beyond the seed's seven calls: rename, stat, append, list depth,
 * glob, grep, watch and streamed transfers. A target lacking one is asserted to refuse it with
 * NOT_SUPPORTED.
 */
import { createHash, randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { FilesystemEvent, SandboxInstance } from "@sandpit/sdk";
import {
  expectSandboxError,
  type ContractFeature,
  type ContractTarget,
  type Has,
} from "./suite.ts";

const W = "/mnt/user-data/workspace";
const MiB = 1024 * 1024;
/** Streamed-transfer size where a target does not say otherwise. */
const DEFAULT_STREAM_BYTES = 64 * MiB;

export function filesContract(
  sandbox: () => SandboxInstance,
  target: () => ContractTarget,
  has: Has,
): void {
  const fs = () => sandbox().filesystem;
  const dir = (name: string) => `${W}/files-${name}-${randomUUID().slice(0, 8)}`;
  const refusals = new Set<ContractFeature>();
  /**
   * Registers `body` when the target has `feature`; else, once per feature, a test that
   * `refused` says NOT_SUPPORTED.
   */
  const feature = (
    name: ContractFeature,
    title: string,
    body: () => Promise<void>,
    refused: () => Promise<unknown>,
    timeout?: number,
  ) => {
    if (has(name)) return it(title, body, timeout);
    if (refusals.has(name)) return;
    refusals.add(name);
    it(`${name} is refused with NOT_SUPPORTED (the target lacks it)`, async () => {
      await expectSandboxError(refused(), "NOT_SUPPORTED");
    });
  };

  describe("filesystem: complete", () => {
    feature(
      "rename",
      "renames files and directories, replaces a file as rename(2) does, refuses a move into itself",
      async () => {
        const d = dir("mv");
        await fs().write(`${d}/a.txt`, "A");
        await fs().write(`${d}/b.txt`, "B");
        await fs().rename(`${d}/a.txt`, `${d}/c.txt`);
        expect(await fs().read(`${d}/c.txt`)).toBe("A");
        expect(await fs().exists(`${d}/a.txt`)).toBe(false);
        await fs().rename(`${d}/c.txt`, `${d}/b.txt`); // replaces
        expect(await fs().read(`${d}/b.txt`)).toBe("A");
        await fs().write(`${d}/tree/x/y.txt`, "Y");
        await fs().rename(`${d}/tree`, `${d}/moved`);
        expect(await fs().read(`${d}/moved/x/y.txt`)).toBe("Y");
        await expectSandboxError(fs().rename(`${d}/moved`, `${d}/moved/x/in`), "INVALID_ARGUMENT");
        await expectSandboxError(fs().rename(`${d}/missing`, `${d}/z`), "NOT_FOUND");
        await expectSandboxError(fs().rename(`${d}/b.txt`, "/etc/passwd"), "INVALID_ARGUMENT");
      },
      () => fs().rename(`${W}/a`, `${W}/b`),
    );

    feature(
      "stat",
      "stats a file and a directory; NOT_FOUND for a missing path",
      async () => {
        const d = dir("stat");
        await fs().write(`${d}/f.txt`, "12345");
        const f = await fs().stat(`${d}/f.txt`);
        expect(f).toMatchObject({ name: "f.txt", path: `${d}/f.txt`, type: "file", size: 5 });
        expect(f.modifiedTime).toBeInstanceOf(Date);
        expect(Math.abs(f.modifiedTime!.getTime() - Date.now())).toBeLessThan(10 * 60_000);
        expect(await fs().stat(d)).toMatchObject({ path: d, type: "dir" });
        await expectSandboxError(fs().stat(`${d}/missing`), "NOT_FOUND");
      },
      () => fs().stat(W),
    );

    feature(
      "append",
      "appends to a file, creating it first",
      async () => {
        const d = dir("append");
        await fs().append(`${d}/log.txt`, "one\n");
        await fs().append(`${d}/log.txt`, new TextEncoder().encode("two\n"));
        expect(await fs().read(`${d}/log.txt`)).toBe("one\ntwo\n");
        await expectSandboxError(fs().append(d, "x"), "CONFLICT");
      },
      () => fs().append(`${W}/x`, "x"),
    );

    feature(
      "listDepth",
      "lists one level by default and deeper with depth",
      async () => {
        const d = dir("depth");
        await fs().write(`${d}/a/b/c/deep.txt`, "x");
        await fs().write(`${d}/top.txt`, "x");
        const one = (await fs().list(d, { depth: 1 })).map((e) => e.path).sort();
        expect(one).toEqual([`${d}/a`, `${d}/top.txt`]);
        const three = (await fs().list(d, { depth: 3 })).map((e) => e.path).sort();
        expect(three).toEqual([`${d}/a`, `${d}/a/b`, `${d}/a/b/c`, `${d}/top.txt`]);
        await expectSandboxError(fs().list(d, { depth: 0 }), "INVALID_ARGUMENT");
      },
      () => fs().list(W, { depth: 3 }),
    );

    feature(
      "glob",
      "globs within a directory and across directories with **",
      async () => {
        const d = dir("glob");
        for (const f of ["a.py", "b.txt", "sub/c.py", "sub/deep/d.py"])
          await fs().write(`${d}/${f}`, "");
        expect(await fs().glob("*.py", { cwd: d })).toEqual([`${d}/a.py`]);
        expect((await fs().glob("**/*.py", { cwd: d })).sort()).toEqual(
          [`${d}/a.py`, `${d}/sub/c.py`, `${d}/sub/deep/d.py`].sort(),
        );
        expect((await fs().glob(`${d}/sub/**/*.py`)).sort()).toEqual(
          [`${d}/sub/c.py`, `${d}/sub/deep/d.py`].sort(),
        );
        await expectSandboxError(fs().glob("/etc/*"), "INVALID_ARGUMENT");
      },
      () => fs().glob("*"),
    );

    feature(
      "grep",
      "greps by regex, literally, ignoring case and by file glob",
      async () => {
        const d = dir("grep");
        await fs().write(`${d}/one.py`, "import os\nTODO: fix\nprint('a.b')\n");
        await fs().write(`${d}/sub/two.txt`, "todo later\naxb\n");
        expect(await fs().grep("^TODO", { path: d })).toEqual([
          { path: `${d}/one.py`, line: 2, text: "TODO: fix" },
        ]);
        const ci = await fs().grep("todo", { path: d, ignoreCase: true });
        expect(ci.map((m) => m.path).sort()).toEqual([`${d}/one.py`, `${d}/sub/two.txt`]);
        expect(await fs().grep("a.b", { path: d, literal: true })).toHaveLength(1);
        expect(await fs().grep("a.b", { path: d })).toHaveLength(2);
        expect((await fs().grep("o", { path: d, glob: "*.txt" })).map((m) => m.line)).toEqual([1]);
        expect(await fs().grep(".", { path: d, maxMatches: 2 })).toHaveLength(2);
        await expectSandboxError(fs().grep("(", { path: d }), "INVALID_ARGUMENT");
      },
      () => fs().grep("x"),
    );

    feature(
      "watch",
      "a watch sees 100 files created and removed; a stopped one sees nothing more",
      async () => {
        const d = dir("watch");
        await fs().mkdir(d);
        const events: FilesystemEvent[] = [];
        const handle = await fs().watch(d, (e) => events.push(e));
        const names = Array.from({ length: 100 }, (_, i) => `${d}/f${i}.txt`);
        await Promise.all(names.map((n) => fs().write(n, "x")));
        const seen = (type: string) =>
          new Set(events.filter((e) => e.type === type).map((e) => e.path));
        await until(() => names.every((n) => seen("create").has(n)), "a create for every file");
        await Promise.all(names.map((n) => fs().remove(n)));
        await until(() => names.every((n) => seen("remove").has(n)), "a remove for every file");
        await handle.stop();
        const count = events.length;
        await fs().write(`${d}/after.txt`, "x");
        await new Promise((r) => setTimeout(r, 500));
        expect(events.length, "no events after stop").toBe(count);
        await expectSandboxError(
          fs().watch(`${d}/missing`, () => undefined),
          "NOT_FOUND",
        );
      },
      () => fs().watch(W, () => undefined),
      60_000,
    );

    feature(
      "streams",
      "streams a large file both ways with flat client memory",
      async () => {
        const size = target().streamBytes ?? DEFAULT_STREAM_BYTES;
        const path = `${dir("stream")}/big.bin`;
        const sent = createHash("sha256");
        let peak = 0;
        const base = process.memoryUsage().rss;
        const sample = () => (peak = Math.max(peak, process.memoryUsage().rss - base));
        async function* generate(): AsyncGenerator<Uint8Array> {
          for (let i = 0; i < size / MiB; i++) {
            const chunk = Buffer.alloc(MiB, i & 0xff);
            chunk.writeUInt32BE(i);
            sent.update(chunk);
            if (i % 64 === 0) sample();
            yield chunk;
          }
        }
        await fs().writeStream(path, generate());
        expect((await fs().stat(path)).size).toBe(size);
        const received = createHash("sha256");
        let bytes = 0;
        let n = 0;
        for await (const chunk of await fs().readStream(path)) {
          received.update(chunk);
          bytes += chunk.byteLength;
          if (n++ % 64 === 0) sample();
        }
        sample();
        expect(bytes).toBe(size);
        expect(received.digest("hex")).toBe(sent.digest("hex"));
        expect(peak, `client RSS grew by ${Math.round(peak / MiB)} MiB`).toBeLessThan(256 * MiB);
        await fs().remove(path);
      },
      () => fs().readStream(`${W}/x`),
      600_000,
    );

    feature(
      "streams",
      "an aborted writeStream rejects with the signal's reason and leaves no file",
      async () => {
        const path = `${dir("abort")}/cut.bin`;
        const abort = new AbortController();
        const reason = new Error("stop here");
        async function* slow(): AsyncGenerator<Uint8Array> {
          for (let i = 0; i < 1000; i++) {
            if (i === 4) abort.abort(reason);
            yield new Uint8Array(MiB).fill(1);
            await new Promise((r) => setTimeout(r, 20));
          }
        }
        await expect(fs().writeStream(path, slow(), { signal: abort.signal })).rejects.toBe(reason);
        await until(async () => !(await fs().exists(path)), "no file after the abort");
        expect(
          await fs()
            .list(path.slice(0, path.lastIndexOf("/")))
            .catch(() => []),
        ).toEqual([]);
        // read and write with an already aborted signal reject at once, with its reason
        const gone = new AbortController();
        gone.abort(reason);
        await expect(fs().write(path, "x", { signal: gone.signal })).rejects.toBe(reason);
        await expect(fs().read(`${W}`, { signal: gone.signal })).rejects.toBe(reason);
      },
      () => fs().writeStream(`${W}/x`, (async function* () {})()),
      60_000,
    );
  });
}

/** Waits (bounded: 30 s) for `check`, then asserts it. */
async function until(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  const end = Date.now() + 30_000;
  while (!(await check()) && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
  expect(await check(), what).toBe(true);
}
