#!/usr/bin/env node
/**
 * Builds @sandpit/sdk's published form into sdk/dist (the repository itself runs sdk/src
 * directly; package.json's publishConfig points the packed package at dist, see
 * scripts/pack.ts):
 *
 * - tsc (sdk/tsconfig.build.json): sdk/src and the parts of sandboxd the SDK imports (the wire
 *   protocol, the host environment helpers, the runners' location) as ES modules for Node 22,
 *   with declarations and source maps, under dist/sdk/src and dist/sandboxd/src;
 * - the `@sandpit/sandboxd/...` imports in that output made relative, so the package needs no
 *   sandboxd package of its own;
 * - sandboxd itself, for the local provider to start, as one bundled file
 *   (dist/sandboxd/bin/sandboxd.js, node-pty left outside: it is native and optional) with
 *   its runners beside it (dist/sandboxd/runners), where sandboxd's runners.ts looks.
 *
 *   node sdk/scripts/build.ts
 */
import { spawnSync } from "node:child_process";
import { cp, mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { bundleForNode } from "../../images/build.ts";

const sdkDir = fileURLToPath(new URL("../", import.meta.url));
const repoRoot = join(sdkDir, "..");
const dist = join(sdkDir, "dist");

/** Where each `@sandpit/sandboxd` import of the SDK lands in dist. */
const SANDBOXD_TARGETS: Record<string, string> = {
  "@sandpit/sandboxd/protocol": "sandboxd/src/protocol.js",
  "@sandpit/sandboxd/wire": "sandboxd/src/wire.js",
  "@sandpit/sandboxd/environment": "sandboxd/src/environment.js",
  "@sandpit/sandboxd/runners": "sandboxd/src/runners.js",
  "@sandpit/sandboxd/main": "sandboxd/bin/sandboxd.js",
};

/**
 * Replaces every string literal that is exactly one of `targets`' specifiers (in `import ...
 * from`, `import()`, `import.meta.resolve()`) with the path of its target relative to `file`.
 * Throws on a specifier of a package `targets` names (`@sandpit/<name>`) that it has no target
 * for; other `@sandpit/...` specifiers are left alone. (The CLI's build uses it too.)
 */
export function rewriteSpecifiers(
  text: string,
  file: string,
  root: string,
  targets: Record<string, string>,
): string {
  const packages = new Set(Object.keys(targets).map((s) => s.split("/").slice(0, 2).join("/")));
  return text.replace(
    /(["'])((@sandpit\/[\w-]+)(?:\/[\w-]+)*)\1/g,
    (m, q: string, spec: string, pkg: string) => {
      const target = targets[spec];
      if (!target) {
        if (packages.has(pkg)) throw new Error(`${file}: no build target for ${spec}`);
        return m;
      }
      let rel = relative(dirname(file), join(root, target));
      if (!rel.startsWith(".")) rel = `./${rel}`;
      return `${q}${rel}${q}`;
    },
  );
}

async function filesUnder(dir: string, suffixes: string[]): Promise<string[]> {
  const all = await readdir(dir, { recursive: true });
  return all.filter((f) => suffixes.some((s) => f.endsWith(s))).map((f) => join(dir, f));
}

export async function buildSdk(): Promise<void> {
  await rm(dist, { recursive: true, force: true });
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  const r = spawnSync(process.execPath, [tsc, "-p", join(sdkDir, "tsconfig.build.json")], {
    stdio: "inherit",
  });
  if (r.status !== 0) throw new Error(`tsc failed (exit ${r.status})`);

  for (const file of await filesUnder(dist, [".js", ".d.ts"])) {
    const text = await readFile(file, "utf8");
    const out = rewriteSpecifiers(text, file, dist, SANDBOXD_TARGETS);
    if (out !== text) await writeFile(file, out);
  }

  const bundle = await bundleForNode(
    join(repoRoot, "sandboxd", "src", "main.ts"),
    "sandboxd.js",
    ["node-pty"],
    "node22",
  );
  await mkdir(join(dist, "sandboxd", "bin"), { recursive: true });
  await writeFile(join(dist, "sandboxd", "bin", "sandboxd.js"), bundle);
  await cp(join(repoRoot, "sandboxd", "runners"), join(dist, "sandboxd", "runners"), {
    recursive: true,
  });
}

if (import.meta.main) await buildSdk();
