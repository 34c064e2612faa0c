import { afterEach, expect, test, vi } from "vitest";
import { Expectations } from "../src/context.ts";

afterEach(() => {
  vi.useRealTimers();
});

test("writes never seen nor asked about again are swept once expired", () => {
  vi.useFakeTimers({ toFake: ["performance"] });
  const e = new Expectations(1_000);
  for (let i = 0; i < 1_000; i++) e.expect(`old-${i}`);
  vi.advanceTimersByTime(2_000);
  for (let i = 0; i < 10; i++) e.expect(`new-${i}`);
  expect(e.size).toBe(10);
  expect(e.pending("new-0")).toBe(true);
  expect(e.pending("old-0")).toBe(false);
});
