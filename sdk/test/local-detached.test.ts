/**
 * The local provider's sandboxes outlive the process that started them: another process (a
 * child `node` here, as a CLI invocation would be) creates a sandbox and starts a background
 * process, then exits, or is SIGKILLed; a later process reaches the same sandboxd through the
 * state directory, and pause, kill and the reaper stop it from there.
 */
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LocalProvider } from "@sandpit/sdk";
import { bwrapAvailable } from "../src/providers/local/bwrap.ts";
import { isAlive, readRun, startTimeOf } from "../src/providers/local/detached.ts";

const SDK = fileURLToPath(new URL("../src/index.ts", import.meta.url));

/**
 * Runs `body` in a fresh node process with `provider` (a LocalProvider on `baseDir`) in scope;
 * resolves with the first line it prints, leaving the process running when `stay` is set.
 */
function inAnotherProcess(
  baseDir: string,
  isolation: "none" | "bwrap",
  body: string,
  stay = false,
): Promise<{ line: string; pid: number; exited: Promise<number | null> }> {
  const script = `
    import { LocalProvider } from ${JSON.stringify(SDK)};
    const provider = new LocalProvider({ baseDir: ${JSON.stringify(baseDir)}, isolation: ${JSON.stringify(isolation)} });
    ${body}
    ${stay ? "setInterval(() => {}, 1000);" : "await provider.close();"}
  `;
  const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).once("line", (line) =>
      resolve({ line, pid: child.pid!, exited }),
    );
    void exited.then((code) => reject(new Error(`the other process exited with ${code}`)));
  });
}

const sandboxDir = (baseDir: string, id: string) => {
  const [user, thread] = id.split(".") as [string, string];
  return join(baseDir, "users", user, "threads", thread);
};

const bwrap = await bwrapAvailable();

