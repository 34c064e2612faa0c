/**
 * The import graph of the operator and the provisioner: no circle (type-only imports count too),
 * the Sandbox API behind ./api free of controller code, and the provisioner reaching the operator
 * only through its two doors.
 */
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const OPERATOR = join(ROOT, "operator/src");
const PROVISIONER = join(ROOT, "provisioner/src");

const exportsOf = JSON.parse(readFileSync(join(ROOT, "operator/package.json"), "utf8"))
  .exports as Record<string, string>;

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
  const sub = /^@sandpit\/operator(\/.*)?$/.exec(spec);
  if (!sub) return undefined;
  const path = exportsOf[`.${sub[1] ?? ""}`];
  return path ? join(ROOT, "operator", path) : undefined;
}

const files = [...sources(OPERATOR), ...sources(PROVISIONER)];
const graph = new Map(
  files.map((f) => [
    f,
    specifiers(f)
      .map((s) => target(f, s))
      .filter((t): t is string => t !== undefined),
  ]),
);
const name = (f: string) => relative(ROOT, f);

describe("the import graph", () => {
  it("has no circle across operator/src and provisioner/src", () => {
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
    const reached = new Set<string>();
    const walk = (f: string) => {
      if (reached.has(f)) return;
      reached.add(f);
      for (const t of graph.get(f) ?? []) walk(t);
    };
    walk(join(ROOT, "operator", exportsOf["./api"]!));
    const outside = [...reached]
      .map(name)
      .filter((f) => !f.startsWith("operator/src/api/") && f !== "operator/src/kube/rest.ts");
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
});
