/**
 * What running a command over a known sandboxd connection loads (the CLI's `exec` over its
 * ticket, cli/src/fast-exec.ts): the SDK's sandboxd client and instance and its errors, and no
 * schema library. zod alone is about 95 modules and most of such a process's start; it reaches
 * this path only through a value import of sandboxd's request schemas (@sandpit/sandboxd/protocol)
 * or the create options, which is what this test catches.
 */
import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";

/** Every module URL a fresh Node process resolves while importing `specifiers`. */
function loadedBy(specifiers: string[]): string[] {
  const script = `
    import { registerHooks } from "node:module";
    const seen = [];
    registerHooks({
      resolve(specifier, context, next) {
        const r = next(specifier, context);
        seen.push(r.url);
        return r;
      },
    });
    for (const s of ${JSON.stringify(specifiers)}) await import(s);
    process.stdout.write(JSON.stringify(seen));
  `;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
    cwd: new URL("..", import.meta.url),
    encoding: "utf8",
  });
  expect(r.stderr).toBe("");
  expect(r.status).toBe(0);
  return JSON.parse(r.stdout) as string[];
}

describe("the SDK's sandboxd client path", () => {
  it("loads no schema library", () => {
    const urls = loadedBy([
      "@sandpit/sdk/sandboxd-client",
      "@sandpit/sdk/sandboxd-instance",
      "@sandpit/sdk/errors",
    ]);
    expect(urls.some((u) => u.includes("/sdk/src/sandboxd-instance.ts"))).toBe(true);
    expect(urls.filter((u) => /\/node_modules\/zod\//.test(u))).toEqual([]);
    expect(urls.filter((u) => u.endsWith("/sandboxd/src/protocol.ts"))).toEqual([]);
  });

  it("the whole SDK entry does load them (the check above can see zod)", () => {
    const urls = loadedBy(["@sandpit/sdk"]);
    expect(urls.some((u) => /\/node_modules\/zod\//.test(u))).toBe(true);
  });
});
