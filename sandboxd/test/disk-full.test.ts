/**
 * A write that meets a full disk (ENOSPC, or EDQUOT under a quota) is reported to the caller as
 * CAPACITY_EXCEEDED naming the path, not as an internal error, and leaves no partial file; a
 * stream the client cut stays a client abort. The errno comes from the source stream here (a
 * kernel's ENOSPC surfaces at the same point, where the pipeline into the file fails);
 * test/security/disk.test.ts meets a real full volume on the cluster.
 */
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PathJail } from "../src/jail.ts";

let root: string;
let jail: PathJail;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "sandboxd-full-"));
  jail = await PathJail.open(root);
});
afterAll(() => rm(root, { recursive: true, force: true }));

/** A stream that yields a chunk, then fails with `code`. */
function failing(code: string): Readable {
  let sent = false;
  return new Readable({
    read() {
      if (!sent) {
        sent = true;
        this.push(Buffer.alloc(64 * 1024, 1));
      } else this.destroy(Object.assign(new Error(code), { code }));
    },
  });
}

describe("a write that meets a full disk", () => {
  it.each(["ENOSPC", "EDQUOT"])(
    "%s is CAPACITY_EXCEEDED naming the path, with no file left",
    async (code) => {
      const p = jail.resolve(`${jail.virtualRoot}/big-${code}.bin`);
      await expect(jail.writeFile(p, failing(code))).rejects.toMatchObject({
        code: "CAPACITY_EXCEEDED",
        message: `the sandbox's disk is full: no space left while writing ${p.virtual}`,
      });
      expect(await readdir(root)).toEqual([]);
    },
  );

  it("a cut client stream stays the client's abort", async () => {
    const p = jail.resolve(`${jail.virtualRoot}/cut.bin`);
    await expect(jail.writeFile(p, failing("ECONNRESET"))).rejects.toMatchObject({
      code: "ECONNRESET",
    });
    expect(await readdir(root)).toEqual([]);
  });
});
