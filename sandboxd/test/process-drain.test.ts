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
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, expect, test } from "vitest";
import { PIPE_GRACE_MS, runProcess } from "../src/process.ts";

const cp = process.getBuiltinModule("node:child_process");
const spawn = cp.spawn;
afterEach(() => {
  cp.spawn = spawn;
});

test("output that reaches the pipe during the grace is kept, however late the loop gets to it", async () => {
  const dir = mkdtempSync(join(tmpdir(), "sandboxd-drain-"));
  const marker = join(dir, "written");
  try {
    // Every spawned child: once its exit has been seen (and the grace started), the loop is
    // held until its late output is in the pipe and the grace is long over.
    cp.spawn = ((...args: Parameters<typeof spawn>) => {
      const child = spawn(...args);
      child.once("exit", () =>
        process.nextTick(() => {
          const until = performance.now() + PIPE_GRACE_MS * 3;
          while (!existsSync(marker) || performance.now() < until) {
            // busy, as a CPU-starved sandboxd is
          }
        }),
      );
      return child;
    }) as typeof spawn;
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
