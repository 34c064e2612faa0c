/**
 * The Docker provider's lifecycle across processes, on a real engine and the real image: a
 * lifetime ends sandboxes that are stopped and whose creator is gone, the idle reaper of one
 * process never stops a sandbox another process is starting work in, and a cap on running
 * sandboxes holds across processes.
 */
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { DockerProvider } from "@sandpit/sdk/docker";
import { expectSandboxError } from "../contract/suite.ts";
import {
  containersNamed,
  docker,
  eventually,
  removeAll,
  runScript,
  startScript,
  volumesNamed,
} from "./helpers.ts";

const image = inject("sandboxImage");
const PREFIX = "sandpit-lc";
const BASE_PORT = 33000;

/** Options of every provider here, in this process and in scripts (as JSON). */
function options(extra: Partial<ConstructorParameters<typeof DockerProvider>[0]> = {}) {
  return {
    image,
    containerPrefix: PREFIX,
    basePort: BASE_PORT,
    idleTimeoutMs: 0,
    memoryMb: 512,
    ...extra,
  };
}

beforeAll(async () => {
  await removeAll(PREFIX);
});
afterAll(async () => {
  await removeAll(PREFIX);
});

describe("lifetimes", () => {
  it("a paused sandbox past its lifetime is removed, volume and host state included, by another process on the same state directory", async () => {
    const stateDir = await mkdtemp(join(tmpdir(), "sandpit-ttl-"));
    try {
      // The creator: another process, gone long before the lifetimes end. One lifetime is a
      // label set at create, one a setTimeout (a file in the state directory), one a claimed
      // warm container's (its labels in the state directory, its volume named after the warm
      // container it was).
      const ids = await runScript<string[]>(`
        import { DockerProvider } from "@sandpit/sdk/docker";
        const p = new DockerProvider(${JSON.stringify(options({ stateDir, warm: 1 }))});
        await p.fillWarmPool();
        const c = await p.create({ language: "python", threadId: "ttl-warm", lifetime: { ttlMs: 5000 } });
        const a = await p.create({ language: "python", threadId: "ttl-label", template: ${JSON.stringify(image)}, lifetime: { ttlMs: 5000 } });
        const b = await p.create({ language: "python", threadId: "ttl-override", template: ${JSON.stringify(image)} });
        await b.setTimeout(5000);
        for (const s of [a, b, c]) {
          await s.filesystem.write("kept.txt", "data on the volume");
          await s.pause();
        }
        console.log(JSON.stringify([a.sandboxId, b.sandboxId, c.sandboxId]));
        await p.close();
      `);
      const volumes: string[] = [];
      for (const id of ids) {
        expect(await docker("inspect", "-f", "{{.State.Running}}", id)).toBe("false");
        volumes.push(
          await docker(
            "inspect",
            "-f",
            '{{range .Mounts}}{{if eq .Destination "/mnt/user-data"}}{{.Name}}{{end}}{{end}}',
            id,
          ),
        );
      }
      // The claimed one's volume is the warm container's.
      expect(volumes).toEqual([
        `${ids[0]}-data`,
        `${ids[1]}-data`,
        expect.stringMatching(/-warm-/),
      ]);
      for (const v of volumes) expect(await volumesNamed(v)).toEqual([v]);
      const mine = async () =>
        (await readdir(stateDir)).filter((f) => ids.some((id) => f.startsWith(id)));
      expect((await mine()).length).toBeGreaterThanOrEqual(2); // override, claimed labels

      // The remover: a provider in this process that never saw them, busy with one of its own
      // (no lifetime, no idle timeout), as a long-running server would be.
      const other = new DockerProvider(options({ stateDir }));
      try {
        const own = await other.create({ language: "python", threadId: "bystander" });
        const gone = await eventually(async () => {
          for (const id of ids) if ((await containersNamed(id)).length) return false;
          return true;
        }, 20_000);
        expect(gone, "the expired containers removed").toBe(true);
        for (const v of volumes) expect(await volumesNamed(v)).toEqual([]);
        expect(await mine()).toEqual([]);
        // Its own sandbox, with no lifetime, is untouched.
        expect((await own.commands.run("echo still")).stdout).toBe("still\n");
        await own.kill();
      } finally {
        await other.close();
      }
    } finally {
      await rm(stateDir, { recursive: true, force: true });
    }
  }, 120_000);
});