for (const isolation of ["none", "bwrap"] as const) {
  describe.skipIf(isolation === "bwrap" && !bwrap)(
    `local sandboxes across processes (isolation: ${isolation})`,
    () => {
      let baseDir: string;
      let provider: LocalProvider;

      beforeAll(async () => {
        baseDir = await mkdtemp(join(tmpdir(), `sandpit-detached-${isolation}-`));
        provider = new LocalProvider({ baseDir, isolation });
      });
      afterAll(async () => {
        for (const s of await provider.list())
          await (await provider.resume(s.sandboxId)).kill().catch(() => undefined);
        await provider.close();
        await rm(baseDir, { recursive: true, force: true });
      });

      it("a background process started by an exited process is listed, read and killed by a later one; kill leaves nothing", async () => {
        const { line, exited } = await inAnotherProcess(
          baseDir,
          isolation,
          `const sbx = await provider.create({ language: "python" });
           const h = await sbx.commands.run("echo started; sleep 300", { background: true, tag: "sleeper" });
           console.log(JSON.stringify({ id: sbx.sandboxId, pid: h.pid }));`,
        );
        expect(await exited).toBe(0);
        const { id, pid } = JSON.parse(line) as { id: string; pid: number };
        const dir = sandboxDir(baseDir, id);
        const run = (await readRun(dir))!;
        expect(await isAlive(run)).toBe(true);
        expect(await provider.get(id)).toMatchObject({ state: "running" });

        const sbx = await provider.resume(id);
        const listed = await sbx.commands.list();
        expect(listed).toContainEqual(expect.objectContaining({ pid, tag: "sleeper" }));
        expect(listed.find((p) => p.pid === pid)?.exitCode).toBeUndefined();
        // The same sandboxd: resume attached to it rather than starting another.
        expect(await readRun(dir)).toEqual(run);
        const handle = await sbx.commands.connect(pid);
        expect(await sbx.commands.kill(pid)).toBe(true);
        expect((await handle.wait()).exitCode).not.toBe(0);

        await sbx.kill();
        expect(await isAlive(run)).toBe(false);
        await expect(stat(dir)).rejects.toThrow();
        await expect(stat(run.socketPath)).rejects.toThrow();
      });

      it("a sandboxd whose starting process was SIGKILLed keeps serving, with its background process", async () => {
        const {
          line,
          pid: starter,
          exited,
        } = await inAnotherProcess(
          baseDir,
          isolation,
          `const sbx = await provider.create({ language: "python" });
           await sbx.filesystem.write("note.txt", "kept");
           const h = await sbx.commands.run("sleep 300", { background: true });
           console.log(JSON.stringify({ id: sbx.sandboxId, pid: h.pid }));`,
          true,
        );
        process.kill(starter, "SIGKILL");
        await exited;
        const { id, pid } = JSON.parse(line) as { id: string; pid: number };
        const sbx = await provider.resume(id);
        expect((await sbx.commands.run("cat note.txt")).stdout).toBe("kept");
        expect((await sbx.commands.list()).find((p) => p.pid === pid)?.exitCode).toBeUndefined();
        await sbx.kill();
      });

      it("pause from another process stops it; the token file is 0600 and outside what the sandbox sees", async () => {
        const sbx = await provider.create({ language: "python" });
        const dir = sandboxDir(baseDir, sbx.sandboxId);
        const run = (await readRun(dir))!;
        expect((await stat(join(dir, "sandboxd.json"))).mode & 0o777).toBe(0o600);
        // With bubblewrap nothing the sandbox can read holds the token: it sees only its mounts.
        // (Without isolation its commands are the user's own processes: no boundary to keep.)
        if (isolation === "bwrap") {
          const found = await sbx.commands.run(
            `grep -rlF ${run.token} /mnt/user-data /run /tmp /etc 2>/dev/null; ls ${dir}; true`,
          );
          expect(found.stdout).toBe("");
        }
        await provider.close();

        const other = new LocalProvider({ baseDir, isolation });
        await (await other.resume(sbx.sandboxId)).pause();
        expect(await isAlive(run)).toBe(false);
        expect(await provider.get(sbx.sandboxId)).toMatchObject({ state: "paused" });
        await other.close();
      });

      it("a run file naming a reused pid is neither attached to nor signalled", async () => {
        const sbx = await provider.create({ language: "python" });
        const dir = sandboxDir(baseDir, sbx.sandboxId);
        await sbx.pause();
        // This test process's own pid with another start time: what a reused pid looks like.
        const forged = {
          ...(await readRun(dir).then((r) => r ?? { socketPath: "/nonexistent", token: "x" })),
          pid: process.pid,
          startTime: "1",
          isolation,
          socketPath: join(dir, "nowhere.sock"),
          token: "0".repeat(64),
        };
        await writeFile(join(dir, "sandboxd.json"), JSON.stringify(forged), { mode: 0o600 });
        expect(await provider.get(sbx.sandboxId)).toMatchObject({ state: "paused" });
        const other = new LocalProvider({ baseDir, isolation });
        const again = await other.resume(sbx.sandboxId);
        expect((await again.commands.run("echo ok")).stdout).toBe("ok\n");
        expect(JSON.parse(await readFile(join(dir, "sandboxd.json"), "utf8"))).not.toMatchObject({
          pid: process.pid,
        });
        expect(await startTimeOf(process.pid)).not.toBeNull();
        await again.kill();
        await other.close();
      });

      it("a later process's reaper stops a detached sandbox past its idle timeout and deletes one past its lifetime", async () => {
        // This process's own reaper would otherwise get there first.
        await provider.close();
        const { line, exited } = await inAnotherProcess(
          baseDir,
          isolation,
          `const idle = await provider.create({ language: "python", lifetime: { idleTimeoutMs: 4000 } });
           const ttl = await provider.create({ language: "python", lifetime: { ttlMs: 4000 } });
           console.log(JSON.stringify({ idle: idle.sandboxId, ttl: ttl.sandboxId }));`,
        );
        expect(await exited).toBe(0);
        const ids = JSON.parse(line) as { idle: string; ttl: string };
        const idleRun = (await readRun(sandboxDir(baseDir, ids.idle)))!;
        const ttlRun = (await readRun(sandboxDir(baseDir, ids.ttl)))!;
        expect(await isAlive(idleRun)).toBe(true);
        expect(await isAlive(ttlRun)).toBe(true);
        await new Promise((r) => setTimeout(r, 4_200));
        const later = new LocalProvider({ baseDir, isolation });
        expect((await later.reap()).sort()).toEqual([ids.idle, ids.ttl].sort());
        expect(await isAlive(idleRun)).toBe(false);
        expect(await isAlive(ttlRun)).toBe(false);
        expect(await later.get(ids.idle)).toMatchObject({ state: "paused" });
        await expect(stat(sandboxDir(baseDir, ids.ttl))).rejects.toThrow();
        await later.close();
      });
    },
  );
}
