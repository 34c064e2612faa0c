/**
 * The operator's side of "limits are policy" (operator/src/api/bounds.ts): which bounds a
 * sandbox's effective spec is held to, the reason it is refused with, the CRD's zero rule, and
 * the settings that set the platform's bounds.
 */
import { describe, expect, it } from "vitest";
import { PLATFORM_BOUNDS, SandboxPoolSpec, SandboxSpec } from "../src/api/index.ts";
import { readConfig } from "../src/config.ts";
import { boundsViolation, effectiveSpec } from "../src/workload/spec.ts";

const cfg = readConfig({});
const pool = SandboxPoolSpec.parse({
  maxActive: 2,
  template: { resources: { memory: "256Mi" } },
  resourceBounds: { min: { memory: "128Mi" }, max: { memory: "512Mi", disk: "2Gi" } },
});
const violation = (spec: unknown, p = pool as SandboxPoolSpec | undefined) =>
  boundsViolation(effectiveSpec(SandboxSpec.parse(spec), p, cfg), p, cfg);

describe("a sandbox's bounds", () => {
  it("holds the pool's template and defaults, and its own asks, to the pool's bounds", () => {
    expect(violation({})).toBeUndefined();
    expect(violation({ resources: { memory: "1Gi" } })).toBe(
      "memory 1Gi is above this pool's maximum 512Mi",
    );
    expect(violation({ resources: { memory: "64Mi" } })).toBe(
      "memory 64Mi is below this pool's minimum 128Mi",
    );
    expect(violation({ storage: { size: "3Gi" } })).toBe(
      "disk (storage.size) 3Gi is above this pool's maximum 2Gi",
    );
    // A shared claim's size is not the sandbox's to ask for.
    expect(
      violation({
        storage: { size: "3Gi", sharedClaim: { claimName: "shared", subPath: "u/{user}" } },
      }),
    ).toBeUndefined();
  });

  it("holds what the pool leaves open, and pool-less sandboxes, to the platform's", () => {
    expect(violation({ resources: { cpu: "64" } })).toBe(
      "cpu 64 is above the platform's maximum 4",
    );
    expect(violation({ resources: { cpu: "5m" } }, undefined)).toBe(
      "cpu 5m is below the platform's minimum 10m",
    );
    expect(violation({}, undefined)).toBeUndefined(); // the operator's defaults keep them
  });

  it("refuses zero in the schema (and in the CRD's CEL)", () => {
    for (const q of ["0", "0m", "0.0Gi"]) {
      expect(SandboxSpec.safeParse({ resources: { memory: q } }).success, q).toBe(false);
      expect(SandboxSpec.safeParse({ storage: { size: q } }).success, q).toBe(false);
      expect(
        SandboxPoolSpec.safeParse({
          maxActive: 1,
          template: {},
          resourceBounds: { max: { cpu: q } },
        }).success,
      ).toBe(false);
    }
  });
});

describe("the platform's bounds", () => {
  it("default, and are set by SANDPIT_MIN_* and SANDPIT_MAX_*", () => {
    expect(cfg.bounds).toEqual(PLATFORM_BOUNDS);
    expect(readConfig({ SANDPIT_MAX_MEMORY: "2Gi" }).bounds.max.memory).toBe("2Gi");
  });

  it("refuses zero and a floor above its ceiling at start-up", () => {
    expect(() => readConfig({ SANDPIT_MAX_CPU: "0" })).toThrow(/SANDPIT_MAX_CPU: must be/);
    expect(() => readConfig({ SANDPIT_MIN_MEMORY: "8Gi" })).toThrow(
      /SANDPIT_MIN_MEMORY \(8Gi\) is above SANDPIT_MAX_MEMORY \(4Gi\)/,
    );
  });
});
