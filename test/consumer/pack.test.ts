/** The pieces of packing that are plain functions: the published manifest and import rewriting. */
import { describe, expect, it } from "vitest";
import { publishedManifest, publishedWorkspaces } from "../../scripts/pack.ts";
import { rewriteSpecifiers } from "../../sdk/scripts/build.ts";

describe("publishedManifest", () => {
  it("takes exports and bin from publishConfig and drops what only the repository uses", () => {
    const m = publishedManifest({
      name: "@sandpit/x",
      version: "1.0.0",
      exports: { ".": "./src/index.ts" },
      bin: { x: "./src/main.ts" },
      scripts: { build: "node build.ts" },
      devDependencies: { e2b: "2.51.0" },
      dependencies: { zod: "4.6.7" },
      publishConfig: {
        exports: { ".": { types: "./dist/index.d.ts", default: "./dist/index.js" } },
        bin: { x: "./dist/main.js" },
        access: "public",
      },
    });
    expect(m).toEqual({
      name: "@sandpit/x",
      version: "1.0.0",
      exports: { ".": { types: "./dist/index.d.ts", default: "./dist/index.js" } },
      bin: { x: "./dist/main.js" },
      dependencies: { zod: "4.6.7" },
      publishConfig: { access: "public" },
    });
  });

  it("finds the SDK among the published workspaces", async () => {
    expect(await publishedWorkspaces()).toContain("sdk");
  });
});

describe("rewriteSpecifiers", () => {
  const targets = { "@sandpit/sandboxd/protocol": "sandboxd/src/protocol.js" };

  it("makes sandboxd imports relative to the file, in imports and declarations alike", () => {
    const js =
      "import { A } from \"@sandpit/sandboxd/protocol\";\nexport * from '@sandpit/sandboxd/protocol';";
    expect(rewriteSpecifiers(js, "/d/sdk/src/providers/x.js", "/d", targets)).toBe(
      "import { A } from \"../../../sandboxd/src/protocol.js\";\nexport * from '../../../sandboxd/src/protocol.js';",
    );
  });

  it("leaves other strings alone and refuses a sandboxd import it has no target for", () => {
    expect(
      rewriteSpecifiers('"@sandpit/sandboxd/protocol is a package"', "/d/a.js", "/d", targets),
    ).toBe('"@sandpit/sandboxd/protocol is a package"');
    expect(() =>
      rewriteSpecifiers('import("@sandpit/sandboxd")', "/d/a.js", "/d", targets),
    ).toThrow("/d/a.js: no build target for @sandpit/sandboxd");
  });
});
