/** The committed API reference is exactly what the generator makes from the API types. */
import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { crds } from "../src/api/crds.ts";
import { REFERENCE_PATH, apiReference } from "../scripts/gen-api-reference.ts";

interface Node {
  properties?: Record<string, Node>;
  items?: Node;
}

/** Every field path under `node`, as the reference writes them (`a.b[].c`). */
function paths(node: Node, path: string): string[] {
  return Object.entries(node.properties ?? {}).flatMap(([name, child]) => [
    `${path}.${name}`,
    ...paths(child, `${path}.${name}`),
    ...(child.items ? paths(child.items, `${path}.${name}[]`) : []),
  ]);
}

describe("API reference", () => {
  it("docs/api/sandbox.md matches what the API types generate (run `npm run crds` after changing them)", async () => {
    expect(await readFile(REFERENCE_PATH, "utf8")).toBe(await apiReference());
  });

  it("has a row for every spec and status field of both kinds", async () => {
    const text = await apiReference();
    for (const crd of crds()) {
      const schema = (
        crd.spec as {
          versions: { schema: { openAPIV3Schema: { properties: Record<string, Node> } } }[];
        }
      ).versions[0]!.schema.openAPIV3Schema.properties;
      const fields = [...paths(schema.spec!, "spec"), ...paths(schema.status!, "status")];
      expect(fields.length).toBeGreaterThan(10);
      for (const field of fields) expect(text).toContain(`| \`${field}\``);
    }
  });
});
