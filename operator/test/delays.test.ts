import { afterEach, beforeEach, describe, expect, test, vi } from "vitest";
import { Delays } from "../src/controller/delays.ts";

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe("Delays", () => {
  const make = () => {
    const fired: string[] = [];
    const d = new Delays(
      (k) => fired.push(k),
      () => Date.now(),
    );
    return { d, fired };
  };

  test("fires keys in due order behind a single timer, however many wait", () => {
    const { d, fired } = make();
    for (let i = 0; i < 1000; i++) d.add(`k${i}`, Date.now() + 1000 + ((i * 7919) % 1000));
    expect(vi.getTimerCount()).toBe(1);
    vi.advanceTimersByTime(1500);
    expect(fired.length).toBeGreaterThan(400);
    expect(fired.length).toBeLessThan(600);
    vi.advanceTimersByTime(1000);
    expect(fired).toHaveLength(1000);
    const order = fired.map((k) => (Number(k.slice(1)) * 7919) % 1000);
    expect(order).toEqual([...order].sort((a, b) => a - b));
    expect(d.size).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });

  test("the earlier due time wins and a key fires once", () => {
    const { d, fired } = make();
    const t0 = Date.now();
    d.add("a", t0 + 500);
    d.add("a", t0 + 100);
    d.add("a", t0 + 900);
    expect(d.dueAt("a")).toBe(t0 + 100);
    vi.advanceTimersByTime(100);
    expect(fired).toEqual(["a"]);
    vi.advanceTimersByTime(1000);
    expect(fired).toEqual(["a"]);
  });

  test("a key moved earlier many times leaves a bounded heap", () => {
    const { d, fired } = make();
    const t0 = Date.now();
    for (let i = 0; i < 10_000; i++) d.add("hot", t0 + 100_000 - i);
    d.add("cold", t0 + 50);
    vi.advanceTimersByTime(100_000);
    expect(fired).toEqual(["cold", "hot"]);
  });

  test("clear drops every key and the timer", () => {
    const { d, fired } = make();
    d.add("a", Date.now() + 10);
    d.clear();
    vi.advanceTimersByTime(100);
    expect(fired).toEqual([]);
    expect(vi.getTimerCount()).toBe(0);
  });
});
