/**
 * The local provider's warm pool (sdk/src/providers/local/warm-pool.ts): a create claims a
 * pre-started blank sandboxd through /v1/init. Claims are exclusive, the pool refills, a process
 * that died is replaced and never handed out, a claimed sandbox's token is in its run file only,
 * two processes creating one thread make one sandbox,
 * unclaimed processes die with the process that owns the pool (even SIGKILLed) while claimed
 * ones live on, and bad pool options are INVALID_ARGUMENT.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { LocalProvider } from "@sandpit/sdk";
import { bwrapAvailable } from "../../sdk/src/providers/local/bwrap.ts";
import { startTimeOf } from "../../sdk/src/providers/local/detached.ts";

const OWNER = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "local-pool-owner.ts");
const bwrap = await bwrapAvailable();

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

async function newProvider(warm: number, isolation: "none" | "bwrap" = "none") {
  const baseDir = await mkdtemp(join(tmpdir(), "sandpit-pool-"));
  const provider = new LocalProvider({ baseDir, isolation, warm });
  cleanups.push(async () => {
    for (const s of await provider.list())
      await (await provider.resume(s.sandboxId)).kill().catch(() => undefined);
    await provider.close();
    await rm(baseDir, { recursive: true, force: true });
  });
  return { provider, baseDir };
}

/** The pid a sandbox's run file names (the process the provider spawned or claimed). */
async function pidOf(baseDir: string, sandboxId: string): Promise<number> {
  const [user, thread] = sandboxId.split(".") as [string, string];
  const file = join(baseDir, "users", user, "threads", thread, "sandboxd.json");
  return (JSON.parse(await readFile(file, "utf8")) as { pid: number }).pid;
}

