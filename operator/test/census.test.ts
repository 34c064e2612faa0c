/** The census of the caches and the gauges it feeds at each scrape. */
import { afterEach, describe, expect, it } from "vitest";
import type { Sandbox, SandboxPool } from "../src/api/v1alpha1.ts";
import { Census } from "../src/census.ts";
import { countFrom, registry } from "../src/metrics.ts";

const T0 = Date.parse("2026-01-01T00:00:00Z");
const iso = (ms: number) => new Date(ms).toISOString();

function sandbox(
  name: string,
  phase: NonNullable<Sandbox["status"]>["phase"] | undefined,
  o: { namespace?: string; createdAt?: number } = {},
): Sandbox {
  return {
    apiVersion: "sandpit.dev/v1alpha1",
    kind: "Sandbox",
    metadata: {
      name,
      namespace: o.namespace ?? "team-a",
      uid: `uid-${name}`,
      creationTimestamp: iso(o.createdAt ?? T0 - 3_600_000),
    },
    spec: {} as Sandbox["spec"],
    ...(phase ? { status: { phase } } : {}),
  } as Sandbox;
}

function pool(name: string, maxActive: number, warm: number, active?: number, warmReady?: number) {
  return {
    apiVersion: "sandpit.dev/v1alpha1",
    kind: "SandboxPool",
    metadata: { name, namespace: "team-a", uid: `uid-${name}` },
    spec: { maxActive, warm } as SandboxPool["spec"],
    ...(active !== undefined ? { status: { active, warmReady } } : {}),
  } as SandboxPool;
}

/** A census over lists the test changes, on a clock the test moves. */
function fixture() {
  const state = { now: T0, sandboxes: [] as Sandbox[], pools: [] as SandboxPool[] };
  const census = new Census(
    { sandboxes: () => state.sandboxes, pools: () => state.pools },
    () => state.now,
  );
  return { state, census };
}

afterEach(() => countFrom(undefined));

describe("Census", () => {
  it("counts Sandboxes by namespace and phase, zeros included; one without a status is Pending", () => {
    const { state, census } = fixture();
    state.sandboxes = [
      sandbox("a", "Ready"),
      sandbox("b", "Ready"),
      sandbox("c", undefined),
      sandbox("d", "Failed", { namespace: "team-b" }),
    ];
    const s = census.sample();
    expect(s.phases.get("team-a")).toEqual({
      Pending: 1,
      Starting: 0,
      Ready: 2,
      Suspended: 0,
      Failed: 0,
      Terminating: 0,
    });
    expect(s.phases.get("team-b")).toMatchObject({ Failed: 1, Pending: 0 });
    expect([...s.phases.keys()].sort()).toEqual(["team-a", "team-b"]);
  });

  it("times the oldest Pending Sandbox from when it could first have become Pending", () => {
    const { state, census } = fixture();
    // Pending since before the operator started: counted from the start, not from its creation.
    state.sandboxes = [sandbox("old", "Pending"), sandbox("ok", "Ready")];
    state.now = T0 + 30_000;
    expect(census.sample().pendingOldestSeconds.get("team-a")).toBe(30);
    // Created after the previous count: counted from its creation.
    state.now = T0 + 90_000;
    state.sandboxes = [
      sandbox("ok", "Ready"),
      sandbox("new", "Pending", { createdAt: T0 + 80_000 }),
    ];
    expect(census.sample().pendingOldestSeconds.get("team-a")).toBe(10);
    // A Ready one that goes back to Pending: from the previous count, when it was not yet.
    state.now = T0 + 150_000;
    state.sandboxes = [
      sandbox("ok", "Pending"),
      sandbox("new", "Pending", { createdAt: T0 + 80_000 }),
    ];
    expect(census.sample().pendingOldestSeconds.get("team-a")).toBe(70);
    state.now = T0 + 200_000;
    expect(census.sample().pendingOldestSeconds.get("team-a")).toBe(120);
    // Once none is Pending the namespace reports 0, and a Sandbox Pending again starts over.
    state.now = T0 + 260_000;
    state.sandboxes = [sandbox("ok", "Ready"), sandbox("new", "Ready")];
    expect(census.sample().pendingOldestSeconds.get("team-a")).toBe(0);
    state.now = T0 + 300_000;
    state.sandboxes = [sandbox("ok", "Pending")];
    expect(census.sample().pendingOldestSeconds.get("team-a")).toBe(40);
  });

  it("reads each pool's maxActive, active, warm and warmReady", () => {
    const { state, census } = fixture();
    state.pools = [pool("busy", 10, 2, 10, 0), pool("fresh", 5, 0)];
    expect(census.sample().pools).toEqual([
      { namespace: "team-a", pool: "busy", maxActive: 10, active: 10, warm: 2, warmReady: 0 },
      { namespace: "team-a", pool: "fresh", maxActive: 5, active: 0, warm: 0, warmReady: 0 },
    ]);
  });
});

describe("the census gauges", () => {
  it("are exported at each scrape from the census the manager set, and vanish without one", async () => {
    const { state, census } = fixture();
    state.sandboxes = [sandbox("a", "Ready"), sandbox("b", "Pending", { createdAt: T0 - 5_000 })];
    state.pools = [pool("busy", 10, 2, 7, 1)];
    countFrom(() => census.sample());
    state.now = T0 + 42_000;
    const text = await registry.metrics();
    for (const line of [
      'sandpit_sandboxes{sandbox_namespace="team-a",phase="Ready"} 1',
      'sandpit_sandboxes{sandbox_namespace="team-a",phase="Pending"} 1',
      'sandpit_sandboxes{sandbox_namespace="team-a",phase="Suspended"} 0',
      'sandpit_sandbox_pending_oldest_seconds{sandbox_namespace="team-a"} 42',
      'sandpit_pool_max_active{sandbox_namespace="team-a",pool="busy"} 10',
      'sandpit_pool_active{sandbox_namespace="team-a",pool="busy"} 7',
      'sandpit_pool_warm{sandbox_namespace="team-a",pool="busy"} 2',
      'sandpit_pool_warm_ready{sandbox_namespace="team-a",pool="busy"} 1',
    ])
      expect(text.split("\n")).toContain(line);
    // The next scrape reads the caches again.
    state.now = T0 + 50_000;
    state.sandboxes = [sandbox("a", "Ready"), sandbox("b", "Ready")];
    const again = await registry.metrics();
    expect(again).toContain('sandpit_sandboxes{sandbox_namespace="team-a",phase="Ready"} 2');
    expect(again).toContain('sandpit_sandbox_pending_oldest_seconds{sandbox_namespace="team-a"} 0');
    countFrom(undefined);
    const none = await registry.metrics();
    expect(none).toContain("# TYPE sandpit_sandboxes gauge");
    expect(none).not.toMatch(/^sandpit_sandboxes\{/m);
    expect(none).not.toMatch(/^sandpit_pool_active\{/m);
  });
});
