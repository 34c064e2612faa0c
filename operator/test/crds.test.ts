/** The checked-in CRDs are exactly what the API types generate, and document every field. */
import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { crdFiles } from "../src/api/crd-files.ts";
import { crds } from "../src/api/crds.ts";
import { SandboxPoolSpec, SandboxSpec } from "../src/api/v1alpha1.ts";

/** Paths of schema properties without a description (`kubectl explain` would show nothing). */
function undocumented(schema: Record<string, unknown>, path: string): string[] {
  const missing: string[] = [];
  const props = (schema.properties ?? {}) as Record<string, Record<string, unknown>>;
  for (const [name, child] of Object.entries(props)) {
    const here = `${path}.${name}`;
    if (!child.description) missing.push(here);
    missing.push(...undocumented(child, here));
    const items = child.items as Record<string, unknown> | undefined;
    if (items) missing.push(...undocumented(items, `${here}[]`));
  }
  return missing;
}

describe("CRDs", () => {
  it("crds/ and the chart's CRD templates match what the API types generate (run `npm run crds` after changing them)", async () => {
    for (const { path, text } of crdFiles()) {
      expect(await readFile(path, "utf8"), path).toBe(text);
    }
  });

  it("has a description on every spec and status field", () => {
    for (const crd of crds()) {
      const root = (
        crd.spec as { versions: { schema: { openAPIV3Schema: Record<string, unknown> } }[] }
      ).versions[0]!.schema.openAPIV3Schema;
      const props = root.properties as Record<string, Record<string, unknown>>;
      expect(undocumented(props.spec!, "spec")).toEqual([]);
      expect(undocumented(props.status!, "status")).toEqual([]);
    }
  });

  it("is structural: no additionalProperties next to properties", () => {
    const walk = (node: unknown): void => {
      if (!node || typeof node !== "object") return;
      const n = node as Record<string, unknown>;
      if (n.properties) expect(n.additionalProperties).toBeUndefined();
      Object.values(n).forEach(walk);
    };
    crds().forEach(walk);
  });

  it("accepts a minimal Sandbox and fills defaults; rejects what users get wrong with readable messages", () => {
    expect(SandboxSpec.parse({ lifecycle: {} })).toMatchObject({ lifecycle: { suspended: false } });
    // Fields a pool's template can supply have no schema default, or it would hide the pool's.
    expect(SandboxSpec.parse({ storage: {} })).toEqual({ storage: {} });
    const bad = SandboxSpec.safeParse({ resources: { memory: "lots" }, threadId: "../x" });
    expect(bad.success).toBe(false);
    const messages = bad.error!.issues.map((i) => i.message).join("\n");
    expect(messages).toContain("Kubernetes quantity");
    expect(SandboxPoolSpec.safeParse({ template: {}, maxActive: 0 }).success).toBe(false);
  });
});
