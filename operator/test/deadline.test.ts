/** A reconcile's or a request's deadline: aborts on time or with its parent, and leaves nothing once cleared. */
import { afterEach, describe, expect, it, vi } from "vitest";
import { deadline } from "../src/kube/deadline.ts";

afterEach(() => {
  vi.useRealTimers();
});

describe("deadline", () => {
  it("aborts with a TimeoutError once its time is up", () => {
    vi.useFakeTimers();
    const d = deadline(1_000);
    vi.advanceTimersByTime(999);
    expect(d.signal.aborted).toBe(false);
    vi.advanceTimersByTime(1);
    expect(d.signal.aborted).toBe(true);
    expect((d.signal.reason as DOMException).name).toBe("TimeoutError");
  });

  it("aborts with its parent, for the parent's reason, and at once when the parent already has", () => {
    const parent = new AbortController();
    const d = deadline(60_000, parent.signal);
    parent.abort(new Error("shutting down"));
    expect(d.signal.aborted).toBe(true);
    expect((d.signal.reason as Error).message).toBe("shutting down");
    expect(deadline(60_000, parent.signal).signal.aborted).toBe(true);
  });

  it("once cleared, keeps no timer and no link to its parent", () => {
    vi.useFakeTimers();
    const parent = new AbortController();
    const d = deadline(1_000, parent.signal);
    expect(vi.getTimerCount()).toBe(1);
    d.clear();
    expect(vi.getTimerCount()).toBe(0);
    parent.abort();
    vi.advanceTimersByTime(5_000);
    expect(d.signal.aborted).toBe(false);
  });
});