describe("the idle reaper", () => {
  it("never stops a sandbox while another process starts work in it: every racing command completes with its output", async () => {
    const IDLE_MS = 400;
    const stateDir = await mkdtemp(join(tmpdir(), "sandpit-race-"));
    // The user: a provider without a reaper of its own.
    const user = new DockerProvider(options({ stateDir }));
    // The reaper: another process on the same state directory, with a short idle timeout,
    // reaping as fast as it can until its stdin closes; it prints what it stopped.
    const reaper = startScript(`
      import { DockerProvider } from "@sandpit/sdk/docker";
      const p = new DockerProvider(${JSON.stringify(options({ stateDir, idleTimeoutMs: IDLE_MS }))});
      let done = false;
      process.stdin.on("end", () => (done = true));
      process.stdin.resume();
      while (!done) {
        for (const name of await p.reapIdle()) console.log(JSON.stringify({ reaped: name }));
        await new Promise((r) => setTimeout(r, 5));
      }
      await p.close();
    `);
    const reaped: string[] = [];
    let reaperErr = "";
    reaper.stderr!.on("data", (c: Buffer) => (reaperErr += c.toString()));
    createInterface({ input: reaper.stdout! }).on("line", (l) =>
      reaped.push((JSON.parse(l) as { reaped: string }).reaped),
    );
    const exited = new Promise((r) => reaper.once("exit", r));
    const outcomes: string[] = [];
    try {
      const s = await user.create({ language: "python", threadId: "raced" });
      const deadline = Date.now() + 60_000;
      for (let i = 0; i < 30 && Date.now() < deadline; i++) {
        // Each command starts around the moment the reaper may find the sandbox idle (the idle
        // timeout, give or take 80 ms), and runs long enough that a stop would cut it.
        await new Promise((r) => setTimeout(r, IDLE_MS - 80 + Math.random() * 160));
        outcomes.push(
          await s.commands.run(`echo start-${i}; sleep 0.3; echo end-${i}`).then(
            (r) => `${r.exitCode}:${r.stdout}`,
            (e: Error) => `failed: ${e.message}`,
          ),
        );
      }
    } finally {
      reaper.stdin!.end();
      await exited;
      await user.close();
      await rm(stateDir, { recursive: true, force: true });
    }
    expect(reaperErr).toBe("");
    expect(outcomes.length).toBeGreaterThanOrEqual(10);
    expect(outcomes).toEqual(outcomes.map((_, i) => `0:start-${i}\nend-${i}\n`));
    // The race was run: the reaper did stop the sandbox between commands, again and again.
    expect(reaped.length).toBeGreaterThanOrEqual(3);
  }, 120_000);
});

/** Whether a container runs, by the engine. */
const running = async (id: string) =>
  (await docker("inspect", "-f", "{{.State.Running}}", id)) === "true";

/** Containers (or only running ones) of a prefix. */
const countOf = async (prefix: string, all = true) =>
  (
    await docker(
      "ps",
      ...(all ? ["-a"] : []),
      "--filter",
      `name=^${prefix}-`,
      "--format",
      "{{.Names}}",
    )
  )
    .split("\n")
    .filter(Boolean).length;