async function until(what: string, ok: () => boolean | Promise<boolean>, ms = 20_000) {
  const end = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const alive = async (pid: number) => (await startTimeOf(pid)) !== null;

describe("local warm pool", () => {
  it("gives each warm process to one create only, under concurrent creates", async () => {
    const { provider, baseDir } = await newProvider(2);
    await provider.fillWarmPool();
    const warm = provider.warmProcesses.map((w) => w.run.pid);
    expect(warm).toHaveLength(2);
    const sandboxes = await Promise.all(
      [0, 1, 2, 3].map((i) => provider.create({ language: "python", envs: { N: String(i) } })),
    );
    const pids = await Promise.all(sandboxes.map((s) => pidOf(baseDir, s.sandboxId)));
    expect(new Set(pids).size).toBe(4);
    expect(pids.filter((p) => warm.includes(p)).sort()).toEqual([...warm].sort());
    // Each got its own environment through init (or its own start).
    const out = await Promise.all(sandboxes.map((s) => s.commands.run("echo $N")));
    expect(out.map((r) => r.stdout.trim())).toEqual(["0", "1", "2", "3"]);
  });

  it("refills in the background after a claim", async () => {
    const { provider, baseDir } = await newProvider(1);
    await provider.fillWarmPool();
    const [first] = provider.warmProcesses.map((w) => w.run.pid);
    const s = await provider.create({ language: "python" });
    expect(await pidOf(baseDir, s.sandboxId)).toBe(first);
    expect(provider.warmProcesses).toHaveLength(0); // the create did not wait for the refill
    await until("the refill", () => provider.warmProcesses.length === 1);
    const refilled = provider.warmProcesses[0]!.run.pid;
    expect(refilled).not.toBe(first);
    const next = await provider.create({ language: "python" });
    expect(await pidOf(baseDir, next.sandboxId)).toBe(refilled);
  });

  it("replaces a warm process that died, and never hands it out", async () => {
    const { provider, baseDir } = await newProvider(1);
    await provider.fillWarmPool();
    const dead = provider.warmProcesses[0]!.run.pid;
    process.kill(dead, "SIGKILL");
    await until("the replacement", () => provider.warmProcesses.some((w) => w.run.pid !== dead));
    const s = await provider.create({ language: "python" });
    expect(await pidOf(baseDir, s.sandboxId)).not.toBe(dead);
    expect((await s.commands.run("echo ok")).stdout).toBe("ok\n");
  });

  it("falls back to a cold start when the claimed process died just before the claim", async () => {
    const { provider, baseDir } = await newProvider(1);
    await provider.fillWarmPool();
    const dead = provider.warmProcesses[0]!.run.pid;
    process.kill(dead, "SIGKILL");
    // No wait: the pool may not have seen the exit yet.
    const s = await provider.create({ language: "python", envs: { A: "b" } });
    expect(await pidOf(baseDir, s.sandboxId)).not.toBe(dead);
    expect((await s.commands.run("echo $A")).stdout).toBe("b\n");
    await s.filesystem.write("/mnt/user-data/workspace/x.txt", "x");
    expect(await s.filesystem.read("/mnt/user-data/workspace/x.txt")).toBe("x");
  });

  it("keeps a claimed sandbox's token in its run file (0600) only: not in sandboxd's arguments or environment, nor the sandbox's", async () => {
    const { provider, baseDir } = await newProvider(1);
    await provider.fillWarmPool();
    const { run } = provider.warmProcesses[0]!;
    const s = await provider.create({ language: "python", envs: { SEEN: "yes" } });
    const file = join(
      baseDir,
      "users",
      "default",
      "threads",
      s.sandboxId.split(".")[1]!,
      "sandboxd.json",
    );
    const record = JSON.parse(await readFile(file, "utf8")) as { pid: number; token: string };
    expect(record.pid).toBe(run.pid);
    expect(record.token).toMatch(/^[0-9a-f]{64}$/);
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    const exposed = [
      await readFile(`/proc/${run.pid}/cmdline`, "utf8"),
      await readFile(`/proc/${run.pid}/environ`, "utf8"),
      (await s.commands.run("env; cat /proc/$PPID/environ /proc/$PPID/cmdline")).stdout,
    ];
    expect(exposed[2]).toContain("SEEN=yes");
    for (const text of exposed) expect(text).not.toContain(record.token);
  });

  it("makes one sandbox of a thread that two providers create at the same moment, warm or cold", async () => {
    const { provider: a, baseDir } = await newProvider(3);
    const b = new LocalProvider({ baseDir, isolation: "none", warm: 3 });
    const cold = new LocalProvider({ baseDir, isolation: "none", warm: 0 });
    cleanups.push(
      () => b.close(),
      () => cold.close(),
    );
    await Promise.all([a.fillWarmPool(), b.fillWarmPool()]);
    const warm = [...a.warmProcesses, ...b.warmProcesses].map((w) => w.run.pid);
    // Three threads: warm against warm twice, then warm against a cold create.
    for (const [thread, other] of [
      ["same-1", b],
      ["same-2", b],
      ["same-3", cold],
    ] as const) {
      const [x, y] = await Promise.all([
        a.create({ language: "python", threadId: thread }),
        other.create({ language: "python", threadId: thread }),
      ]);
      expect(y.sandboxId).toBe(x.sandboxId);
      await x.filesystem.write("/mnt/user-data/workspace/who.txt", thread);
      expect(await y.filesystem.read("/mnt/user-data/workspace/who.txt")).toBe(thread);
      // One sandboxd serves both: the same process answers each.
      const [px, py] = await Promise.all([x, y].map((s) => s.commands.run("echo $PPID")));
      expect(py!.stdout).toBe(px!.stdout);
      expect(Number(px!.stdout)).toBe(await pidOf(baseDir, x.sandboxId));
    }
    // Every warm process either serves one of the threads or was stopped: none is left over.
    const serving = await Promise.all(
      ["same-1", "same-2", "same-3"].map((t) => pidOf(baseDir, `default.${t}`)),
    );
    const unclaimed = [...a.warmProcesses, ...b.warmProcesses].map((w) => w.run.pid);
    await until("the losing claims' processes to stop", async () => {
      const states = await Promise.all(
        warm.filter((p) => !serving.includes(p) && !unclaimed.includes(p)).map(alive),
      );
      return states.every((s) => !s);
    });
  });

  it("finishes a thread's sandbox whose maker died before writing its record", async () => {
    const baseDir = await mkdtemp(join(tmpdir(), "sandpit-pool-"));
    const provider = new LocalProvider({
      baseDir,
      isolation: "none",
      warm: 1,
      startTimeoutMs: 1_000,
    });
    cleanups.push(async () => {
      await provider.close();
      await rm(baseDir, { recursive: true, force: true });
    });
    // What a create leaves when killed between claiming the thread and writing the record.
    const data = join(baseDir, "users", "default", "threads", "half", "user-data", "workspace");
    await mkdir(data, { recursive: true });
    await writeFile(join(data, "kept.txt"), "kept");
    await provider.fillWarmPool();
    const s = await provider.create({ language: "python", threadId: "half" });
    expect(await s.filesystem.read("/mnt/user-data/workspace/kept.txt")).toBe("kept");
    expect((await s.commands.run("echo ok")).stdout).toBe("ok\n");
    expect((await provider.list()).map((i) => i.sandboxId)).toEqual(["default.half"]);
    await s.kill();
  });

  it("keeps a warm-started sandbox's files across pause and resume, and removes them at kill (from any provider)", async () => {
    const { provider, baseDir } = await newProvider(1);
    await provider.fillWarmPool();
    const dataDir = provider.warmProcesses[0]!.dataDir;
    const s = await provider.create({ language: "python" });
    await s.filesystem.write("/mnt/user-data/workspace/keep.txt", "kept");
    await s.pause();
    const again = await provider.resume(s.sandboxId);
    expect(await again.filesystem.read("/mnt/user-data/workspace/keep.txt")).toBe("kept");
    expect(existsSync(join(dataDir, "workspace", "keep.txt"))).toBe(true);
    await again.pause();
    // Killed by a provider without a pool of its own: the data goes all the same.
    const other = new LocalProvider({ baseDir, isolation: "none", warm: 0 });
    await (await other.resume(s.sandboxId)).kill();
    await other.close();
    expect(existsSync(dirname(dataDir))).toBe(false);
    expect(existsSync(join(baseDir, "users", "default"))).toBe(true);
  });

  it("makes a create with a network or mounts of its own cold", async () => {
    const { provider, baseDir } = await newProvider(1);
    await provider.fillWarmPool();
    const warm = provider.warmProcesses[0]!.run.pid;
    const s = await provider.create({ language: "python", network: "internet" });
    expect(await pidOf(baseDir, s.sandboxId)).not.toBe(warm);
    expect(provider.warmProcesses.map((w) => w.run.pid)).toEqual([warm]);
  });

  for (const isolation of ["none", "bwrap"] as const) {
    it.skipIf(isolation === "bwrap" && !bwrap)(
      `stops unclaimed processes when the owning process is SIGKILLed, not claimed ones (${isolation})`,
      async () => {
        const baseDir = await mkdtemp(join(tmpdir(), "sandpit-pool-owner-"));
        const owner = spawn(process.execPath, [OWNER, baseDir, isolation], {
          stdio: ["ignore", "pipe", "inherit"],
        });
        cleanups.push(async () => {
          owner.kill("SIGKILL");
          const p = new LocalProvider({ baseDir, isolation, warm: 0 });
          for (const s of await p.list()) await (await p.resume(s.sandboxId)).kill();
          await p.close();
          await rm(baseDir, { recursive: true, force: true });
        });
        const line = await new Promise<string>((resolve, reject) => {
          createInterface({ input: owner.stdout! }).once("line", resolve);
          owner.once("exit", (code) => reject(new Error(`owner exited with ${code}`)));
        });
        const { warm, claimed } = JSON.parse(line) as {
          warm: { pid: number; dataDir: string }[];
          claimed: number;
        };
        expect(warm).toHaveLength(2);
        // Every process of each warm sandbox: under bubblewrap, bwrap, the namespace's init and sandboxd.
        const family: number[] = [];
        const walk = async (pid: number) => {
          family.push(pid);
          const kids = await readFile(`/proc/${pid}/task/${pid}/children`, "utf8").catch(() => "");
          for (const k of kids.split(" ").filter(Boolean)) await walk(Number(k));
        };
        for (const w of warm) await walk(w.pid);
        for (const pid of family) expect(await alive(pid)).toBe(true);
        owner.kill("SIGKILL");
        await until(
          "the warm processes to go",
          async () => {
            for (const pid of family) if (await alive(pid)) return false;
            return true;
          },
          10_000,
        );
        for (const w of warm) await until("its data", () => !existsSync(dirname(w.dataDir)), 5_000);
        // The claimed sandbox is a detached sandbox like any other: it outlives its creator.
        expect(await alive(claimed)).toBe(true);
        const p = new LocalProvider({ baseDir, isolation, warm: 0 });
        const s = await p.resume("default.claimed");
        expect((await s.commands.run("echo still")).stdout).toBe("still\n");
        await p.close();
      },
    );
  }

  it("refuses bad pool options with INVALID_ARGUMENT", () => {
    for (const warm of [-1, 1.5, 17, "2"]) {
      expect(() => new LocalProvider({ warm: warm as number })).toThrow(
        expect.objectContaining({ code: "INVALID_ARGUMENT" }),
      );
    }
    const before = process.env.SANDPIT_LOCAL_WARM;
    try {
      for (const bad of ["abc", "-1", "1.5", "99"]) {
        process.env.SANDPIT_LOCAL_WARM = bad;
        expect(() => new LocalProvider({})).toThrow(
          expect.objectContaining({
            code: "INVALID_ARGUMENT",
            message: expect.stringContaining("SANDPIT_LOCAL_WARM"),
          }),
        );
      }
    } finally {
      if (before === undefined) delete process.env.SANDPIT_LOCAL_WARM;
      else process.env.SANDPIT_LOCAL_WARM = before;
    }
  });

  it("turns the pool off with warm: 0 or SANDPIT_LOCAL_WARM=0", async () => {
    const { provider } = await newProvider(0);
    const s = await provider.create({ language: "python" });
    expect((await s.commands.run("true")).exitCode).toBe(0);
    await provider.fillWarmPool();
    expect(provider.warmProcesses).toHaveLength(0);
    const before = process.env.SANDPIT_LOCAL_WARM;
    process.env.SANDPIT_LOCAL_WARM = "0";
    try {
      const off = new LocalProvider({ baseDir: join(tmpdir(), "sandpit-never-used") });
      await off.fillWarmPool();
      expect(off.warmProcesses).toHaveLength(0);
      await off.close();
    } finally {
      if (before === undefined) delete process.env.SANDPIT_LOCAL_WARM;
      else process.env.SANDPIT_LOCAL_WARM = before;
    }
  });
});
