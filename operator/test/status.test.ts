/**
 * A Sandbox's status writes: one apply when anything changed, and while a start drags on, its
 * shown progress (the Ready condition's reason, its moves between Pending and Starting)
 * rewritten at most once per PROGRESS_EVERY_MS, a held-back write saying so (heldBack).
 */
import { describe, expect, it } from "vitest";
import type { Sandbox } from "../src/api/index.ts";
import { Expectations } from "../src/context.ts";
import { PROGRESS_EVERY_MS, SandboxStatusBuilder } from "../src/sandbox/status.ts";
import { fakeCtx } from "./fake-ctx.ts";

const sandbox = (status?: Sandbox["status"]): Sandbox =>
  ({
    apiVersion: "sandpit.dev/v1alpha1",
    kind: "Sandbox",
    metadata: { name: "s", namespace: "ns", uid: "uid-s", generation: 1, resourceVersion: "7" },
    spec: {},
    ...(status ? { status } : {}),
  }) as Sandbox;

/** What the API server would hold after each write: the written status. */
function writer() {
  const { ctx, writes } = fakeCtx({});
  ctx.progressShown = new Expectations(PROGRESS_EVERY_MS);
  let current = sandbox();
  let built: SandboxStatusBuilder | undefined;
  const last = () => built!;
  const step = async (f: (st: SandboxStatusBuilder) => void) => {
    const st = (built = new SandboxStatusBuilder(current, new Date()));
    f(st);
    const before = writes.length;
    await st.write(ctx);
    if (writes.length > before) {
      current = sandbox((writes.at(-1)![2] as { status: Sandbox["status"] }).status);
    }
    return writes.length > before;
  };
  return { step, ctx, last };
}

describe("status writes", () => {
  it("writes nothing when nothing changed", async () => {
    const { step } = writer();
    expect(await step((st) => st.phaseIs("Starting", "PodCreated", "pod made"))).toBe(true);
    expect(await step((st) => st.phaseIs("Starting", "PodCreated", "pod made"))).toBe(false);
  });

  it("shows a start's first reason at once, and a later one only once the last is old enough", async () => {
    const { step, ctx } = writer();
    expect(await step((st) => st.phaseIs("Starting", "PodCreated", "pod made"))).toBe(true);
    // Progress alone, right after: not written.
    expect(await step((st) => st.phaseIs("Starting", "SandboxdStarting", "sandboxd starts"))).toBe(
      false,
    );
    // Anything else with it: written at once, progress and all.
    expect(
      await step((st) =>
        st.phaseIs("Starting", "SandboxdStarting", "sandboxd starts").set({ podName: "p" }),
      ),
    ).toBe(true);
    expect(await step((st) => st.phaseIs("Starting", "NetworkPolicyPending", "waiting"))).toBe(
      false,
    );
    // Another condition is progress too.
    expect(
      await step((st) =>
        st.condition({ type: "DiskEnforced", status: "True", reason: "Bounded", message: "m" }),
      ),
    ).toBe(false);
    // The window over (its record expired): the progress goes out.
    ctx.progressShown.observed("uid-s");
    expect(await step((st) => st.phaseIs("Starting", "NetworkPolicyPending", "waiting"))).toBe(
      true,
    );
    // Ready is never held back.
    expect(await step((st) => st.phaseIs("Ready", "SandboxReady", "ready"))).toBe(true);
  });

  it("holds back a start's moves between Pending and Starting like its reasons, and says so", async () => {
    const { step, ctx, last } = writer();
    expect(await step((st) => st.phaseIs("Starting", "PodCreated", "pod made"))).toBe(true);
    expect(last().heldBack).toBe(false);
    // Not on a node yet, then on one: progress, held within the window.
    expect(await step((st) => st.phaseIs("Pending", "Unschedulable", "0/1 nodes"))).toBe(false);
    expect(last().heldBack).toBe(true);
    expect(await step((st) => st.phaseIs("Starting", "ContainerCreating", "starting"))).toBe(false);
    // The window over: the move goes out, and opens a new window.
    ctx.progressShown.observed("uid-s");
    expect(await step((st) => st.phaseIs("Pending", "Unschedulable", "0/1 nodes"))).toBe(true);
    expect(last().heldBack).toBe(false);
    expect(await step((st) => st.phaseIs("Starting", "ContainerCreating", "starting"))).toBe(false);
    // A move out of a start is not progress: Failed goes at once.
    expect(await step((st) => st.phaseIs("Failed", "TooManyRecreations", "gave up"))).toBe(true);
  });

  it("writes the first move into a start at once, after Ready too", async () => {
    const { step } = writer();
    expect(await step((st) => st.phaseIs("Ready", "SandboxReady", "ready"))).toBe(true);
    expect(await step((st) => st.phaseIs("Pending", "Unschedulable", "pod gone"))).toBe(true);
  });
});
