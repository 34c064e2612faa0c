/** The crossing between a package spec and a Sandbox resource's package: each undoes the other. */
import fc from "fast-check";
import { describe, expect, test } from "vitest";
import { packageOfSpec, packageSpec } from "../src/api/packages.ts";

describe("package specs", () => {
  test.each([
    ["numpy", { name: "numpy" }],
    ["numpy==2.1.0", { name: "numpy", version: "2.1.0" }],
    ["zod@4", { name: "zod", version: "4" }],
    ["@scope/pkg@1.2.3", { name: "@scope/pkg", version: "1.2.3" }],
    ["@scope/pkg", { name: "@scope/pkg" }],
  ])("%s", (spec, expected) => {
    expect(packageOfSpec(spec)).toEqual(expected);
  });

  const word = fc.stringMatching(/^[a-z][a-z0-9._-]{0,20}$/);
  const version = fc
    .stringMatching(/^[0-9][0-9a-z.*^~<>=-]{0,12}$/)
    .filter((v) => !v.includes("=="));
  test("a pip spec survives the resource's form", () => {
    fc.assert(
      fc.property(word, fc.option(version, { nil: undefined }), (name, v) => {
        const spec = v ? `${name}==${v}` : name;
        expect(packageSpec("python", packageOfSpec(spec))).toBe(spec);
      }),
    );
  });
  test("an npm spec survives the resource's form, scoped or not", () => {
    fc.assert(
      fc.property(
        fc.boolean(),
        word,
        word,
        fc.option(version, { nil: undefined }),
        (scoped, scope, name, v) => {
          const pkg = scoped ? `@${scope}/${name}` : name;
          const spec = v ? `${pkg}@${v}` : pkg;
          expect(packageSpec("typescript", packageOfSpec(spec))).toBe(spec);
        },
      ),
    );
  });
});
