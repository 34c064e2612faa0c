/**
 * Contract: background processes with handles, and cancellation of foreground commands (feature
 * "background"). A target without them must refuse every call with NOT_SUPPORTED. A target
 * without "replay" is held to new output only for a new client and forgets an exited process;
 * one without "limits" to many processes at once; one without "closeStdin" refuses that call.
 */
import { randomInt, randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { SandboxInstance } from "@sandpit/sdk";
import {
  beatStops,
  expectSandboxError,
  freeHostPort,
  type ContractTarget,
  type Has,
} from "./suite.ts";

const LIMIT = 200;

export function processesContract(
  sandbox: () => SandboxInstance,
  target: () => ContractTarget,
  thread: () => string,
  has: Has,
): void {
  describe("background processes", () => {
    if (!has("background")) {
      it("are refused with NOT_SUPPORTED (the target runs commands to completion only)", async () => {
        const { commands } = sandbox();
        await expectSandboxError(commands.run("sleep 1", { background: true }), "NOT_SUPPORTED");
        await expectSandboxError(commands.list(), "NOT_SUPPORTED");
        await expectSandboxError(commands.connect(1), "NOT_SUPPORTED");
        await expectSandboxError(commands.kill(1), "NOT_SUPPORTED");
        await expectSandboxError(commands.sendStdin(1, "x"), "NOT_SUPPORTED");
        await expectSandboxError(commands.closeStdin(1), "NOT_SUPPORTED");
      });
      return;
    }
    const replay = has("replay");
    const closes = has("closeStdin");

    it("serve a dev server reached through getHost, read again from a new client", async () => {
      const sbx = sandbox();
      const port = await freeHostPort();
      await sbx.filesystem.write("dev/index.html", "dev server page");
      const before = Date.now();
      const h = await sbx.commands.run(`python3 -u -m http.server ${port} --bind 127.0.0.1`, {
        background: true,
        cwd: "/mnt/user-data/workspace/dev",
        tag: "dev-server",
      });
      expect(h.pid).toBeGreaterThan(0);
      try {
        const host = await sbx.getHost(port);
        let body = "";
        for (let i = 0; i < 150 && !body; i++) {
          body = await fetch(`http://${host}/index.html`).then(
            (r) => (r.ok ? r.text() : ""),
            () => "",
          );
          if (!body) await sleep(100);
        }
        expect(body).toBe("dev server page");

        const listed = (await sbx.commands.list()).find((p) => p.pid === h.pid);
        expect(listed).toMatchObject({
          pid: h.pid,
          command: `python3 -u -m http.server ${port} --bind 127.0.0.1`,
          cwd: "/mnt/user-data/workspace/dev",
          tag: "dev-server",
          pty: false,
        });
        expect(listed?.exitCode).toBeUndefined();
        expect(listed!.startedAt).toBeInstanceOf(Date);
        expect(Math.abs(listed!.startedAt.getTime() - before)).toBeLessThan(10 * 60_000);

        // The first client goes away; the server keeps running, and a new client replays its
        // output from the start (with replay): the banner (stdout) and the request log
        // (stderr). Without replay it sees what comes after it attached, and only that.
        await h.disconnect();
        const again = await target().provider.resume(sbx.sandboxId);
        const seen: string[] = [];
        const c = await again.commands.connect(h.pid, {
          offset: 0,
          onStderr: (d) => seen.push(d),
        });
        expect(c.pid).toBe(h.pid);
        if (replay) {
          expect(c.droppedBytes).toBe(0);
          await until(() => c.stderr.includes("GET /index.html "), "the request log is replayed");
          expect(c.stdout).toContain(`port ${port}`);
        } else {
          // Unknown: nothing was kept.
          expect(c.droppedBytes).toBe(-1);
        }
        const later = await fetch(`http://${host}/index.html?later`);
        expect(later.status).toBe(200);
        await until(() => c.stderr.includes("GET /index.html?later "), "the new request's log");
        if (!replay) {
          expect(c.stdout).toBe("");
          expect(c.stderr).not.toContain("GET /index.html ");
        }
        expect(seen.join("")).toBe(c.stderr);

        expect(await c.kill("SIGTERM")).toBe(true);
        // 128 + 15: ended by SIGTERM, as a shell reports it.
        expect((await c.wait()).exitCode).toBe(143);
        const after = (await sbx.commands.list()).find((p) => p.pid === h.pid);
        if (replay) {
          expect(after?.exitCode).toBe(143);
          expect(await sbx.commands.kill(h.pid)).toBe(false);
        } else {
          expect(after).toBeUndefined();
          await expectSandboxError(sbx.commands.kill(h.pid), "NOT_FOUND");
        }
        // The handle that saw the exit knows it.
        expect(await c.kill()).toBe(false);
      } finally {
        await sbx.commands.kill(h.pid).catch(() => undefined);
      }
    }, 120_000);

    it(
      closes
        ? "answer Python's input() through sendStdin; closeStdin gives EOF"
        : "answer Python's input() through sendStdin; closeStdin is refused with NOT_SUPPORTED",
      async () => {
        const sbx = sandbox();
        // Without closeStdin the script reads a line where it would read to the end.
        const rest = closes ? "sys.stdin.read()" : "sys.stdin.readline()";
        const script = `import sys; name = input('name? '); print('hello', name); print('rest', repr(${rest}))`;
        const h = await sbx.commands.run(`python3 -c "${script}"`, { background: true });
        await until(() => h.stdout.includes("name? "), "the prompt arrives");
        await h.sendStdin("Ada\n");
        await h.sendStdin(new TextEncoder().encode("more "));
        await sbx.commands.sendStdin(h.pid, closes ? "data" : "data\n");
        if (closes) await h.closeStdin();
        else {
          await expectSandboxError(h.closeStdin(), "NOT_SUPPORTED");
          await expectSandboxError(sbx.commands.closeStdin(h.pid), "NOT_SUPPORTED");
        }
        expect(await h.wait()).toEqual({
          exitCode: 0,
          stdout: `name? hello Ada\nrest 'more data${closes ? "" : "\\n"}'\n`,
          stderr: "",
        });
        // Exited: stdin is gone, and closing it again is a no-op.
        await expectSandboxError(h.sendStdin("late"), "CONFLICT");
        if (closes) await h.closeStdin();
      },
    );

    it("end with their whole group on kill; wait() reports, no process is left", async () => {
      const sbx = sandbox();
      const marker = `m${randomUUID().slice(0, 8)}`;
      const sleeper = `python3 -c 'import time; time.sleep(600)' ${marker}`;
      const h = await sbx.commands.run(`${sleeper} & ${sleeper}; echo never`, {
        background: true,
      });
      await until(async () => (await pythonsWith(sbx, marker)) === 2, "both sleepers run");
      expect(await h.kill("SIGTERM")).toBe(true);
      const r = await h.wait();
      expect(r.exitCode).toBe(143);
      expect(r.stdout).toBe("");
      await until(async () => (await pythonsWith(sbx, marker)) === 0, "no sleeper is left");
    });

    it(
      replay
        ? "outlive a handle that disconnects, and replay from an offset"
        : "outlive a handle that disconnects; a new client sees output from when it attaches",
      async () => {
        const sbx = sandbox();
        const gate = `gate-${randomUUID()}`;
        const h = await sbx.commands.run(
          `printf 'one\\n'; while [ ! -e ${gate} ]; do sleep 0.05; done; printf 'two\\n' >&2`,
          { background: true },
        );
        await until(() => h.stdout === "one\n", "the first line arrives");
        await h.disconnect();
        await expectSandboxError(h.wait(), "CONFLICT");
        await expectSandboxError(
          sbx.commands.connect(h.pid, { offset: "start" as "end" }),
          "INVALID_ARGUMENT",
        );
        // From the end, on every target: what the process writes from now on, and only that.
        const fromEnd = await sbx.commands.connect(h.pid, { offset: "end" });
        const endResult = fromEnd.wait();
        if (!replay) {
          // Nothing kept: no offset to replay from; the exited process is then gone.
          await expectSandboxError(sbx.commands.connect(h.pid, { offset: 4 }), "INVALID_ARGUMENT");
          const late = await sbx.commands.connect(h.pid);
          await sbx.filesystem.write(gate, "");
          expect(await late.wait()).toEqual({ exitCode: 0, stdout: "", stderr: "two\n" });
          expect(await endResult).toEqual({ exitCode: 0, stdout: "", stderr: "two\n" });
          await expectSandboxError(sbx.commands.connect(h.pid), "NOT_FOUND");
          return;
        }
        await sbx.filesystem.write(gate, "");
        expect(await endResult).toEqual({ exitCode: 0, stdout: "", stderr: "two\n" });
        const late = await sbx.commands.connect(h.pid, { offset: 4 });
        expect(await late.wait()).toEqual({ exitCode: 0, stdout: "", stderr: "two\n" });
        const full = await sbx.commands.connect(h.pid);
        expect(await full.wait()).toEqual({ exitCode: 0, stdout: "one\n", stderr: "two\n" });
      },
    );

    it(
      has("limits")
        ? `run ${LIMIT} at once, refuse the next with CAPACITY_EXCEEDED, and kill them all`
        : `run ${LIMIT + 1} at once (no limit to reach), list them, and kill them all`,
      async () => {
        const s = await target().provider.create({ language: "python", threadId: thread() });
        try {
          const tag = `bulk-${randomUUID().slice(0, 8)}`;
          // A duration of its own: other sandboxes on the same machine may share its `ps`.
          const nap = `sleep ${randomInt(100_000, 999_999)}`;
          const pids = await inBatches(LIMIT, 20, async () => {
            const h = await s.commands.run(nap, { background: true, tag });
            await h.disconnect();
            return h.pid;
          });
          if (has("limits")) {
            const err = await expectSandboxError(
              s.commands.run(nap, { background: true, tag }),
              "CAPACITY_EXCEEDED",
            );
            expect(err.message).toContain(String(LIMIT));
          } else {
            const h = await s.commands.run(nap, { background: true, tag });
            await h.disconnect();
            pids.push(h.pid);
          }
          expect(new Set(pids).size).toBe(pids.length);
          const listed = (await s.commands.list()).filter((p) => p.tag === tag);
          expect(listed.map((p) => p.pid).sort()).toEqual([...pids].sort());
          expect(listed.every((p) => p.exitCode === undefined && !p.pty)).toBe(true);

          const killed = await inBatches(pids.length, 20, (i) => s.commands.kill(pids[i]!));
          expect(killed.every(Boolean)).toBe(true);
          await until(
            async () => (await s.commands.list()).every((p) => p.exitCode !== undefined),
            "none is listed as running",
          );
          await until(
            async () => (await s.commands.run("ps -eo args")).stdout.includes(nap) === false,
            "no sleep is left",
          );
          // Room again.
          const h = await s.commands.run("echo room", { background: true });
          expect((await h.wait()).stdout).toBe("room\n");
        } finally {
          await s.kill();
        }
      },
      240_000,
    );

    it("stop when the sandbox is paused", async () => {
      const s = await target().provider.create({ language: "python", threadId: thread() });
      try {
        const marker = `m${randomUUID().slice(0, 8)}`;
        const h = await s.commands.run(`python3 -c 'import time; time.sleep(600)' ${marker}`, {
          background: true,
        });
        await until(async () => (await pythonsWith(s, marker)) === 1, "the sleeper runs");
        await h.disconnect();
        await s.pause();
        const resumed = await target().provider.resume(s.sandboxId);
        expect(await pythonsWith(resumed, marker)).toBe(0);
        expect((await resumed.commands.list()).some((p) => p.pid === h.pid)).toBe(false);
      } finally {
        await s.kill();
      }
    }, 240_000);

    it("reject bad input with INVALID_ARGUMENT and unknown pids with NOT_FOUND", async () => {
      const { commands } = sandbox();
      await expectSandboxError(commands.run("", { background: true }), "INVALID_ARGUMENT");
      for (const pid of [0, -1, 1.5, Number.NaN, "12" as unknown as number]) {
        await expectSandboxError(commands.connect(pid), "INVALID_ARGUMENT");
        await expectSandboxError(commands.kill(pid), "INVALID_ARGUMENT");
        await expectSandboxError(commands.sendStdin(pid, "x"), "INVALID_ARGUMENT");
        await expectSandboxError(commands.closeStdin(pid), "INVALID_ARGUMENT");
      }
      // No Linux pid is this large.
      const nobody = 2 ** 31 - 1;
      await expectSandboxError(commands.connect(nobody), "NOT_FOUND");
      await expectSandboxError(commands.kill(nobody), "NOT_FOUND");
      await expectSandboxError(commands.sendStdin(nobody, "x"), "NOT_FOUND");
      await expectSandboxError(commands.closeStdin(nobody), closes ? "NOT_FOUND" : "NOT_SUPPORTED");

      const h = await commands.run("sleep 600", { background: true });
      try {
        await expectSandboxError(commands.kill(h.pid, "SIGFOO" as "SIGTERM"), "INVALID_ARGUMENT");
        await expectSandboxError(commands.connect(h.pid, { offset: -1 }), "INVALID_ARGUMENT");
        await expectSandboxError(
          commands.connect(h.pid, { offset: 1_000_000 }),
          "INVALID_ARGUMENT",
        );
        await expectSandboxError(
          commands.sendStdin(h.pid, 42 as unknown as string),
          "INVALID_ARGUMENT",
        );
      } finally {
        expect(await h.kill()).toBe(true);
      }
      expect((await h.wait()).exitCode).toBe(137);
      expect((await commands.run("echo alive")).stdout).toBe("alive\n");
    });
  });

  // Cancellation runs on the same process machinery as background commands.
  if (has("background"))
    describe("cancellation", () => {
      it("an aborted foreground run is killed with its group and rejects with the reason", async () => {
        const sbx = sandbox();
        // A child counts into a file until its group is killed (see the timeout test).
        const beat = `beat-${randomUUID()}`;
        const count = `echo $i > ${beat}.tmp; mv -f ${beat}.tmp ${beat}`;
        const abort = new AbortController();
        const reason = new Error("the agent changed its mind");
        const run = sbx.commands.run(
          `(i=0; while :; do i=$((i+1)); ${count}; sleep 0.05; done) & ` +
            `until [ -s ${beat} ]; do sleep 0.01; done; echo counting; sleep 60`,
          {
            signal: abort.signal,
            onStdout: (d) => d.includes("counting") && abort.abort(reason),
          },
        );
        await expect(run).rejects.toBe(reason);
        expect(
          await beatStops(() => sbx.filesystem.read(beat)),
          "the child outlived the abort",
        ).toBe(true);

        // Without a reason, the signal's own AbortError; an aborted signal refuses at once.
        const plain = new AbortController();
        const pending = sbx.commands.run("sleep 60", { signal: plain.signal });
        setTimeout(() => plain.abort(), 200);
        await expect(pending).rejects.toMatchObject({ name: "AbortError" });
        await expect(
          sbx.commands.run("echo never", { signal: plain.signal }),
        ).rejects.toMatchObject({
          name: "AbortError",
        });
        expect((await sbx.commands.run("echo alive")).stdout).toBe("alive\n");
      }, 60_000);

      it("an abort while the run is still being set up stops it too", async () => {
        const sbx = sandbox();
        const abort = new AbortController();
        // Aborted before any request of the run has been answered.
        const run = sbx.commands.run("sleep 60", { signal: abort.signal });
        abort.abort();
        await expect(run).rejects.toMatchObject({ name: "AbortError" });
        expect((await sbx.commands.run("echo alive")).stdout).toBe("alive\n");
      }, 30_000);
    });
}

/** Live python processes in the sandbox whose command line carries `marker` (by `ps`). */
async function pythonsWith(sbx: SandboxInstance, marker: string): Promise<number> {
  const { stdout } = await sbx.commands.run("ps -eo args");
  return stdout.split("\n").filter((l) => l.startsWith("python3 -c") && l.includes(marker)).length;
}

/** Polls `check` every 100 ms for up to 20 s. */
async function until(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await sleep(100);
  }
}

/** Runs `op(0..n-1)`, at most `width` at a time; results in index order. */
async function inBatches<T>(n: number, width: number, op: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < n; i += width) {
    const batch = Array.from({ length: Math.min(width, n - i) }, (_, j) => op(i + j));
    out.push(...(await Promise.all(batch)));
  }
  return out;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
