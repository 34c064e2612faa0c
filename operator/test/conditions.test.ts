/** metav1.Condition handling with apimachinery's SetStatusCondition semantics. */
import { describe, expect, it } from "vitest";
import { type Condition, findCondition, isTrue, setCondition } from "../src/kube/conditions.ts";

const T0 = "2025-01-01T00:00:00Z";
const T1 = "2025-01-01T00:05:00Z";
const T2 = "2025-01-01T00:10:00Z";

describe("setCondition", () => {
  it("adds a condition with the given time and generation", () => {
    const out = setCondition(
      [],
      { type: "Ready", status: "False", reason: "PodPending", message: "waiting" },
      3,
      T0,
    );
    expect(out).toEqual([
      {
        type: "Ready",
        status: "False",
        reason: "PodPending",
        message: "waiting",
        observedGeneration: 3,
        lastTransitionTime: T0,
      },
    ]);
  });

  it("keeps lastTransitionTime when the status is unchanged, but takes the new reason, message and generation", () => {
    const before = setCondition(
      [],
      { type: "Ready", status: "False", reason: "PodPending", message: "waiting" },
      1,
      T0,
    );
    const after = setCondition(
      before,
      { type: "Ready", status: "False", reason: "ImagePullBackOff", message: "cannot pull" },
      2,
      T1,
    );
    expect(after).toEqual([
      {
        type: "Ready",
        status: "False",
        reason: "ImagePullBackOff",
        message: "cannot pull",
        observedGeneration: 2,
        lastTransitionTime: T0,
      },
    ]);
  });

  it("moves lastTransitionTime when the status changes", () => {
    let conds = setCondition(
      [],
      { type: "Ready", status: "False", reason: "A", message: "" },
      1,
      T0,
    );
    conds = setCondition(conds, { type: "Ready", status: "True", reason: "B", message: "" }, 1, T1);
    expect(findCondition(conds, "Ready")?.lastTransitionTime).toBe(T1);
    conds = setCondition(conds, { type: "Ready", status: "True", reason: "B", message: "" }, 1, T2);
    expect(findCondition(conds, "Ready")?.lastTransitionTime).toBe(T1);
    conds = setCondition(
      conds,
      { type: "Ready", status: "Unknown", reason: "C", message: "" },
      1,
      T2,
    );
    expect(findCondition(conds, "Ready")?.lastTransitionTime).toBe(T2);
  });

  it("keeps one condition per type and leaves the other types alone", () => {
    const scheduled: Condition = {
      type: "PodScheduled",
      status: "True",
      reason: "Scheduled",
      message: "",
      observedGeneration: 1,
      lastTransitionTime: T0,
    };
    let conds = setCondition(
      [scheduled],
      { type: "Ready", status: "False", reason: "A", message: "" },
      1,
      T1,
    );
    conds = setCondition(conds, { type: "Ready", status: "True", reason: "B", message: "" }, 2, T2);
    expect(conds).toHaveLength(2);
    expect(conds.filter((c) => c.type === "Ready")).toHaveLength(1);
    expect(findCondition(conds, "PodScheduled")).toEqual(scheduled);
    expect(isTrue(conds, "Ready")).toBe(true);
    expect(isTrue(conds, "PodScheduled")).toBe(true);
    expect(isTrue(conds, "Evicted")).toBe(false);
    expect(isTrue(undefined, "Ready")).toBe(false);
  });

  it("does not modify the list it was given", () => {
    const before = setCondition(
      [],
      { type: "Ready", status: "False", reason: "A", message: "a" },
      1,
      T0,
    );
    const copy = structuredClone(before);
    setCondition(before, { type: "Ready", status: "True", reason: "B", message: "b" }, 2, T1);
    expect(before).toEqual(copy);
  });

  it("omits observedGeneration when no generation is known", () => {
    const out = setCondition(
      [],
      { type: "Ready", status: "True", reason: "A", message: "" },
      undefined,
      T0,
    );
    expect(out[0]).not.toHaveProperty("observedGeneration");
  });
});
