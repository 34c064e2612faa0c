/**
 * The commands that need the SDK's newer provider surface (list, get, setTimeout, getUrl) and,
 * for background processes and port forwards, sandboxes that keep running after the CLI
 * process that started something in them has exited.
 */
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CliHarness, MAIN } from "./harness.ts";

const cli = new CliHarness();
let id: string;

beforeAll(async () => {
  id = (await cli.ok(["create", "--label", "team=cli", "--label", "run=a"])).trim();
}, 120_000);

afterAll(async () => {
  await cli.run(["rm", id]);
  await cli.cleanup();
});

describe("ls, info, timeout, port", () => {
  it("ls lists the sandbox; --label filters; --json parses", async () => {
    const other = (await cli.ok(["create", "--label", "team=other"])).trim();
    try {
      const all = JSON.parse(await cli.ok(["--json", "ls"])) as Array<{ sandboxId: string }>;
      expect(all.map((s) => s.sandboxId)).toEqual(expect.arrayContaining([id, other]));
      const mine = JSON.parse(await cli.ok(["--json", "ls", "--label", "team=cli"])) as Array<{
        sandboxId: string;
        labels: Record<string, string>;
      }>;
      expect(mine.map((s) => s.sandboxId)).toEqual([id]);
      expect(mine[0]!.labels).toMatchObject({ team: "cli", run: "a" });
      expect(await cli.ok(["ls", "--label", "team=cli", "--label", "run=b"])).toBe(
        "ID  STATE  LANGUAGE  CREATED  LABELS\n",
      );
      expect(await cli.ok(["ls"])).toMatch(
        new RegExp(`^${id.replace(".", "\\.")}\\s+\\w+\\s+python`, "m"),
      );
    } finally {
      await cli.ok(["rm", other]);
    }
  });

  it("info shows the sandbox; a paused one stays paused; unknown IDs are one line, exit 1", async () => {
    const info = JSON.parse(await cli.ok(["--json", "info", id])) as Record<string, unknown>;
    expect(info).toMatchObject({ sandboxId: id, provider: "local", language: "python" });
    expect(await cli.ok(["info", id])).toMatch(new RegExp(`^id: ${id.replace(".", "\\.")}\\n`));
    await cli.ok(["pause", id]);
    expect(JSON.parse(await cli.ok(["--json", "info", id]))).toMatchObject({ state: "paused" });
    expect(JSON.parse(await cli.ok(["--json", "info", id]))).toMatchObject({ state: "paused" });
    const r = await cli.run(["info", "default.nope"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^sandpit: [^\n]+\n$/);
  });

  it("timeout sets the lifetime info reports", async () => {
    const before = Date.now();
    await cli.ok(["timeout", id, "2h"]);
    const { expiresAt } = JSON.parse(await cli.ok(["--json", "info", id])) as { expiresAt: string };
    const ms = new Date(expiresAt).getTime() - before;
    expect(ms).toBeGreaterThan(2 * 3_600_000 - 60_000);
    expect(ms).toBeLessThan(2 * 3_600_000 + 60_000);
  });

  it("port prints a URL with a scheme; --json gives {url, headers}", async () => {
    expect(await cli.ok(["port", id, "8000"])).toMatch(/^https?:\/\/\S+\n$/);
    const url = JSON.parse(await cli.ok(["--json", "port", id, "8000"])) as Record<string, unknown>;
    expect(url).toMatchObject({
      url: expect.stringMatching(/^https?:\/\//),
      headers: expect.any(Object),
    });
  });
});

describe("background processes across invocations", () => {
  it("exec -d starts one; ps lists it; logs prints its output; logs -f follows to its exit code", async () => {
    const pid = Number(
      (
        await cli.ok([
          "exec",
          "-d",
          "--tag",
          "ticker",
          id,
          "--",
          "for i in 1 2 3 4; do echo tick $i; sleep 1; done; exit 4",
        ])
      ).trim(),
    );
    expect(pid).toBeGreaterThan(0);
    const ps = JSON.parse(await cli.ok(["--json", "ps", id])) as Array<{
      pid: number;
      tag?: string;
    }>;
    expect(ps).toContainEqual(expect.objectContaining({ pid, tag: "ticker" }));
    expect(await cli.ok(["logs", id, String(pid)])).toMatch(/^tick 1\n/);
    const follow = await cli.run(["logs", "-f", id, String(pid)]);
    expect(follow).toEqual({ code: 4, stdout: "tick 1\ntick 2\ntick 3\ntick 4\n", stderr: "" });
    expect(await cli.ok(["logs", "--offset", "7", id, String(pid)])).toBe(
      "tick 2\ntick 3\ntick 4\n",
    );
  });

  it("a background process outlives the CLI process that started it: a later one lists, reads and kills it", async () => {
    const fresh = (await cli.ok(["create"])).trim();
    try {
      const pid = Number(
        (
          await cli.ok([
            "exec",
            "-d",
            fresh,
            "--",
            "i=0; while true; do i=$((i+1)); echo n$i; sleep 0.2; done",
          ])
        ).trim(),
      );
      // Every command below is a new process; the loop keeps printing in between.
      await new Promise((r) => setTimeout(r, 1_000));
      const running = JSON.parse(await cli.ok(["--json", "ps", fresh])) as Array<{
        pid: number;
        exitCode?: number;
      }>;
      expect(running.find((p) => p.pid === pid)).toMatchObject({ pid });
      expect(running.find((p) => p.pid === pid)?.exitCode).toBeUndefined();
      const first = await cli.ok(["logs", fresh, String(pid)]);
      expect(first).toMatch(/^n1\nn2\n/);
      await new Promise((r) => setTimeout(r, 600));
      const later = await cli.ok(["logs", fresh, String(pid)]);
      expect(later.length).toBeGreaterThan(first.length);
      expect(JSON.parse(await cli.ok(["--json", "kill", fresh, String(pid)]))).toMatchObject({
        pid,
        delivered: true,
      });
      const ps = JSON.parse(await cli.ok(["--json", "ps", fresh])) as Array<{
        pid: number;
        exitCode?: number;
      }>;
      expect(ps.find((p) => p.pid === pid)?.exitCode).toBe(137);
    } finally {
      await cli.ok(["rm", fresh]);
    }
  });

  it("kill signals a process group; ps shows it exited", async () => {
    const pid = (await cli.ok(["exec", "-d", id, "--", "sleep", "300"])).trim();
    expect(JSON.parse(await cli.ok(["--json", "kill", "-s", "SIGTERM", id, pid]))).toEqual({
      pid: Number(pid),
      signal: "SIGTERM",
      delivered: true,
    });
    const ps = JSON.parse(await cli.ok(["--json", "ps", id])) as Array<{
      pid: number;
      exitCode?: number;
    }>;
    expect(ps.find((p) => p.pid === Number(pid))?.exitCode).toBe(143);
  });

  it("port --forward carries connections to a server in the sandbox until Ctrl-C", async () => {
    await cli.ok(["exec", "-d", id, "--", "python3 -m http.server 8765 --bind 127.0.0.1"]);
    const child = spawn(process.execPath, [MAIN, "port", "--forward", "0", id, "8765"], {
      cwd: cli.cwd,
      env: cli.env(),
      stdio: ["ignore", "pipe", "pipe"],
    });
    try {
      const url = await new Promise<string>((resolve) =>
        createInterface({ input: child.stdout }).once("line", resolve),
      );
      let body = "";
      for (let i = 0; i < 50 && !body; i++) {
        body = await fetch(url).then(
          (r) => r.text(),
          () => "",
        );
        if (!body) await new Promise((r) => setTimeout(r, 200));
      }
      expect(body).toContain("Directory listing");
    } finally {
      child.kill("SIGINT");
    }
    expect(await new Promise((r) => child.once("close", r))).toBe(0);
  });
});
