/**
 * The import graph of every package's sources: no circle (type-only imports count too), the
 * Sandbox API behind the operator's ./api free of controller code, the provisioner reaching the
 * operator only through its two doors, and the SDK's cloud providers free of sandboxd's server.
 */
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const PACKAGES = ["sandboxd", "sdk", "operator", "provisioner"] as const;
const exportsOf = Object.fromEntries(
  PACKAGES.map((p) => [
    p,
    JSON.parse(readFileSync(join(ROOT, p, "package.json"), "utf8")).exports as Record<
      string,
      string
    >,
  ]),
);
const PROVISIONER = join(ROOT, "provisioner/src");

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith(".ts"))
    .map((e) => join(e.parentPath, e.name));
}

/** Every module specifier a file imports or re-exports, type-only ones included. */
function specifiers(file: string): string[] {
  const text = readFileSync(file, "utf8");
  return [...text.matchAll(/^\s*(?:import|export)\s[^;]*?from\s+"([^"]+)"/gms)].map((m) => m[1]!);
}

/** Where a specifier leads inside the tree, or undefined for anything outside it. */
function target(from: string, spec: string): string | undefined {
  if (spec.startsWith(".")) return resolve(dirname(from), spec);
  const sub = /^@sandpit\/([a-z]+)(\/.*)?$/.exec(spec);
  const exports = sub ? exportsOf[sub[1]!] : undefined;
  const path = exports?.[`.${sub?.[2] ?? ""}`];
  return path ? join(ROOT, sub![1]!, path) : undefined;
}

const files = PACKAGES.flatMap((p) => sources(join(ROOT, p, "src")));
const graph = new Map(
  files.map((f) => [
    f,
    specifiers(f)
      .map((s) => target(f, s))
      .filter((t): t is string => t !== undefined),
  ]),
);
const name = (f: string) => relative(ROOT, f);

/** Every file the entry files reach through imports, themselves included. */
function reachable(entries: string[]): string[] {
  const reached = new Set<string>();
  const walk = (f: string) => {
    if (reached.has(f)) return;
    reached.add(f);
    for (const t of graph.get(f) ?? []) walk(t);
  };
  entries.forEach(walk);
  return [...reached];
}

describe("the import graph", () => {
  it("has no circle across the packages' sources", () => {
    const circles: string[] = [];
    const state = new Map<string, "open" | "done">();
    const visit = (f: string, path: string[]) => {
      if (state.get(f) === "done") return;
      if (state.get(f) === "open") {
        circles.push([...path.slice(path.indexOf(f)), f].map(name).join(" -> "));
        return;
      }
      state.set(f, "open");
      for (const t of graph.get(f) ?? []) visit(t, [...path, f]);
      state.set(f, "done");
    };
    for (const f of files) visit(f, []);
    expect(circles).toEqual([]);
  });

  it("keeps controller code out of the Sandbox API", () => {
    const outside = reachable([join(ROOT, "operator", exportsOf.operator!["./api"]!)])
      .map(name)
      .filter((f) => f.startsWith("operator/") && !f.startsWith("operator/src/api/"))
      // The API client the Sandbox API's users share, and the deadline its requests run under.
      .filter((f) => f !== "operator/src/kube/rest.ts" && f !== "operator/src/kube/deadline.ts");
    expect(outside).toEqual([]);
  });

  it("lets the provisioner reach the operator only through ./api and ./kube/client", () => {
    const used = new Set(
      sources(PROVISIONER).flatMap((f) =>
        specifiers(f).filter((s) => s.startsWith("@sandpit/operator")),
      ),
    );
    expect([...used].sort()).toEqual(["@sandpit/operator/api", "@sandpit/operator/kube/client"]);
    const relative = sources(PROVISIONER).flatMap((f) =>
      specifiers(f).filter((s) => s.includes("operator/src")),
    );
    expect(relative).toEqual([]);
  });

  it("keeps sandboxd's server out of the SDK's cloud providers", () => {
    const entries = ["e2b", "daytona", "kubernetes"].map((p) =>
      join(ROOT, "sdk", exportsOf.sdk![`./${p}`]!),
    );
    const server = reachable(entries)
      .map(name)
      .filter((f) => f.startsWith("sandboxd/src/"));
    expect(server.sort()).toEqual([
      "sandboxd/src/protocol.ts",
      "sandboxd/src/request-schemas.ts",
      "sandboxd/src/runners.ts",
      "sandboxd/src/wire.ts",
    ]);
  });
});
