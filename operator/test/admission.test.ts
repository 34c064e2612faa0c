/** The per-pool maxActive ledger: admission, Reject waiters, LRU victims, trim, first build. */
import { describe, expect, it } from "vitest";
import { type PoolView, PoolAdmission } from "../src/pool/admission.ts";

/** A pool view over a plain activity table; `running` counts how often it was consulted. */
function view(o: {
  maxActive: number;
  policy?: "LRU" | "Reject";
  running?: string[];
  active?: Record<string, number>;
}): PoolView & { runningCalls: number; active: Record<string, number> } {
  const v = {
    maxActive: o.maxActive,
    policy: o.policy ?? "LRU",
    runningCalls: 0,
    active: o.active ?? {},
    running: () => {
      v.runningCalls++;
      return [...(o.running ?? [])];
    },
    lastActive: (key: string) => v.active[key] ?? 0,
  };
  return v;
}

describe("PoolAdmission", () => {
  it("admits up to maxActive", () => {
    const a = new PoolAdmission();
    const v = view({ maxActive: 2, policy: "Reject" });
    expect(a.admit("p", "s1", v)).toEqual({ admitted: true, victims: [] });
    expect(a.admit("p", "s2", v)).toEqual({ admitted: true, victims: [] });
    expect(a.activeCount("p")).toBe(2);
    expect(a.admit("p", "s3", v)).toEqual({ admitted: false });
    expect(a.activeCount("p")).toBe(2);
  });

  it("keeps a key already admitted admitted, without taking a second slot", () => {
    const a = new PoolAdmission();
    const v = view({ maxActive: 1, policy: "Reject" });
    expect(a.admit("p", "s1", v).admitted).toBe(true);
    expect(a.admit("p", "s1", v)).toEqual({ admitted: true, victims: [] });
    expect(a.activeCount("p")).toBe(1);
  });

  it("under Reject records waiters, which release() returns; a waiter admitted later stops waiting", () => {
    const a = new PoolAdmission();
    const v = view({ maxActive: 1, policy: "Reject" });
    a.admit("p", "s1", v);
    expect(a.admit("p", "s2", v)).toEqual({ admitted: false });
    expect(a.admit("p", "s3", v)).toEqual({ admitted: false });
    expect(a.release("p", "s1").sort()).toEqual(["s2", "s3"]);
    expect(a.activeCount("p")).toBe(0);
    expect(a.admit("p", "s3", v).admitted).toBe(true);
    expect(a.release("p", "s3")).toEqual(["s2"]);
  });

  it("release() of a key that holds no slot changes nothing and returns no waiters", () => {
    const a = new PoolAdmission();
    const v = view({ maxActive: 1, policy: "Reject" });
    a.admit("p", "s1", v);
    a.admit("p", "s2", v);
    expect(a.release("p", "nobody")).toEqual([]);
    expect(a.release("other-pool", "s1")).toEqual([]);
    expect(a.activeCount("p")).toBe(1);
  });

  it("keeps pools apart", () => {
    const a = new PoolAdmission();
    const v = view({ maxActive: 1, policy: "Reject" });
    expect(a.admit("p", "s1", v).admitted).toBe(true);
    expect(a.admit("q", "s2", v).admitted).toBe(true);
    expect(a.activeCount("p")).toBe(1);
    expect(a.activeCount("q")).toBe(1);
  });

  it("under LRU names the least recently active as victim, never the requester", () => {
    const a = new PoolAdmission();
    const v = view({ maxActive: 3, active: { s1: 300, s2: 100, s3: 200, s4: 0 } });
    for (const s of ["s1", "s2", "s3"]) a.admit("p", s, v);
    // s4 is the least recently active of all, but it is the one asking.
    expect(a.admit("p", "s4", v)).toEqual({ admitted: true, victims: ["s2"] });
    expect(a.isEvicting("s2")).toBe(true);
    expect(a.isEvicting("s4")).toBe(false);
    expect(a.activeCount("p")).toBe(3);
  });

  it("does not choose a key already being evicted a second time", () => {
    const a = new PoolAdmission();
    const v = view({ maxActive: 2, active: { s1: 1, s2: 2, s3: 3, s4: 4 } });
    a.admit("p", "s1", v);
    a.admit("p", "s2", v);
    expect(a.admit("p", "s3", v)).toEqual({ admitted: true, victims: ["s1"] });
    // s1 is still the least recently active on paper, but it is already on its way out.
    expect(a.admit("p", "s4", v)).toEqual({ admitted: true, victims: ["s2"] });
    expect(a.isEvicting("s1")).toBe(true);
    expect(a.isEvicting("s2")).toBe(true);
    a.evicted("s1");
    expect(a.isEvicting("s1")).toBe(false);
    expect(a.activeCount("p")).toBe(2);
  });

  it("never has more than maxActive admitted, whatever the order of requests", () => {
    const a = new PoolAdmission();
    const v = view({ maxActive: 3 });
    for (let i = 0; i < 50; i++) {
      const key = `s${i % 7}`;
      v.active[key] = i;
      const r = a.admit("p", key, v);
      expect(r.admitted).toBe(true);
      if (r.admitted) expect(r.victims).not.toContain(key);
      expect(a.activeCount("p")).toBeLessThanOrEqual(3);
      if (r.admitted) for (const victim of r.victims) a.evicted(victim);
    }
  });

  it("trim() evicts the least recently active down to a lowered maxActive", () => {
    const a = new PoolAdmission();
    const v = view({ maxActive: 4, active: { s1: 40, s2: 10, s3: 30, s4: 20 } });
    for (const s of ["s1", "s2", "s3", "s4"]) a.admit("p", s, v);
    expect(a.trim("p", v)).toEqual([]);
    v.maxActive = 2;
    expect(a.trim("p", v)).toEqual(["s2", "s4"]);
    expect(a.activeCount("p")).toBe(2);
    expect(a.trim("p", v)).toEqual([]); // already within the cap
    expect(a.isEvicting("s2") && a.isEvicting("s4")).toBe(true);
  });

  it("builds a pool's ledger from running() on first use only", () => {
    const a = new PoolAdmission();
    const v = view({ maxActive: 2, policy: "Reject", running: ["s1", "s2"] });
    expect(a.activeCount("p")).toBeUndefined();
    expect(a.admit("p", "s1", v)).toEqual({ admitted: true, victims: [] });
    expect(a.activeCount("p")).toBe(2);
    expect(a.admit("p", "s3", v)).toEqual({ admitted: false });
    a.release("p", "s2");
    expect(a.admit("p", "s3", v).admitted).toBe(true);
    expect(v.runningCalls).toBe(1); // the caches are not counted again: the ledger is the truth
  });

  it("forgetPool() makes the next use rebuild the ledger", () => {
    const a = new PoolAdmission();
    const v = view({ maxActive: 2, running: ["s1"] });
    a.admit("p", "s2", v);
    a.forgetPool("p");
    expect(a.activeCount("p")).toBeUndefined();
    a.admit("p", "s3", v);
    expect(v.runningCalls).toBe(2);
    expect(a.activeCount("p")).toBe(2);
  });
});
