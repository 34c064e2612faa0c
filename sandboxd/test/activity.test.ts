/**
 * The idle measure /healthz reports (sandboxd/src/activity.ts): work that runs without a request
 * (a silent background process, an open terminal) keeps a sandbox busy, so an idle reaper that
 * reads it never suspends a sandbox in the middle of a quiet job.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Activity } from "../src/activity.ts";
import { json, startSandboxd, type TestSandboxd } from "./helpers.ts";

let d: TestSandboxd;
beforeAll(async () => {
  d = await startSandboxd();
});
afterAll(async () => {
  await d?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const idleMs = async () =>
  ((await (await fetch(`${d.url}/healthz`)).json()) as { idleMs: number }).idleMs;

describe("Activity", () => {
  it("is busy while begun work is open or a source reports work, idle from its end", () => {
    const a = new Activity(60_000);
    let busy = false;
    a.watch(() => busy);
    const end = a.begin();
    expect(a.idleMs(Date.now() + 5_000)).toBe(0);
    end();
    end(); // a second call changes nothing
    expect(a.idleMs(Date.now() + 5_000)).toBeGreaterThanOrEqual(4_900);
    busy = true;
    expect(a.idleMs(Date.now() + 10_000)).toBe(0);
    busy = false;
    // Idle counts from the last moment the source was seen busy.
    expect(a.idleMs(Date.now() + 10_500)).toBeLessThanOrEqual(600);
    a.stop();
  });
});

describe("/healthz idleMs", () => {
  it("stays 0 while a silent background process runs, and grows once it has ended", async () => {
    const res = await d.call("/v1/processes", json({ command: "sleep 2.5" }));
    expect(res.status).toBe(201);
    await sleep(1_500); // no request in flight, nothing printed
    expect(await idleMs()).toBe(0);
    await sleep(2_500); // the process has ended (and been sampled)
    const idle = await idleMs();
    expect(idle).toBeGreaterThan(0);
    expect(idle).toBeLessThan(3_000);
  }, 20_000);

  it("stays 0 while a terminal is open, even with no client attached", async () => {
    const res = await d.call("/v1/pty", json({ cols: 80, rows: 24 }));
    expect(res.status).toBe(201);
    const { pid } = (await res.json()) as { pid: number };
    await sleep(1_500);
    expect(await idleMs()).toBe(0);
    expect((await d.call(`/v1/pty/${pid}`, { method: "DELETE" })).status).toBeLessThan(300);
    await sleep(1_500);
    expect(await idleMs()).toBeGreaterThan(0);
  }, 20_000);
});
