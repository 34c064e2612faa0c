/**
 * The pieces of packing that are plain functions: the published manifest, the order of packing,
 * the check that a published package depends only on published ones, import rewriting, and what
 * the CLI's serve bundle leaves to npm.
 */
import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { packageOf, unresolvedImports } from "../../cli/scripts/build.ts";
import {
  checkPublishedDependencies,
  dependencyOrder,
  type Manifest,
  publishedManifest,
  publishedWorkspaces,
} from "../../scripts/pack.ts";
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

  it("publishes the CLI, after the SDK it depends on", async () => {
    const order = await publishedWorkspaces();
    expect(order).toContain("cli");
    expect(order.indexOf("sdk")).toBeLessThan(order.indexOf("cli"));
  });
});

describe("dependencyOrder", () => {
  const ws = (name: string, deps: string[] = []): Manifest => ({
    name,
    version: "1.0.0",
    dependencies: Object.fromEntries(deps.map((d) => [d, "1.0.0"])),
  });

  it("puts each workspace after the workspaces it depends on, else keeps the given order", () => {
    const order = dependencyOrder(
      new Map([
        ["cli", ws("@s/cli", ["@s/sdk", "zod"])],
        ["other", ws("@s/other")],
        ["sdk", ws("@s/sdk", ["@s/proto"])],
        ["proto", ws("@s/proto")],
      ]),
    );
    expect(order).toEqual(["proto", "sdk", "cli", "other"]);
  });

  it("refuses a cycle", () => {
    expect(() =>
      dependencyOrder(
        new Map([
          ["a", ws("@s/a", ["@s/b"])],
          ["b", ws("@s/b", ["@s/a"])],
        ]),
      ),
    ).toThrow("form a cycle");
  });
});

describe("checkPublishedDependencies", () => {
  it("refuses a published manifest that depends on a private workspace", async () => {
    await expect(
      checkPublishedDependencies("cli", {
        name: "@sandpit/cli",
        version: "0.1.0",
        dependencies: { "@sandpit/sdk": "0.1.0", "@sandpit/provisioner": "0.1.0" },
      }),
    ).rejects.toThrow("cli: depends on @sandpit/provisioner, which is not published");
  });

  it("accepts the CLI as it is published", async () => {
    const cli = JSON.parse(
      await readFile(new URL("../../cli/package.json", import.meta.url), "utf8"),
    ) as Manifest;
    await expect(checkPublishedDependencies("cli", publishedManifest(cli))).resolves.toBe(
      undefined,
    );
  });
});

describe("the CLI's serve bundle: what it leaves to npm", () => {
  it("names a specifier's package", () => {
    expect(packageOf("@bufbuild/protobuf/wkt")).toBe("@bufbuild/protobuf");
    expect(packageOf("express")).toBe("express");
    expect(packageOf("zod/v4")).toBe("zod");
  });

  it("finds imports that neither a dependency nor a published SDK export provides", () => {
    const deps = { "@sandpit/sdk": "0.1.0", express: "5.3.0" };
    const sdkExports = { ".": {}, "./errors": {} };
    expect(
      unresolvedImports(
        [
          "node:http",
          "fs",
          "express",
          "@sandpit/sdk",
          "@sandpit/sdk/errors",
          "@sandpit/sdk/sandboxd-client",
          "pino",
        ],
        deps,
        sdkExports,
      ),
    ).toEqual(["@sandpit/sdk/sandboxd-client", "pino"]);
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

  it("leaves other packages' imports alone", () => {
    const js = 'import { a } from "@sandpit/sdk/errors"; import("@sandpit/provisioner/serve");';
    expect(rewriteSpecifiers(js, "/d/a.js", "/d", targets)).toBe(js);
    expect(
      rewriteSpecifiers(js, "/d/commands/serve.js", "/d", {
        "@sandpit/provisioner/serve": "serve.js",
      }),
    ).toBe('import { a } from "@sandpit/sdk/errors"; import("../serve.js");');
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
