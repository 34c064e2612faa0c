/**
 * sandboxd's isolation probe (sandboxd/src/isolation.ts): told a server its network policy must
 * refuse, sandboxd reports itself not isolated (/healthz `isolated: false`, /readyz 503) while
 * that server still answers, and isolated once connections there fail; the pod's readiness
 * probe and the operator read those. The "policy" here is the test closing its own server.
 */
import { createServer, type Server } from "node:net";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { readSettings } from "../src/config.ts";
import { startSandboxd, type TestSandboxd } from "./helpers.ts";

let d: TestSandboxd | undefined;
let target: Server | undefined;
afterEach(async () => {
  await d?.stop();
  d = undefined;
  if (target?.listening) await new Promise((r) => target!.close(r));
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const get = async (path: string) => {
  const res = await fetch(`${d!.url}${path}`);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
};

/** A TCP server on 127.0.0.1 that accepts and drops connections: the "reachable" target. */
async function listening(): Promise<number> {
  target = createServer((s) => s.destroy());
  await new Promise<void>((r) => target!.listen(0, "127.0.0.1", r));
  return (target.address() as AddressInfo).port;
}

async function until(what: string, test: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await test())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

describe("isolation probe", () => {
  it("is not isolated while the target answers, and isolated for good once it refuses", async () => {
    const port = await listening();
    d = await startSandboxd({ SANDBOXD_ISOLATION_PROBE: `127.0.0.1:${port}` });
    // Several probe rounds (200 ms apart) while the target answers: never isolated.
    for (let i = 0; i < 5; i++) {
      expect(await get("/healthz")).toMatchObject({ status: 200, body: { isolated: false } });
      expect(await get("/readyz")).toMatchObject({
        status: 503,
        body: { ready: false, reason: expect.stringContaining("network policy") },
      });
      await sleep(200);
    }
    await new Promise((r) => target!.close(r)); // the "policy" is now in force
    await until("isolated", async () => (await get("/healthz")).body.isolated === true);
    expect(await get("/readyz")).toEqual({ status: 200, body: { ready: true } });
    // It stays so when the target answers again (a policy is not taken back from a running pod).
    await new Promise<void>((r) => target!.listen(port, "127.0.0.1", r));
    await sleep(600);
    expect(await get("/readyz")).toEqual({ status: 200, body: { ready: true } });
  }, 30_000);

  it("without a probe target, reports no isolation and is ready at once", async () => {
    d = await startSandboxd();
    const health = await get("/healthz");
    expect(health.status).toBe(200);
    expect(health.body).not.toHaveProperty("isolated");
    expect(await get("/readyz")).toEqual({ status: 200, body: { ready: true } });
  });

  it("refuses a target that is not host:port at start", () => {
    for (const bad of ["10.0.0.1", "10.0.0.1:", ":443", "a b:1", "[::1]"])
      expect(() => readSettings({ SANDBOXD_ISOLATION_PROBE: bad }), bad).toThrow(
        /SANDBOXD_ISOLATION_PROBE: expected host:port/,
      );
    for (const good of ["10.0.0.1:6443", "[fd00::1]:443", "api.example:443"])
      expect(readSettings({ SANDBOXD_ISOLATION_PROBE: good }).SANDBOXD_ISOLATION_PROBE).toBe(good);
  });
});
