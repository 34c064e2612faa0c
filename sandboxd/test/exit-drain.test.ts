/**
 * A shell session's shell and a code context's kernel, like a command (./process-drain.test.ts):
 * output that reaches the pipe during the grace after their exit is kept, however late a busy
 * (CPU-throttled) event loop gets to it. Both used to wait a fixed grace on a timer, which a
 * loop held past it fires before the poll that would read the pipe: the output was dropped.
 *
 * Here the loop is held busy on purpose right after the exit was seen, while output still
 * arrives on the pipe within the grace: the command's or the cell's answer must carry it.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, expect, test } from "vitest";
import { CodeContexts } from "../src/contexts.ts";
import { discoverInterpreters, installShims, scrubEnv } from "../src/environment.ts";
import { Executor } from "../src/executor.ts";
import { PathJail } from "../src/jail.ts";
import type { CellEvent } from "../src/protocol.ts";
import { ShellSessions } from "../src/shell-sessions.ts";
import { VIRTUAL_DIRS } from "../src/wire.ts";
import { holdLoopAfterExits } from "./busy-loop.ts";

let root: string;
let marker: string;
let restore = () => {};

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "sandboxd-exit-drain-"));
  marker = join(root, "written");
});

afterEach(() => {
  restore();
  rmSync(root, { recursive: true, force: true });
});

/** What sandboxd's start (../src/start.ts) gives sessions and contexts, over `root`. */
async function host() {
  const jail = await PathJail.open(root);
  for (const dir of VIRTUAL_DIRS) await jail.mkdir(jail.resolve(`${jail.virtualRoot}/${dir}`));
  const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: root };
  const interp = await discoverInterpreters(env);
  await installShims(`${jail.realRoot}/.sandpit/bin`, interp);
  const outputCapBytes = 1 << 20;
  const executor = new Executor({
    jail,
    baseEnv: scrubEnv(env),
    outputCapBytes,
    interpreters: Promise.resolve(interp),
  });
  return { executor, jail, outputCapBytes, idleMs: 60_000 };
}

test("a shell session's command that ends its shell keeps what its jobs wrote during the grace", async () => {
  const h = await host();
  const sessions = new ShellSessions({ ...h, maxSessions: 1 });
  try {
    const session = sessions.open("s", { combined: false, cwd: h.jail.realRoot });
    restore = holdLoopAfterExits(marker); // the session's shell starts with the command
    // The shell exits at once; what it left behind writes 20 ms later, within the grace.
    const cmd = session.run(
      `(sleep 0.02; echo late; echo also >&2; touch ${marker}) & echo first; exit 3`,
      { hardTimeoutMs: 60_000 },
    );
    await cmd.done;
    expect({
      exitCode: cmd.exitCode,
      stdout: cmd.stdout.from(0, true).toString(),
      stderr: cmd.stderr.from(0, true).toString(),
    }).toEqual({ exitCode: 3, stdout: "first\nlate\n", stderr: "also\n" });
  } finally {
    await sessions.shutdown();
  }
});

test("a cell whose kernel exits keeps what was written to it during the grace", async () => {
  const contexts = new CodeContexts({ ...(await host()), maxContexts: 1 });
  restore = holdLoopAfterExits(marker); // the context's kernel starts with it
  try {
    const ctx = await contexts.create("python", undefined);
    const events: CellEvent[] = [];
    // The kernel exits at once; a process of its own session (so the kernel's group, killed
    // with it, is not its) writes 20 ms later, within the grace.
    await ctx.execute(
      {
        code: [
          "import os, subprocess",
          `subprocess.Popen(["sh", "-c", "sleep 0.02; echo late; touch ${marker}"], start_new_session=True)`,
          "print('first', flush=True)",
          "os._exit(3)",
        ].join("\n"),
      },
      (e) => events.push(e),
    );
    const stdout = events.map((e) => (e.type === "stdout" ? e.data : "")).join("");
    expect(stdout).toBe("first\nlate\n");
    expect(events.at(-1)).toMatchObject({
      type: "failure",
      error: { code: "EXECUTION_FAILED", message: expect.stringMatching(/exited with code 3/) },
    });
  } finally {
    await contexts.shutdown();
  }
});
