/**
 * Output written before the grace after a command's exit ran out is never lost to a busy event
 * loop. Found by test/security/load.test.ts: 1,000 commands in 50 CPU-throttled pods, and a few
 * dozen answered their own exit code with their output cut short (sandboxd reaps every exited
 * child on one SIGCHLD, so a command's exit can be seen a turn before the output it wrote last;
 * a loop throttled past the 100 ms grace then fired the grace timer before the poll that would
 * have read it, and the pipes were closed with the output in them).
 *
 * Here the loop is held busy on purpose right after the exit was seen, while output still
 * arrives on the pipe within the grace: the answer must carry it.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, expect, test } from "vitest";
import { runProcess } from "../src/process.ts";
import { holdLoopAfterExits } from "./busy-loop.ts";

let restore = () => {};
afterEach(() => restore());

test("output that reaches the pipe during the grace is kept, however late the loop gets to it", async () => {
  const dir = mkdtempSync(join(tmpdir(), "sandboxd-drain-"));
  const marker = join(dir, "written");
  try {
    restore = holdLoopAfterExits(marker);
    const r = await runProcess({
      file: "/bin/sh",
      // The shell exits at once; what it left behind writes 20 ms later, within the grace.
      args: ["-c", `(sleep 0.02; echo late; echo also >&2; touch ${marker}) & echo first; exit 3`],
      cwd: dir,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
      timeoutMs: 10_000,
      outputCapBytes: 1 << 20,
    });
    expect(r).toMatchObject({ exitCode: 3, stdout: "first\nlate\n", stderr: "also\n" });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