describe("a cap on running sandboxes (maxRunning)", () => {
  it("reject: a start at the cap fails with CAPACITY_EXCEEDED, in this process and in another; paused ones do not count, starting one again does", async () => {
    const prefix = `${PREFIX}-rj`;
    const stateDir = await mkdtemp(join(tmpdir(), "sandpit-cap-"));
    const opts = options({ stateDir, containerPrefix: prefix, maxRunning: 2 });
    const p = new DockerProvider(opts);
    try {
      const a = await p.create({ language: "python", threadId: "a" });
      const b = await p.create({ language: "python", threadId: "b" });
      const err = await expectSandboxError(
        p.create({ language: "python", threadId: "c" }),
        "CAPACITY_EXCEEDED",
      );
      expect(err.message).toContain("maxRunning");
      // Another process counts the same containers.
      const there = await runScript<string>(`
        import { DockerProvider } from "@sandpit/sdk/docker";
        const p = new DockerProvider(${JSON.stringify(opts)});
        const out = await p.create({ language: "python", threadId: "d" }).then(() => "created", (e) => e.code);
        console.log(JSON.stringify(out));
        await p.close();
      `);
      expect(there).toBe("CAPACITY_EXCEEDED");
      expect(await countOf(prefix)).toBe(2); // nothing was made for c or d

      await a.pause();
      const c = await p.create({ language: "python", threadId: "c" });
      // Starting a paused sandbox again is a start like any other.
      await expectSandboxError(a.commands.run("echo again"), "CAPACITY_EXCEEDED");
      expect(await running(a.sandboxId)).toBe(false);
      await c.kill();
      expect((await a.commands.run("echo again")).stdout).toBe("again\n");
      expect((await b.commands.run("echo b")).stdout).toBe("b\n");
    } finally {
      await p.close();
      await removeAll(prefix);
      await rm(stateDir, { recursive: true, force: true });
    }
  }, 120_000);

  it("lru: makes room by stopping the sandbox idle longest, never one with work in flight; the stopped one's next call starts it again", async () => {
    const prefix = `${PREFIX}-lru`;
    const stateDir = await mkdtemp(join(tmpdir(), "sandpit-cap-"));
    const p = new DockerProvider(
      options({ stateDir, containerPrefix: prefix, maxRunning: 2, onCapacity: "lru" }),
    );
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    try {
      const a = await p.create({ language: "python", threadId: "a" });
      const b = await p.create({ language: "python", threadId: "b" });
      // a, the least recently used by its creation, has work in flight; b has been idle.
      const aWork = a.commands.run("sleep 4; echo a-done");
      await sleep(1_500);
      const c = await p.create({ language: "python", threadId: "c" });
      expect(await running(b.sandboxId)).toBe(false);
      expect(await running(a.sandboxId)).toBe(true);
      expect((await aWork).stdout).toBe("a-done\n");
      await sleep(1_000);
      // b comes back; c has been idle longest now (a just finished), so c makes room.
      expect((await b.commands.run("echo b-back")).stdout).toBe("b-back\n");
      expect(await running(c.sandboxId)).toBe(false);
      expect(await running(a.sandboxId)).toBe(true);
      expect(await countOf(prefix, false)).toBe(2);

      // Both running ones busy: nothing to stop, so no room.
      const works = [a, b].map((s) => s.commands.run("sleep 3; echo done"));
      await sleep(500);
      const err = await expectSandboxError(
        p.create({ language: "python", threadId: "d" }),
        "CAPACITY_EXCEEDED",
      );
      expect(err.message).toContain("work in flight");
      for (const w of works) expect((await w).stdout).toBe("done\n");
      expect(await countOf(prefix)).toBe(3);
    } finally {
      await p.close();
      await removeAll(prefix);
      await rm(stateDir, { recursive: true, force: true });
    }
  }, 120_000);

  it("processes racing for the last place: as many start as the cap allows, the others fail with CAPACITY_EXCEEDED and leave nothing behind", async () => {
    const prefix = `${PREFIX}-rc`;
    const stateDir = await mkdtemp(join(tmpdir(), "sandpit-cap-"));
    const opts = options({ stateDir, containerPrefix: prefix, maxRunning: 2 });
    const p = new DockerProvider(opts);
    try {
      await p.create({ language: "python", threadId: "first" });
      const outcomes = await Promise.all(
        [0, 1, 2].map((i) =>
          runScript<string>(`
            import { DockerProvider } from "@sandpit/sdk/docker";
            const p = new DockerProvider(${JSON.stringify(opts)});
            const out = await p.create({ language: "python", threadId: "racer-${i}" }).then(
              async (s) => (await s.commands.run("echo ran")).stdout.trim(),
              (e) => e.code,
            );
            console.log(JSON.stringify(out));
            await p.close();
          `),
        ),
      );
      expect(outcomes.sort()).toEqual(["CAPACITY_EXCEEDED", "CAPACITY_EXCEEDED", "ran"]);
      expect(await countOf(prefix, false)).toBe(2);
      expect(await countOf(prefix)).toBe(2);
      expect(await volumesNamed(`${prefix}-`)).toHaveLength(2);
    } finally {
      await p.close();
      await removeAll(prefix);
      await rm(stateDir, { recursive: true, force: true });
    }
  }, 180_000);
});
