/**
 * POST /v1/drain (protocol.ts, DRAIN_PATH): the idle stop decided inside sandboxd. It drains only
 * a sandbox with nothing running, idle long enough; a draining sandboxd refuses every request and
 * upgrade with `draining` (so the caller knows nothing ran) and exits with DRAINED_EXIT_CODE.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { readSettings, startSandboxd as startInProcess } from "../src/index.ts";
import { DRAINED_EXIT_CODE } from "../src/protocol.ts";
import { json, startSandboxd, type TestSandboxd } from "./helpers.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let d: TestSandboxd | undefined;
afterEach(async () => {
  await d?.stop();
  d = undefined;
});

async function drain(s: TestSandboxd, idleMs: number): Promise<{ drained: boolean }> {
  const res = await s.call("/v1/drain", json({ idleMs }));
  expect(res.status).toBe(200);
  return (await res.json()) as { drained: boolean };
}

function exitCode(s: TestSandboxd): Promise<number | null> {
  if (s.child.exitCode !== null) return Promise.resolve(s.child.exitCode);
  return new Promise((r) => s.child.once("exit", (code) => r(code)));
}

describe("POST /v1/drain", () => {
  it("needs the token, and takes only an idle time", async () => {
    d = await startSandboxd();
    expect((await fetch(`${d.url}/v1/drain`, json({ idleMs: 0 }))).status).toBe(401);
    expect((await d.call("/v1/drain", json({ idleMs: -1 }))).status).toBe(400);
    expect((await d.call("/v1/drain", json({ idleMs: 0, extra: 1 }))).status).toBe(400);
    expect(d.child.exitCode).toBeNull();
  });

  it("refuses while a command runs, a background process runs, or the idle time is short; itself it is not activity", async () => {
    d = await startSandboxd();
    const s = d;
    const running = s.call("/v1/commands/run", json({ command: "sleep 1; echo done" }));
    await sleep(300);
    expect(await drain(s, 0)).toEqual({ drained: false, idleMs: 0 });
    expect(((await (await running).json()) as { stdout: string }).stdout).toBe("done\n");

    expect((await s.call("/v1/processes", json({ command: "sleep 1.5" }))).status).toBe(201);
    await sleep(300);
    expect((await drain(s, 0)).drained).toBe(false);
    await sleep(2_000); // the process ended, and was sampled
    // Idle, but not for a minute; asking again and again does not reset the idle time.
    for (let i = 0; i < 3; i++) expect((await drain(s, 60_000)).drained).toBe(false);
    const health = (await (await fetch(`${s.url}/healthz`)).json()) as {
      idleMs: number;
      draining: boolean;
    };
    expect(health.draining).toBe(false);
    expect(health.idleMs).toBeGreaterThan(200);
    expect(s.child.exitCode).toBeNull();
    expect((await s.call("/v1/commands/run", json({ command: "echo alive" }))).status).toBe(200);
  }, 20_000);

  it("drains an idle sandboxd: it refuses what comes after, saying so, and exits with its own status", async () => {
    d = await startSandboxd();
    const s = d;
    // A keep-alive connection opened before the drain, as a provider's client holds one.
    const agentRequest = (path: string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = request(`${s.url}${path}`, {
          method: "POST",
          headers: { authorization: `Bearer ${s.token}`, "content-type": "application/json" },
        });
        req.once("response", (res) => {
          let body = "";
          res.on("data", (c: Buffer) => (body += c.toString()));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
        });
        req.once("error", reject);
        req.end(JSON.stringify({ command: "echo ran" }));
      });
    await sleep(300);
    const [drained, after] = await Promise.all([
      drain(s, 200),
      // Sent right behind the drain: refused with `draining`, or cut off by the exit; never run.
      sleep(5).then(() =>
        agentRequest("/v1/commands/run").then(
          (r) => r,
          (err: Error) => ({ status: 0, body: err.message }),
        ),
      ),
    ]);
    expect(drained.drained).toBe(true);
    expect(after.body).not.toContain("ran");
    if (after.status !== 0) {
      expect(after.status).toBe(502);
      expect(JSON.parse(after.body)).toEqual({
        error: { code: "CONNECTION_FAILED", message: expect.any(String), draining: true },
      });
    }
    expect(await exitCode(s)).toBe(DRAINED_EXIT_CODE);
  }, 20_000);
});

describe("a draining sandboxd (in process, where nothing exits)", () => {
  it("refuses every request and upgrade with `draining`, says so on /healthz, and stays drained", async () => {
    const root = await mkdtemp(join(tmpdir(), "sandboxd-drain-"));
    const token = randomBytes(32).toString("hex");
    const s = await startInProcess({
      settings: readSettings({ SANDBOXD_LISTEN: "127.0.0.1:0", SANDBOXD_ROOT: root }),
      token,
      logger: pino({ level: "silent" }),
      env: process.env,
    });
    const url = `http://${s.address}`;
    const call = (path: string, init: RequestInit = {}) =>
      fetch(url + path, {
        ...init,
        headers: { authorization: `Bearer ${token}`, ...(init.headers as Record<string, string>) },
      });
    try {
      let drained = false;
      void s.drained.then(() => (drained = true));
      const res = await call("/v1/drain", json({ idleMs: 0 }));
      expect(((await res.json()) as { drained: boolean }).drained).toBe(true);
      await sleep(50);
      expect(drained).toBe(true);
      for (const [path, init] of [
        ["/v1/commands/run", json({ command: "touch ran" })],
        ["/v1/files/list?path=.", {}],
        ["/v1/init", json({ token: "x".repeat(40) })],
      ] as const) {
        const r = await call(path, init);
        expect(r.status, path).toBe(502);
        expect(((await r.json()) as { error: unknown }).error, path).toEqual({
          code: "CONNECTION_FAILED",
          message: expect.stringContaining("stopping"),
          draining: true,
        });
      }
      // Without the token it is still the token that is wrong: a drain reveals nothing.
      expect((await fetch(`${url}/v1/files/list?path=.`)).status).toBe(401);
      const upgrade = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = request(`${url}/v1/ports/8000/tunnel`, {
          headers: { authorization: `Bearer ${token}`, connection: "Upgrade", upgrade: "tcp" },
        });
        req.once("response", (r) => {
          let body = "";
          r.on("data", (c: Buffer) => (body += c.toString()));
          r.on("end", () => resolve({ status: r.statusCode ?? 0, body }));
        });
        req.once("upgrade", () => reject(new Error("upgraded while draining")));
        req.once("error", reject);
        req.end();
      });
      expect(upgrade.status).toBe(502);
      expect(JSON.parse(upgrade.body)).toMatchObject({ error: { draining: true } });
      const health = (await (await fetch(`${url}/healthz`)).json()) as { draining: boolean };
      expect(health.draining).toBe(true);
      // Another drain (a second reaper) hears it is drained.
      const again = await call("/v1/drain", json({ idleMs: 60_000 }));
      expect(((await again.json()) as { drained: boolean }).drained).toBe(true);
    } finally {
      await s.close();
      // In-process sandboxd may still be writing its shims under .sandpit/bin as it closes.
      await rm(root, { recursive: true, force: true, maxRetries: 10, retryDelay: 50 });
    }
  });
});
