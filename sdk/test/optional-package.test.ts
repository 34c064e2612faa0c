/** A provider whose SDK (an optional peer dependency) is missing says what to install. */
import { describe, expect, it } from "vitest";
import { isSandboxError } from "../src/errors.ts";
import { loadWithPackages } from "../src/optional-package.ts";

describe("loadWithPackages", () => {
  // Node's errors for an import of a package that is not installed (test/consumer gets the real
  // ones, from a project without the provider SDKs).
  it("turns a missing package into NOT_SUPPORTED naming the npm install to run", async () => {
    const missing = Object.assign(
      new Error("Cannot find package '@e2b/code-interpreter' imported from /app/x.js"),
      { code: "ERR_MODULE_NOT_FOUND" },
    );
    const err = await loadWithPackages("e2b", ["e2b", "@e2b/code-interpreter"], () =>
      Promise.reject(missing),
    ).catch((e: unknown) => e);
    expect(isSandboxError(err, "NOT_SUPPORTED")).toBe(true);
    expect((err as Error).message).toBe(
      "the e2b provider needs e2b and @e2b/code-interpreter, not installed here: " +
        "npm install e2b @e2b/code-interpreter",
    );
    expect((err as Error).cause).toBe(missing);
  });

  it("passes any other failure through unchanged", async () => {
    const boom = new Error("boom");
    await expect(
      loadWithPackages("docker", ["dockerode"], () => Promise.reject(boom)),
    ).rejects.toBe(boom);
    // Another package missing (a dependency of the SDK itself) is not the peer's to name.
    const other = Object.assign(new Error("Cannot find package 'ssh2' imported from /x.js"), {
      code: "ERR_MODULE_NOT_FOUND",
    });
    await expect(
      loadWithPackages("docker", ["dockerode"], () => Promise.reject(other)),
    ).rejects.toBe(other);
  });

  it("loads what is installed", async () => {
    const mod = await loadWithPackages("e2b", ["e2b"], () => import("e2b"));
    expect(typeof mod.Sandbox).toBe("function");
  });
});
