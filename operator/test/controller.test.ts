/** The controller loop: retries with backoff, terminal errors, requeues, one worker per key, stop(). */
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import {
  Controller,
  type ReconcileResult,
  type Reconciler,
  TerminalError,
} from "../src/controller/controller.ts";
import { ExponentialBackoff } from "../src/controller/workqueue.ts";

const logger = pino({ level: "silent" });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits for `cond`, failing the test after `ms`. */
async function until(cond: () => boolean, ms = 3000, what = "condition"): Promise<void> {
  const deadline = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(2);
  }
}

const controllers: Controller[] = [];
function controller(reconcile: Reconciler, workers = 2, backoff?: ExponentialBackoff): Controller {
  const c = new Controller({
    name: `test-${controllers.length}`,
    reconcile,
    logger,
    workers,
    ...(backoff ? { backoff } : {}),
  });
  controllers.push(c);
  c.start();
  return c;
}

afterEach(async () => {
  await Promise.all(controllers.splice(0).map((c) => c.stop()));
});

describe("Controller", () => {
  it("retries a reconcile that throws, with growing delays, and forgets the backoff on success", async () => {
    const calls: number[] = [];
    const c = controller(
      async () => {
        calls.push(performance.now());
        if (calls.length <= 3) throw new Error("conflict");
      },
      2,
      new ExponentialBackoff(20, 1000),
    );
    c.enqueue("ns/a");
    await until(() => calls.length === 4, 3000, "four reconciles");
    const gaps = calls.slice(1).map((t, i) => t - calls[i]!);
    // Each retry waits at least its backoff (20, 40, 80 ms); small slack for timer rounding.
    expect(gaps[0]).toBeGreaterThanOrEqual(18);
    expect(gaps[1]).toBeGreaterThanOrEqual(38);
    expect(gaps[2]).toBeGreaterThanOrEqual(78);
    expect(c.queue.backoff.retries("ns/a")).toBe(0);
    await sleep(100);
    expect(calls).toHaveLength(4); // success does not requeue
  });

  it("restarts the backoff after a success", async () => {
    let fail = true;
    let calls = 0;
    const c = controller(
      async () => {
        calls++;
        if (fail) throw new Error("not yet");
      },
      1,
      new ExponentialBackoff(10, 1000),
    );
    c.enqueue("k");
    await until(() => calls >= 3);
    expect(c.queue.backoff.retries("k")).toBeGreaterThanOrEqual(2);
    fail = false;
    await until(() => c.queue.backoff.retries("k") === 0);
  });

  it("does not retry a TerminalError", async () => {
    let calls = 0;
    const c = controller(
      async () => {
        calls++;
        throw new TerminalError("spec cannot work");
      },
      2,
      new ExponentialBackoff(5, 100),
    );
    c.enqueue("ns/a");
    await until(() => calls === 1);
    await sleep(100); // several backoff periods
    expect(calls).toBe(1);
    expect(c.queue.backoff.retries("ns/a")).toBe(0);
  });

  it("retries a thrown non-Error value like an error", async () => {
    let calls = 0;
    controller(
      async () => {
        calls++;
        if (calls === 1) throw "a string";
      },
      1,
      new ExponentialBackoff(5, 100),
    );
    controllers[0]!.enqueue("k");
    await until(() => calls === 2);
  });

  it("requeues after requeueAfterMs, not before, and not again once nothing is asked", async () => {
    const calls: number[] = [];
    const c = controller(async (): Promise<ReconcileResult | void> => {
      calls.push(performance.now());
      if (calls.length === 1) return { requeueAfterMs: 50 };
    });
    c.enqueue("ns/a");
    await until(() => calls.length === 2);
    expect(calls[1]! - calls[0]!).toBeGreaterThanOrEqual(48);
    await sleep(100);
    expect(calls).toHaveLength(2);
  });

  it("enqueue with a delay does not reconcile before it", async () => {
    const calls: number[] = [];
    const c = controller(async () => {
      calls.push(performance.now());
    });
    const start = performance.now();
    c.enqueue("k", 40);
    await until(() => calls.length === 1);
    expect(calls[0]! - start).toBeGreaterThanOrEqual(38);
  });

  it("never runs two reconciles of one key at once, and reconciles every key after its last add", async () => {
    const keys = ["a", "b", "c", "d", "e"];
    const active = new Map<string, number>();
    let overlap = 0;
    let total = 0;
    let maxTotal = 0;
    let seq = 0;
    const lastAdd = new Map<string, number>();
    const lastStart = new Map<string, number>();
    const c = controller(async (key) => {
      lastStart.set(key, ++seq);
      const n = (active.get(key) ?? 0) + 1;
      active.set(key, n);
      if (n > 1) overlap++;
      maxTotal = Math.max(maxTotal, ++total);
      await sleep(Math.random() * 3);
      total--;
      active.set(key, n - 1);
    }, 8);
    for (let round = 0; round < 60; round++) {
      for (let i = 0; i < 10; i++) {
        const key = keys[Math.floor(Math.random() * keys.length)]!;
        lastAdd.set(key, ++seq);
        c.enqueue(key);
      }
      await sleep(1);
    }
    // Level-triggered: whatever was added is reconciled after its last add.
    await until(
      () => keys.every((k) => !lastAdd.has(k) || (lastStart.get(k) ?? 0) > lastAdd.get(k)!),
      5000,
      "a reconcile after each key's last add",
    );
    await until(() => total === 0);
    expect(overlap).toBe(0);
    expect(maxTotal).toBeGreaterThan(1); // the workers did run in parallel
  });

  it("stop() waits for the reconciles in flight and starts no new ones", async () => {
    const started: string[] = [];
    const finished: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const c = controller(async (key) => {
      started.push(key);
      await gate;
      finished.push(key);
    }, 1);
    c.enqueue("a");
    await until(() => started.length === 1);
    c.enqueue("b"); // queued behind a: the only worker is busy
    let stopped = false;
    const stopping = c.stop().then(() => (stopped = true));
    await sleep(30);
    expect(stopped).toBe(false);
    release();
    await stopping;
    expect(finished).toEqual(["a"]);
    expect(started).toEqual(["a"]);
    c.enqueue("c");
    await sleep(20);
    expect(started).toEqual(["a"]);
  });
});
