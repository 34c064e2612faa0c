/** Canonical JSON: equal meaning compares equal whatever order the API server used. */
import { describe, expect, it } from "vitest";
import { canonical } from "../src/kube/canonical.ts";

describe("canonical", () => {
  it("ignores object key order at every level", () => {
    const a = { phase: "Ready", nested: { x: 1, y: { p: true, q: [1, 2] } }, podName: "a" };
    const b = { podName: "a", nested: { y: { q: [1, 2], p: true }, x: 1 }, phase: "Ready" };
    expect(canonical(a)).toBe(canonical(b));
  });

  it("ignores the order of conditions (lists of objects with a type)", () => {
    const ready = { type: "Ready", status: "True", reason: "A", message: "" };
    const scheduled = { status: "True", type: "PodScheduled", message: "", reason: "B" };
    expect(canonical({ conditions: [ready, scheduled] })).toBe(
      canonical({ conditions: [scheduled, ready] }),
    );
  });

  it("keeps the order of other lists", () => {
    expect(canonical({ ports: [80, 443] })).not.toBe(canonical({ ports: [443, 80] }));
    expect(canonical([{ name: "a" }, { name: "b" }])).not.toBe(
      canonical([{ name: "b" }, { name: "a" }]),
    );
  });

  it("treats undefined fields as absent", () => {
    expect(canonical({ a: 1, b: undefined })).toBe(canonical({ a: 1 }));
  });

  it("tells different values apart", () => {
    const ready = (status: string) => ({ conditions: [{ type: "Ready", status }] });
    expect(canonical(ready("True"))).not.toBe(canonical(ready("False")));
    expect(canonical({ a: 1 })).not.toBe(canonical({ a: "1" }));
    expect(canonical({ a: null })).not.toBe(canonical({}));
  });
});
