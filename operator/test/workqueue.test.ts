/** The keyed work queue: dedup, one holder per key, delays, per-key backoff, shutdown. */
import { afterEach, describe, expect, it, vi } from "vitest";
import { ExponentialBackoff, WorkQueue } from "../src/controller/workqueue.ts";

const queues: WorkQueue[] = [];
function queue(opts: Partial<ConstructorParameters<typeof WorkQueue>[0]> = {}): WorkQueue {
  const q = new WorkQueue({ name: `test-${queues.length}`, ...opts });
  queues.push(q);
  return q;
}

/** Whether a promise settles within a few event-loop turns (real timers only). */
async function settles(p: Promise<unknown>, ms = 20): Promise<boolean> {
  let done = false;
  void p.then(
    () => (done = true),
    () => (done = true),
  );
  await new Promise((resolve) => setTimeout(resolve, ms));
  return done;
}

afterEach(async () => {
  vi.useRealTimers();
  // Stops the sampling interval; keys a test left in progress keep their shutdown pending.
  for (const q of queues.splice(0)) void q.shutdown();
});

describe("ExponentialBackoff", () => {
  it("doubles per failure up to the cap, per key, and forget() starts over", () => {
    const b = new ExponentialBackoff(5, 100);
    expect([b.when("a"), b.when("a"), b.when("a"), b.when("a"), b.when("a")]).toEqual([
      5, 10, 20, 40, 80,
    ]);
    expect(b.when("a")).toBe(100);
    expect(b.when("a")).toBe(100);
    expect(b.retries("a")).toBe(7);
    expect(b.when("b")).toBe(5); // keys are independent
    b.forget("a");
    expect(b.retries("a")).toBe(0);
    expect(b.when("a")).toBe(5);
  });
});

describe("WorkQueue", () => {
  it("holds a waiting key once however often it is added, in first-added order", async () => {
    const q = queue();
    q.add("a");
    q.add("b");
    q.add("a");
    q.add("a");
    expect(q.length).toBe(2);
    expect(await q.get()).toBe("a");
    expect(await q.get()).toBe("b");
    expect(q.length).toBe(0);
  });

  it("never hands a key in progress to a second get(); re-added meanwhile, it comes back once after done()", async () => {
    const q = queue();
    q.add("a");
    expect(await q.get()).toBe("a");
    q.add("a");
    q.add("a");
    q.add("b");
    expect(q.length).toBe(1); // only b is waiting: a is in progress
    expect(await q.get()).toBe("b");
    const second = q.get();
    expect(await settles(second)).toBe(false); // a is still held by the first worker
    q.done("a");
    expect(await second).toBe("a");
    q.done("b");
    // Exactly once: nothing else is waiting, a later get() blocks until a new add.
    expect(q.length).toBe(0);
    const third = q.get();
    expect(await settles(third)).toBe(false);
    q.done("a");
    expect(await settles(third)).toBe(false);
    q.add("c");
    expect(await third).toBe("c");
  });

  it("does not requeue a key on done() when it was not re-added", async () => {
    const q = queue();
    q.add("a");
    expect(await q.get()).toBe("a");
    q.done("a");
    expect(q.length).toBe(0);
    q.done("a"); // a second done() is harmless
    expect(q.length).toBe(0);
  });

  it("hands a key to a worker already waiting in get()", async () => {
    const q = queue();
    const waiting = q.get();
    expect(await settles(waiting)).toBe(false);
    q.add("a");
    expect(await waiting).toBe("a");
  });

  it("does not hand out a delayed key before its delay", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    const q = queue({ now: () => Date.now() });
    q.addAfter("a", 100);
    await vi.advanceTimersByTimeAsync(99);
    expect(q.length).toBe(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(q.length).toBe(1);
    expect(await q.get()).toBe("a");
  });

  it("addAfter keeps the earliest ready time", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    const q = queue({ now: () => Date.now() });
    q.addAfter("a", 100);
    q.addAfter("a", 500); // later: ignored
    await vi.advanceTimersByTimeAsync(100);
    expect(q.length).toBe(1);
    expect(await q.get()).toBe("a");
    q.done("a");

    q.addAfter("b", 500);
    q.addAfter("b", 50); // earlier: wins
    await vi.advanceTimersByTimeAsync(50);
    expect(q.length).toBe(1);
    expect(await q.get()).toBe("b");
    q.done("b");
    // The replaced 500 ms timer is gone: b is not added a second time.
    await vi.advanceTimersByTimeAsync(1000);
    expect(q.length).toBe(0);
  });

  it("addAfter with no delay adds at once", async () => {
    const q = queue();
    q.addAfter("a", 0);
    q.addAfter("b", -5);
    expect(q.length).toBe(2);
  });

  it("addRateLimited delays grow exponentially per key and forget() resets them", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    const q = queue({ now: () => Date.now(), backoff: new ExponentialBackoff(100, 10_000) });
    const readyAfter = async (key: string): Promise<number> => {
      q.addRateLimited(key);
      let waited = 0;
      while (q.length === 0) {
        expect(waited).toBeLessThan(20_000);
        await vi.advanceTimersByTimeAsync(10);
        waited += 10;
      }
      expect(await q.get()).toBe(key);
      q.done(key);
      return waited;
    };
    expect(await readyAfter("a")).toBe(100);
    expect(await readyAfter("a")).toBe(200);
    expect(await readyAfter("a")).toBe(400);
    expect(await readyAfter("b")).toBe(100);
    expect(q.backoff.retries("a")).toBe(3);
    q.forget("a");
    expect(q.backoff.retries("a")).toBe(0);
    expect(await readyAfter("a")).toBe(100);
  });

  it("shutdown() resolves waiting get() with undefined and waits for keys in progress", async () => {
    const q = queue();
    q.add("a");
    expect(await q.get()).toBe("a");
    const waiting = q.get();
    const stopped = q.shutdown();
    expect(await waiting).toBeUndefined();
    expect(await q.get()).toBeUndefined();
    expect(await settles(stopped)).toBe(false); // a is still in progress
    q.done("a");
    await expect(stopped).resolves.toBeUndefined();
  });

  it("after shutdown() hands out nothing more, not even keys that were queued, and drops adds", async () => {
    const q = queue();
    q.add("a");
    q.add("b");
    q.add("c");
    expect(await q.get()).toBe("a");
    const stopped = q.shutdown();
    expect(await q.get()).toBeUndefined();
    q.add("d");
    q.addAfter("e", 1);
    q.addRateLimited("f");
    q.add("a"); // re-added while in progress: not handed out after done() either
    q.done("a");
    await stopped;
    expect(await q.get()).toBeUndefined();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await q.get()).toBeUndefined();
  });

  it("shutdown() with nothing in progress resolves at once and cancels delayed keys", async () => {
    const q = queue();
    q.addAfter("a", 10);
    await q.shutdown();
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(q.length).toBe(0);
    expect(await q.get()).toBeUndefined();
  });
});
