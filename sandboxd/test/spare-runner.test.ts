/**
 * The spare Python interpreter (sandboxd/src/spare-runner.ts) on a real sandboxd: a cell runs in
 * it only when it is what a fresh start would have been, with the cell's own environment and
 * directory, and never outlives sandboxd.
 */
import { readFile } from "node:fs/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SpareRunner, type SpareLaunch } from "../src/spare-runner.ts";
import { json, processesMatching, startSandboxd, type TestSandboxd } from "./helpers.ts";

interface CodeResult {
  success: boolean;
  stdout: string;
  stderr: string;
  error?: { name: string; message: string };
}

let d: TestSandboxd;
beforeAll(async () => {
  d = await startSandboxd();
  // The spare starts once sandboxd has answered a first request.
  expect((await d.call("/healthz")).status).toBe(200);
});
afterAll(async () => {
  await d?.stop();
});

async function cell(code: string, extra: Record<string, unknown> = {}): Promise<CodeResult> {
  const res = await d.call("/v1/code/execute", json({ language: "python", code, ...extra }));
  expect(res.status).toBe(200);
  return (await res.json()) as CodeResult;
}

async function parentOf(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
}

/** The spare interpreter of this test's sandboxd, once there is one (bounded wait). */
async function spare(of: TestSandboxd = d): Promise<number> {
  for (let i = 0; i < 100; i++) {
    for (const pid of await processesMatching("python_runner.py --spare")) {
      if ((await parentOf(pid).catch(() => 0)) === of.child.pid) return pid;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("no spare interpreter appeared within 5 s");
}

describe("the spare Python interpreter", () => {
  it("runs the next cell, with the cell's own environment and directory", async () => {
    const pid = await spare();
    await d.call("/v1/commands/run", json({ command: "mkdir -p /mnt/user-data/work" }));
    const r = await cell(
      [
        "import os, subprocess",
        "print(os.getpid())",
        "print(os.getcwd())",
        "print(os.environ.get('CELL_VAR'))",
        // A child process sees the cell's environment too (putenv, not only os.environ).
        "print(subprocess.check_output(['sh', '-c', 'echo $CELL_VAR'], text=True).strip())",
      ].join("\n"),
      { env: { CELL_VAR: "one" }, cwd: "/mnt/user-data/work" },
    );
    expect(r.stderr).toBe("");
    const [cellPid, cwd, own, child] = r.stdout.trim().split("\n");
    expect(Number(cellPid)).toBe(pid);
    expect(cwd).toBe("/mnt/user-data/work");
    expect(own).toBe("one");
    expect(child).toBe("one");
  });

  it("starts a new one after each cell, without the last cell's variables", async () => {
    const before = await spare();
    // The previous test's cell was handed the last spare: this one is new.
    const r = await cell("import os\nprint(os.getpid())\nprint(os.environ.get('CELL_VAR'))");
    expect(r.stdout.trim().split("\n")).toEqual([String(before), "None"]);
    expect(await spare()).not.toBe(before);
  });

  it("is not used for a cell that changes what start-up reads (PYTHONPATH)", async () => {
    const pid = await spare();
    await d.call(
      "/v1/commands/run",
      json({
        command: "mkdir -p /mnt/user-data/lib && echo 'WHO = 1' > /mnt/user-data/lib/extra_mod.py",
      }),
    );
    const r = await cell("import os, extra_mod\nprint(os.getpid())\nprint(extra_mod.WHO)", {
      env: { PYTHONPATH: `${d.root}/lib` },
    });
    expect(r.success, r.stderr).toBe(true);
    const [cellPid, who] = r.stdout.trim().split("\n");
    expect(Number(cellPid)).not.toBe(pid);
    expect(who).toBe("1");
    // The spare is still there for a cell that matches it.
    expect(await spare()).toBe(pid);
  });

  it("declines a cell once a site directory changed since it started, which then starts fresh", async () => {
    const pid = await spare();
    const site = (await cell("import site\nprint(site.getusersitepackages())")).stdout.trim();
    const fresh = await spare();
    expect(fresh).not.toBe(pid);
    // The user site is made after the spare started: only a fresh start puts it on sys.path.
    await d.call(
      "/v1/commands/run",
      json({ command: `mkdir -p '${site}' && echo 'USER = "user site"' > '${site}/user_mod.py'` }),
    );
    const r = await cell("import os, user_mod\nprint(os.getpid())\nprint(user_mod.USER)");
    expect(r.success, r.stderr).toBe(true);
    const [cellPid, found] = r.stdout.trim().split("\n");
    expect(Number(cellPid)).not.toBe(fresh);
    expect(found).toBe("user site");
    // And so does every cell after it.
    const again = await cell("import user_mod\nprint(user_mod.USER)");
    expect(again.stdout).toBe("user site\n");
  });

  it("reports errors and exits as a fresh interpreter does", async () => {
    await spare();
    const failed = await cell("x = 1\nraise ValueError('bad value')");
    expect(failed.success).toBe(false);
    expect(failed.error?.name).toBe("ValueError");
    expect(failed.error?.message).toBe("bad value");
    expect(failed.stderr).toContain('File "<code>", line 2');
    await spare();
    const exited = await cell("import sys\nsys.exit(3)");
    expect(exited.success).toBe(false);
    expect(exited.error?.message).toBe("process exited with code 3");
  });

  it("reports the error of a new sandbox's very first cell", async () => {
    // No cell has run here yet: the first one goes to the spare, and nothing else has made the
    // directory its error report goes to.
    const other = await startSandboxd();
    try {
      expect((await other.call("/healthz")).status).toBe(200);
      const pid = await spare(other);
      const res = await other.call(
        "/v1/code/execute",
        json({ language: "python", code: "import os\nprint(os.getpid())\nraise KeyError('k')" }),
      );
      const r = (await res.json()) as CodeResult;
      expect(r.stdout).toBe(`${pid}\n`);
      expect(r.error?.name).toBe("KeyError");
      expect(r.error?.message).toBe("'k'");
    } finally {
      await other.stop();
    }
  });

  it("times a cell from its hand-over, and is replaced after a timeout", async () => {
    const pid = await spare();
    const res = await d.call(
      "/v1/code/execute",
      json({ language: "python", code: "import time\ntime.sleep(30)", timeoutMs: 500 }),
    );
    expect(res.status).toBe(504);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("TIMEOUT");
    const next = await spare();
    expect(next).not.toBe(pid);
    expect(alive(pid)).toBe(false);
    expect((await cell("print(2)")).stdout).toBe("2\n");
  });

  it("stops with sandboxd", async () => {
    const other = await startSandboxd();
    try {
      expect((await other.call("/healthz")).status).toBe(200);
      const pid = await spare(other);
      await other.stop();
      expect(await gone(pid)).toBe(true);
    } finally {
      await other.stop();
    }
  });
});

describe("SpareRunner", () => {
  it("never starts a spare with an environment replaced while its launch was worked out", async () => {
    let env: Record<string, string> = { PYTHONPATH: "/old" };
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let launches = 0;
    // A real process stands in for the interpreter: `cat` waits on its stdin as the runner does
    // (the start time SpareRunner appends is the shell's $0).
    const spares = new SpareRunner(async (): Promise<SpareLaunch> => {
      const at = env;
      if (launches++ === 0) await gate;
      return { file: "/bin/sh", args: ["-c", "exec cat"], cwd: "/", env: at };
    });
    spares.fill();
    await new Promise((r) => setImmediate(r));
    // A /v1/init replaces the environment while the first launch is still on its way.
    env = { PYTHONPATH: "/new" };
    spares.renew(env);
    release();
    let child: ReturnType<SpareRunner["take"]>;
    for (let i = 0; i < 100 && !(child = spares.take(env)); i++)
      await new Promise((r) => setTimeout(r, 20));
    try {
      expect(child).toBeDefined();
      expect(launches).toBe(2);
      expect(spares.take({ PYTHONPATH: "/old" })).toBeUndefined();
    } finally {
      child?.kill();
      spares.close();
    }
  });
});

/** Whether `pid` has exited within 5 s. */
async function gone(pid: number): Promise<boolean> {
  for (let i = 0; i < 100 && alive(pid); i++) await new Promise((r) => setTimeout(r, 50));
  return !alive(pid);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
